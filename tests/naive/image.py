"""Darknet's image.c arithmetic, pixel by pixel in float32 as C computes it."""
import numpy as np


def resize_image(im, w, h):
    """resize_image written out pixel by pixel in float32 (the spec for the vectorised one)."""
    f = np.float32
    c, ih, iw = im.shape
    part = np.zeros((c, ih, w), np.float32)
    ws = f(iw - 1) / f(w - 1) if w > 1 else f(0)
    hs = f(ih - 1) / f(h - 1) if h > 1 else f(0)
    for k in range(c):
        for r in range(ih):
            for x in range(w):
                if x == w - 1 or iw == 1:
                    part[k, r, x] = im[k, r, iw - 1]
                else:
                    sx = f(x) * ws
                    ix = int(sx)
                    dx = f(sx - f(ix))
                    part[k, r, x] = (f(1) - dx) * im[k, r, ix] + dx * im[k, r, ix + 1]
    out = np.zeros((c, h, w), np.float32)
    for k in range(c):
        for r in range(h):
            sy = f(r) * hs
            iy = int(sy)
            dy = f(sy - f(iy))
            for x in range(w):
                out[k, r, x] = (f(1) - dy) * part[k, iy, x]
            if r == h - 1 or ih == 1:
                continue
            for x in range(w):
                out[k, r, x] += dy * part[k, iy + 1, x]
    return out
