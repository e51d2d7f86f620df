"""From stb_image's JPEG coefficients to its pixels (stb_image.h): dequantisation and the
integer IDCT (stbi__idct_simd, the SSE2 one an x86-64 build of either Darknet runs), chroma
upsampling (resample_row_1, stbi__resample_row_v_2, _h_2, _hv_2, _generic: stb's "fancy"
upsampling, centred and rounded as stb rounds) and colour (stbi__YCbCr_to_RGB_row, CMYK and
YCCK through stbi__blinn_8x8, grey through stbi__compute_y). Serial, integer arithmetic only.

Dimension legend: a component's plane is w2 x h2 bytes (its MCU-padded size, row stride w2) at
its own offset in one flat uint8 array; the output is (img_y, img_x, n) uint8, n the channels
asked for (stb's req_comp).
"""
import math

import numpy as np
from numba import njit

from .stb_jpeg import C_CH, C_CW, C_H, C_OFF, C_POFF, C_TQ, C_V, C_Y


def _fixed(c: float) -> int:
    """stbi__f2f: a float32 constant times 4096, plus 0.5, truncated toward zero (so the
    negative constants round up)."""
    return math.trunc(float(np.float32(c)) * 4096 + 0.5)


# the IDCT's twelve constants (IJG jidctint's, 12-bit)
K0541, K0765, KM1847 = _fixed(0.5411961), _fixed(0.765366865), _fixed(-1.847759065)
K1175, KM0899, KM2562 = _fixed(1.175875602), _fixed(-0.899976223), _fixed(-2.562915447)
K0298, K2053, K3072, K1501 = (_fixed(0.298631336), _fixed(2.053119869), _fixed(3.072711026),
                              _fixed(1.501321110))
KM1961, KM0390 = _fixed(-1.961570560), _fixed(-0.390180644)
# YCbCr -> RGB, 12-bit, shifted 8 more (stbi__float2fixed: float arithmetic, then truncated)
CR_R = int(np.float32(1.40200) * np.float32(4096.0) + np.float32(0.5)) << 8
CR_G = int(np.float32(0.71414) * np.float32(4096.0) + np.float32(0.5)) << 8
CB_G = int(np.float32(0.34414) * np.float32(4096.0) + np.float32(0.5)) << 8
CB_B = int(np.float32(1.77200) * np.float32(4096.0) + np.float32(0.5)) << 8
# colour modes (vision/stb_jpeg.py picks one as load_jpeg_image does)
RGB_COPY, YCC, CMYK, YCCK, GREY3, Y_OF_RGB, Y_OF_CMYK, Y_OF_YCCK, FIRST = range(9)


@njit(cache=True, inline="always")
def _w16(v):
    """A 16-bit lane's wrap-around."""
    return ((v + 32768) & 0xFFFF) - 32768


@njit(cache=True, inline="always")
def _sat16(v):
    """A 16-bit pack's saturation (_mm_packs_epi32)."""
    return min(max(v, -32768), 32767)


@njit(cache=True, inline="always")
def _idct_1d(s0, s1, s2, s3, s4, s5, s6, s7, bias, shift):
    """One 8-point pass, as the SSE2 code computes it: the even sums in 16 bits, products in
    32, each output (x +- odd term) >> shift, saturated to 16 bits. Outputs 0..7."""
    e = _w16(s0 + s4) * 4096 + bias
    d = _w16(s0 - s4) * 4096 + bias
    t2 = s2 * K0541 + s6 * (K0541 + KM1847)
    t3 = s2 * (K0541 + K0765) + s6 * K0541
    x0, x3, x1, x2 = e + t3, e - t3, d + t2, d - t2
    s17 = _w16(s1 + s7)
    s35 = _w16(s3 + s5)
    y4 = s17 * (K1175 + KM0899) + s35 * K1175
    y5 = s17 * K1175 + s35 * (K1175 + KM2562)
    x4 = s7 * (KM1961 + K0298) + s3 * KM1961 + y4
    x5 = s5 * (KM0390 + K2053) + s1 * KM0390 + y5
    x6 = s7 * KM1961 + s3 * (KM1961 + K3072) + y5
    x7 = s5 * KM0390 + s1 * (KM0390 + K1501) + y4
    return (_sat16((x0 + x7) >> shift), _sat16((x1 + x6) >> shift),
            _sat16((x2 + x5) >> shift), _sat16((x3 + x4) >> shift),
            _sat16((x3 - x4) >> shift), _sat16((x2 - x5) >> shift),
            _sat16((x1 - x6) >> shift), _sat16((x0 - x7) >> shift))


