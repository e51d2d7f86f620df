"""Darknet's im2col.c and col2im.c, loop by loop: the spec that darknumba.kernels.im2col (one
image, a batch side by side, the stride-1 shifted runs) and kernels.direct are tested against.

data_im:  channels x height x width, flat
data_col: (channels * ksize * ksize) x (height_col * width_col), flat; row c is
          (channel c_im, kernel row ky, kernel column kx) with c = (c_im * ksize + ky) * ksize + kx
height_col = (height + 2 * pad - ksize) / stride + 1 (C integer division), width_col alike.
Entries are copied (im2col) or added (col2im) one at a time in Darknet's loop order, in the
arrays' own dtype, so col2im rounds its sums as Darknet does.
"""


def out_size(n, ksize, stride, pad):
    return (n + 2 * pad - ksize) // stride + 1


def im2col_get_pixel(im, height, width, row, col, channel, pad):
    """Pixel (row - pad, col - pad) of `channel`; 0 where that falls in the zero padding."""
    row -= pad
    col -= pad
    if row < 0 or col < 0 or row >= height or col >= width:
        return 0.0
    return im[col + width * (row + height * channel)]


def im2col_cpu(data_im, channels, height, width, ksize, stride, pad, data_col):
    """data_col[c, h * width_col + w] = the pixel under kernel tap (ky, kx) of channel c_im
    when the kernel's corner sits at (h * stride - pad, w * stride - pad)."""
    height_col = out_size(height, ksize, stride, pad)
    width_col = out_size(width, ksize, stride, pad)
    for c in range(channels * ksize * ksize):
        kx = c % ksize
        ky = (c // ksize) % ksize
        c_im = c // ksize // ksize
        for h in range(height_col):
            for w in range(width_col):
                data_col[(c * height_col + h) * width_col + w] = im2col_get_pixel(
                    data_im, height, width, ky + h * stride, kx + w * stride, c_im, pad)


def col2im_add_pixel(im, height, width, row, col, channel, pad, value):
    """Adds value into pixel (row - pad, col - pad) of `channel`; nothing in the padding."""
    row -= pad
    col -= pad
    if row < 0 or col < 0 or row >= height or col >= width:
        return
    im[col + width * (row + height * channel)] += value


def col2im_cpu(data_col, channels, height, width, ksize, stride, pad, data_im):
    """The adjoint of im2col_cpu: every column entry is added back into the pixel it was
    read from (data_im is added into, not overwritten)."""
    height_col = out_size(height, ksize, stride, pad)
    width_col = out_size(width, ksize, stride, pad)
    for c in range(channels * ksize * ksize):
        kx = c % ksize
        ky = (c // ksize) % ksize
        c_im = c // ksize // ksize
        for h in range(height_col):
            for w in range(width_col):
                col2im_add_pixel(data_im, height, width, ky + h * stride, kx + w * stride, c_im,
                                 pad, data_col[(c * height_col + h) * width_col + w])
