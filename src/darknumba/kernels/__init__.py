"""@njit kernels only. Each takes C-contiguous float32 buffers the caller owns, writes in place,
and allocates nothing. Names and argument order follow Darknet's C (`blas.c`, `im2col.c`, ...)."""