@njit(cache=True)
def idct_block(coef, o, planes, p, stride, tmp):
    """stbi__idct_simd: the 64 coefficients at coef[o:] (row-major, dequantised) to 8 x 8
    pixels at planes[p:] (row stride `stride`): columns (rounding bias 512, >> 10), then rows
    (bias 65536 + 128 << 17: round and recentre, >> 17), clamped to 0..255."""
    for c in range(8):
        r = _idct_1d(np.int64(coef[o + c]), np.int64(coef[o + 8 + c]),
                     np.int64(coef[o + 16 + c]), np.int64(coef[o + 24 + c]),
                     np.int64(coef[o + 32 + c]), np.int64(coef[o + 40 + c]),
                     np.int64(coef[o + 48 + c]), np.int64(coef[o + 56 + c]), 512, 10)
        for k in range(8):
            tmp[8 * k + c] = r[k]
    for k in range(8):
        b = 8 * k
        r = _idct_1d(tmp[b], tmp[b + 1], tmp[b + 2], tmp[b + 3], tmp[b + 4], tmp[b + 5],
                     tmp[b + 6], tmp[b + 7], 65536 + (128 << 17), 17)
        q = p + k * stride
        for c in range(8):
            planes[q + c] = min(max(r[c], 0), 255)


@njit(cache=True)
def idct_components(coef, comps, n_comp, dq, dequantize, planes):
    """Every block of every component to pixels; `dequantize` (progressive files, whose
    coefficients are kept unscaled until the end: stbi__jpeg_finish) multiplies each by its
    table's entry first, in 16 bits as stb's short."""
    tmp = np.zeros(64, np.int64)
    block = np.zeros(64, np.int16)
    for n in range(n_comp):
        cw, ch = comps[n, C_CW], comps[n, C_CH]
        q = dq[comps[n, C_TQ]]
        for by in range(ch):
            for bx in range(cw):
                o = comps[n, C_OFF] + 64 * (by * cw + bx)
                if dequantize:
                    for i in range(64):
                        block[i] = _w16(np.int64(coef[o + i]) * q[i])
                    src, so = block, 0
                else:
                    src, so = coef, o
                idct_block(src, so, planes, comps[n, C_POFF] + by * 8 * cw * 8 + bx * 8,
                           cw * 8, tmp)


@njit(cache=True)
def _resample(planes, near, far, w, hs, vs, line):
    """One component row (w samples at planes[near:], the neighbouring row at planes[far:])
    widened hs times into line[:w * hs]: stb's resample_row_* for (hs, vs)."""
    if hs == 1 and vs == 1:
        for i in range(w):
            line[i] = planes[near + i]
    elif hs == 1 and vs == 2:
        for i in range(w):
            line[i] = (3 * np.int64(planes[near + i]) + planes[far + i] + 2) >> 2
    elif hs == 2 and vs == 1:
        a = planes[near:near + w]
        if w == 1:
            line[0] = line[1] = a[0]
            return
        line[0] = a[0]
        line[1] = (3 * np.int64(a[0]) + a[1] + 2) >> 2
        for i in range(1, w - 1):
            m = 3 * np.int64(a[i]) + 2
            line[2 * i] = (m + a[i - 1]) >> 2
            line[2 * i + 1] = (m + a[i + 1]) >> 2
        # stb's last pair: 3 parts of the sample before the last, 1 of the last (not 3:1 the
        # other way round), then the last sample itself
        line[2 * w - 2] = (3 * np.int64(a[w - 2]) + a[w - 1] + 2) >> 2
        line[2 * w - 1] = a[w - 1]
    elif hs == 2 and vs == 2:
        t1 = 3 * np.int64(planes[near]) + planes[far]
        if w == 1:
            line[0] = line[1] = (t1 + 2) >> 2
            return
        line[0] = (t1 + 2) >> 2
        for i in range(1, w):
            t0 = t1
            t1 = 3 * np.int64(planes[near + i]) + planes[far + i]
            line[2 * i - 1] = (3 * t0 + t1 + 8) >> 4
            line[2 * i] = (3 * t1 + t0 + 8) >> 4
        line[2 * w - 1] = (t1 + 2) >> 2
    else:
        for i in range(w):
            for j in range(hs):
                line[i * hs + j] = planes[near + i]


