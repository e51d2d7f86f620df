"""@njit kernels, and beside a kernel with many optional arrays a thin keyword wrapper that
names them. Each takes C-contiguous float32 buffers the caller owns and writes in place;
a kernel's only allocations are small per-call scratch (e.g. a row strip per parallel task),
never a buffer the size of a layer. Names and argument order follow Darknet's C (`blas.c`,
`im2col.c`, ...)."""

from .cache_stamp import install as _stamp_kernels

_stamp_kernels()        # before any kernel exists: their cache index stamped with what they call
