"""The [crop] layer's copy (Darknet's `forward_crop_layer`)."""
import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def crop_cpu(inp, batch, c, h, w, out_h, out_w, dh, dw, flip, scale, trans, output):
    """output[b,c,i,j] = input[b,c,i+dh, col]*scale + trans, col = j+dw or w-dw-j-1 (flip)."""
    s = np.float32(scale)
    t = np.float32(trans)
    for bc in prange(batch * c):
        for i in range(out_h):
            row = i + dh
            for j in range(out_w):
                col = w - dw - j - 1 if flip else j + dw
                output[(bc * out_h + i) * out_w + j] = inp[col + w * (row + h * bc)] * s + t