@njit(cache=True, inline="always")
def _blinn(x, y):
    """stbi__blinn_8x8: x * y / 255, rounded."""
    t = x * y + 128
    return (t + (t >> 8)) >> 8


@njit(cache=True, inline="always")
def _grey(r, g, b):
    """stbi__compute_y."""
    return (r * 77 + g * 150 + 29 * b) >> 8


@njit(cache=True, inline="always")
def _ycc(y, cb, cr):
    """stbi__YCbCr_to_RGB_row for one pixel: (r, g, b) clamped to 0..255. The blue-difference
    term of green is floored to a multiple of 2^16 first, as stb's reduced precision does."""
    yf = (y << 20) + (1 << 19)
    cr -= 128
    cb -= 128
    r = (yf + cr * CR_R) >> 20
    g = (yf - cr * CR_G + ((cb * -CB_G) & -65536)) >> 20
    b = (yf + cb * CB_B) >> 20
    return min(max(r, 0), 255), min(max(g, 0), 255), min(max(b, 0), 255)


@njit(cache=True)
def to_pixels(planes, comps, decode_n, img_x, img_y, h_max, v_max, mode, out):
    """load_jpeg_image's resample-and-convert loop: for each output row, each decoded
    component's row upsampled (rows chosen by stb's ystep/ypos walk: nearer row first, the
    other one as the far neighbour, the last row repeated at the bottom edge), then one colour
    `mode` into out (img_y, img_x, n); n of 2 or 4 gets alpha 255."""
    n = out.shape[2]
    lines = np.zeros((4, img_x + 3), np.int64)
    ystep = np.zeros(4, np.int64)
    ypos = np.zeros(4, np.int64)
    line0 = np.zeros(4, np.int64)
    line1 = np.zeros(4, np.int64)
    for k in range(decode_n):
        vs = v_max // comps[k, C_V]
        ystep[k] = vs >> 1
        line0[k] = line1[k] = comps[k, C_POFF]
    for j in range(img_y):
        for k in range(decode_n):
            hs, vs = h_max // comps[k, C_H], v_max // comps[k, C_V]
            w_lores = (img_x + hs - 1) // hs
            bottom = ystep[k] >= (vs >> 1)
            near, far = (line1[k], line0[k]) if bottom else (line0[k], line1[k])
            _resample(planes, near, far, w_lores, hs, vs, lines[k])
            ystep[k] += 1
            if ystep[k] >= vs:
                ystep[k] = 0
                line0[k] = line1[k]
                ypos[k] += 1
                if ypos[k] < comps[k, C_Y]:
                    line1[k] += comps[k, C_CW] * 8
        for i in range(img_x):
            c0, c1, c2, c3 = lines[0, i], lines[1, i], lines[2, i], lines[3, i]
            if mode == RGB_COPY:
                r, g, b = c0, c1, c2
            elif mode == YCC:
                r, g, b = _ycc(c0, c1, c2)
            elif mode == CMYK:
                r, g, b = _blinn(c0, c3), _blinn(c1, c3), _blinn(c2, c3)
            elif mode == YCCK:
                r, g, b = _ycc(c0, c1, c2)
                r, g, b = _blinn(255 - r, c3), _blinn(255 - g, c3), _blinn(255 - b, c3)
            elif mode == GREY3:
                r = g = b = c0
            elif mode == Y_OF_RGB:
                r = g = b = _grey(c0, c1, c2)
            elif mode == Y_OF_CMYK:
                r = g = b = _grey(_blinn(c0, c3), _blinn(c1, c3), _blinn(c2, c3))
            elif mode == Y_OF_YCCK:
                r = g = b = _blinn(255 - c0, c3)
            else:
                r = g = b = c0
            if n >= 3:
                out[j, i, 0] = r
                out[j, i, 1] = g
                out[j, i, 2] = b
                if n == 4:
                    out[j, i, 3] = 255
            else:
                out[j, i, 0] = r
                if n == 2:
                    out[j, i, 1] = 255
