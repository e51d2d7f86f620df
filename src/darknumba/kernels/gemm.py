"""GEMM. `gemm_cpu` is the line-by-line port of Darknet's `gemm.c` (the readable reference the
tests use); `gemm` is the fast path the layers call: one BLAS sgemm through numpy.

C = ALPHA * op(A) @ op(B) + BETA * C, row-major, with leading dimensions as in C.
"""
import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def gemm_cpu(TA, TB, M, N, K, ALPHA, A, lda, B, ldb, BETA, C, ldc):
    alpha = np.float32(ALPHA)
    beta = np.float32(BETA)
    for i in prange(M):
        if beta != 1:
            for j in range(N):
                C[i * ldc + j] *= beta
        if not TA and not TB:          # gemm_nn: accumulates over k in order, as C does
            for k in range(K):
                a_part = alpha * A[i * lda + k]
                for j in range(N):
                    C[i * ldc + j] += a_part * B[k * ldb + j]
        elif not TA and TB:            # gemm_nt
            for j in range(N):
                s = np.float32(0.0)
                for k in range(K):
                    s += alpha * A[i * lda + k] * B[j * ldb + k]
                C[i * ldc + j] += s
        elif TA and not TB:            # gemm_tn
            for k in range(K):
                a_part = alpha * A[k * lda + i]
                for j in range(N):
                    C[i * ldc + j] += a_part * B[k * ldb + j]
        else:                          # gemm_tt
            for j in range(N):
                s = np.float32(0.0)
                for k in range(K):
                    s += alpha * A[i + k * lda] * B[k + j * ldb]
                C[i * ldc + j] += s


def gemm(TA, TB, M, N, K, ALPHA, A, B, BETA, C):
    """Fast GEMM on 2-D views: C (M x N) = ALPHA*op(A)@op(B) + BETA*C, in place, via BLAS.

    A, B and C are float32 arrays (any shape that reshapes to the stated matrix without a copy);
    when BETA is 0 the product goes straight into C with no temporary."""
    a = A.reshape((K, M) if TA else (M, K))
    b = B.reshape((N, K) if TB else (K, N))
    c = C.reshape(M, N)
    if TA:
        a = a.T
    if TB:
        b = b.T
    # A @ B^T with a long reduction into a small C (weight gradients: K = out_h*out_w) runs
    # up to 10x faster in OpenBLAS as the transposed product (B @ A^T)^T (measured here).
    transposed = TB and not TA and K > M
    if BETA == 0 and ALPHA == 1 and not transposed:
        np.matmul(a, b, out=c)
        return
    if transposed and ALPHA == 1 and BETA == 1 and c.flags.c_contiguous:
        add_transposed(c, np.matmul(b.T, a.T))      # numpy's strided += is slow on large C
        return
    prod = np.matmul(b.T, a.T).T if transposed else np.matmul(a, b)
    if ALPHA != 1:
        prod *= np.float32(ALPHA)
    if BETA == 0:
        c[...] = prod
    else:
        if BETA != 1:
            c *= np.float32(BETA)
        c += prod


@njit(parallel=True, cache=True)
def add_transposed(dst, src):
    """dst (m x k) += src^T, src being k x m: in 64 x 64 tiles so both sides stay in cache,
    parallel over tiles of dst's rows (numpy's strided += took 30 ms for yolov3-tiny's
    1024 x 4608 weight gradient, this ~2 ms)."""
    m, k = dst.shape
    T = 64
    for ib in prange((m + T - 1) // T):
        i0 = ib * T
        i1 = min(m, i0 + T)
        for j0 in range(0, k, T):
            j1 = min(k, j0 + T)
            for i in range(i0, i1):
                row = dst[i]
                for j in range(j0, j1):
                    row[j] += src[j, i]
