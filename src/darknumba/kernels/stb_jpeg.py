"""JPEG entropy decoding as stb_image decodes it (stb_image.h, the decoder both Darknets build:
stbi__grow_buffer_unsafe, stbi__jpeg_huff_decode, stbi__extend_receive, stbi__jpeg_decode_block,
stbi__jpeg_decode_block_prog_dc / _prog_ac, stbi__parse_entropy_coded_data). Serial: a scan's
bits are one sequence.

Dimension legend: a component's coefficients are blocks of 64 int16 in row-major order within
the block (already de-zigzagged), blocks row-major over the component's cw x ch block grid, all
components in one flat array at their own offsets.

The bit reader keeps stb's window of 32 bits (`state[WINDOW]`, the next bit at bit 31) holding
`state[BITS]` valid bits: bytes enter it until it holds more than 24 bits; 0xFF 0x00 is a
stuffed 0xFF, 0xFF then anything else a marker (kept in `state[MARKER]`), after which the window
fills with zero bits (stb's `nomore`) until a restart resets it. These are the places where a
damaged stream's result depends on the reader; a well-formed one decodes to the same
coefficients under any correct JPEG decoder.
"""
import numpy as np
from numba import njit

# the reader's state, one int64 array shared with vision/stb_jpeg.py
POS, WINDOW, BITS, NOMORE, MARKER, EOB_RUN, TODO = range(7)
STATE_SIZE = 8
MARKER_NONE = 0xFF
LOOKAHEAD = 9               # codes up to 9 bits long are found with one table lookup
# a component's row in the `comps` table
C_H, C_V, C_TQ, C_HD, C_HA, C_X, C_Y, C_CW, C_CH, C_OFF, C_POFF = range(11)
COMP_FIELDS = 11
# the scan's parameters (`scan`)
S_PROGRESSIVE, S_N, S_ORDER, S_START, S_END, S_AH, S_AL, S_RESTART, S_MCU_X, S_MCU_Y = \
    0, 1, 2, 6, 7, 8, 9, 10, 11, 12
SCAN_FIELDS = 13
# what decode_scan returns
OK, BAD_CODE, BAD_DELTA, BAD_MERGE = 0, 1, 2, 3
# one Huffman table's row in `huff` (8 rows: DC tables 0..3, AC tables 4..7): the symbol and
# code length of every LOOKAHEAD-bit prefix that starts a short code (length 0: a longer code);
# per code length k the largest code (-1: none), the smallest and where its symbols start; the
# symbols; whether the file defined the table
H_LOOK_SYM, H_LOOK_LEN, H_MAXCODE, H_MINCODE, H_VALPTR, H_VALUES, H_DEFINED = \
    0, 512, 1024, 1041, 1058, 1075, 1331
HUFF_FIELDS = 1332


def _unzigzag() -> np.ndarray:
    """The row-major index of the k-th coefficient in zigzag order (anti-diagonals r + c, walked
    upwards (column rising) on even ones, downwards on odd ones), then 15 more 63s: a damaged
    run past the block's end lands on the last coefficient, as stb lets it."""
    cells = sorted((r + c, c if (r + c) % 2 == 0 else r, 8 * r + c)
                   for r in range(8) for c in range(8))
    out = np.array([cell[2] for cell in cells] + [63] * 15, dtype=np.int64)
    out.setflags(write=False)
    return out


UNZIGZAG = _unzigzag()


@njit(cache=True, inline="always")
def _next_byte(buf, state):
    """stbi__get8: the next byte, 0 past the end."""
    p = state[POS]
    if p >= buf.shape[0]:
        return 0
    state[POS] = p + 1
    return np.int64(buf[p])


@njit(cache=True)
def _fill(buf, state):
    """stbi__grow_buffer_unsafe: bytes into the window until it holds more than 24 bits, or a
    marker is met (then zero bits from the next call on)."""
    while True:
        b = np.int64(0)
        if state[NOMORE] == 0:
            b = _next_byte(buf, state)
            if b == 0xFF:
                c = _next_byte(buf, state)
                while c == 0xFF:                   # fill bytes before a marker
                    c = _next_byte(buf, state)
                if c != 0:
                    state[MARKER] = c
                    state[NOMORE] = 1
                    return
        state[WINDOW] = (state[WINDOW] | (b << (24 - state[BITS]))) & 0xFFFFFFFF
        state[BITS] += 8
        if state[BITS] > 24:
            return


@njit(cache=True, inline="always")
def _drop(state, n):
    state[WINDOW] = (state[WINDOW] << n) & 0xFFFFFFFF
    state[BITS] -= n


@njit(cache=True, inline="always")
def _symbol(buf, state, huff, t):
    """stbi__jpeg_huff_decode with table t: the next symbol, or -1 for no valid code. A table the
    file never defined reads as stb's zeroed one: symbol 0 from no bits."""
    if state[BITS] < 16:
        _fill(buf, state)
    if huff[t, H_DEFINED] == 0:
        return np.int64(0)
    w = state[WINDOW]
    peek = w >> (32 - LOOKAHEAD)
    n = huff[t, H_LOOK_LEN + peek]
    if n > 0:
        if n > state[BITS]:
            return np.int64(-1)
        _drop(state, n)
        return huff[t, H_LOOK_SYM + peek]
    for k in range(LOOKAHEAD + 1, 17):      # the canonical code's first k bits, k = 10..16
        code = w >> (32 - k)
        if code <= huff[t, H_MAXCODE + k]:
            if k > state[BITS]:
                return np.int64(-1)
            _drop(state, k)
            i = huff[t, H_VALPTR + k] + code - huff[t, H_MINCODE + k]
            return huff[t, H_VALUES + i] if 0 <= i < 256 else np.int64(-1)
    state[BITS] -= 16                       # stb drops 16 bits on a code it cannot find
    return np.int64(-1)


@njit(cache=True, inline="always")
def _bits(buf, state, n):
    """stbi__jpeg_get_bits: n bits as an unsigned number (0 when the stream has run out)."""
    if state[BITS] < n:
        _fill(buf, state)
    if state[BITS] < n:
        return np.int64(0)
    v = state[WINDOW] >> (32 - n)
    _drop(state, n)
    return v


@njit(cache=True, inline="always")
def _extend(buf, state, n):
    """stbi__extend_receive: n bits as JPEG's signed magnitude (a leading 0 bit: negative,
    v - (2^n - 1))."""
    if state[BITS] < n:
        _fill(buf, state)
    if state[BITS] < n:
        return np.int64(0)
    w = state[WINDOW]
    v = w >> (32 - n)
    _drop(state, n)
    if (w >> 31) == 0:
        v -= (np.int64(1) << n) - 1
    return v


@njit(cache=True, inline="always")
def _wrap16(v):
    """A C (short) cast."""
    return ((v + 32768) & 0xFFFF) - 32768


@njit(cache=True)
def _block_baseline(buf, state, coef, o, comp, hd, ha, pred, dq, huff):
    """stbi__jpeg_decode_block: one block's DC difference and AC run/levels, dequantised as
    stb stores them ((short)(level * q))."""
    if state[BITS] < 16:
        _fill(buf, state)
    t = _symbol(buf, state, huff, hd)
    if t < 0 or t > 15:
        return BAD_CODE
    for i in range(64):
        coef[o + i] = 0
    diff = _extend(buf, state, t) if t else np.int64(0)
    dc = pred[comp] + diff
    if dc < -2147483648 or dc > 2147483647:
        return BAD_DELTA
    pred[comp] = dc
    v = dc * dq[0]
    if v < -32768 or v > 32767:
        return BAD_MERGE
    coef[o] = v
    k = 1
    while k < 64:
        rs = _symbol(buf, state, huff, 4 + ha)
        if rs < 0:
            return BAD_CODE
        s = rs & 15
        r = rs >> 4
        if s == 0:
            if rs != 0xF0:                  # end of block
                break
            k += 16                         # sixteen zeros
        else:
            k += r
            z = UNZIGZAG[k]
            k += 1
            coef[o + z] = _wrap16(_extend(buf, state, s) * dq[z])
    return OK


@njit(cache=True)
def _block_dc(buf, state, coef, o, comp, hd, pred, scan, huff):
    """stbi__jpeg_decode_block_prog_dc: the first DC scan (difference << Al) or one refinement
    bit."""
    if scan[S_END] != 0:
        return BAD_MERGE
    if state[BITS] < 16:
        _fill(buf, state)
    al = scan[S_AL]
    if scan[S_AH] == 0:
        for i in range(64):
            coef[o + i] = 0
        t = _symbol(buf, state, huff, hd)
        if t < 0 or t > 15:
            return BAD_MERGE
        diff = _extend(buf, state, t) if t else np.int64(0)
        dc = pred[comp] + diff
        if dc < -2147483648 or dc > 2147483647:
            return BAD_DELTA
        pred[comp] = dc
        v = dc * (np.int64(1) << al)
        if v < -32768 or v > 32767:
            return BAD_MERGE
        coef[o] = v
    elif _bits(buf, state, 1):
        coef[o] = _wrap16(np.int64(coef[o]) + (np.int64(1) << al))
    return OK


@njit(cache=True, inline="always")
def _refine(buf, state, coef, i, bit):
    """A nonzero coefficient's correction bit: away from zero by `bit` when set and not yet
    there."""
    v = np.int64(coef[i])
    if _bits(buf, state, 1) and (v & bit) == 0:
        coef[i] = _wrap16(v + bit if v > 0 else v - bit)


@njit(cache=True)
def _block_ac(buf, state, coef, o, ha, scan, huff):
    """stbi__jpeg_decode_block_prog_ac: a band Ss..Se of one block, first scan (levels << Al,
    end-of-band runs) or refinement (one bit per nonzero coefficient, new +-2^Al ones)."""
    ss, se, al = scan[S_START], scan[S_END], scan[S_AL]
    if ss == 0:
        return BAD_MERGE
    t = 4 + ha
    if scan[S_AH] == 0:
        if state[EOB_RUN]:
            state[EOB_RUN] -= 1
            return OK
        k = ss
        while True:
            rs = _symbol(buf, state, huff, t)
            if rs < 0:
                return BAD_CODE
            s = rs & 15
            r = rs >> 4
            if s == 0:
                if r < 15:                  # this band and the next 2^r + bits - 1 are empty
                    state[EOB_RUN] = (np.int64(1) << r) + (_bits(buf, state, r) if r else 0) - 1
                    break
                k += 16
            else:
                k += r
                z = UNZIGZAG[k]
                k += 1
                coef[o + z] = _wrap16(_extend(buf, state, s) * (np.int64(1) << al))
            if k > se:
                break
        return OK
    bit = np.int64(1) << al
    if state[EOB_RUN]:
        state[EOB_RUN] -= 1
        for k in range(ss, se + 1):
            if coef[o + UNZIGZAG[k]] != 0:
                _refine(buf, state, coef, o + UNZIGZAG[k], bit)
        return OK
    k = ss
    while True:
        rs = _symbol(buf, state, huff, t)
        if rs < 0:
            return BAD_CODE
        s = rs & 15
        r = rs >> 4
        level = np.int64(0)
        if s == 0:
            if r < 15:
                state[EOB_RUN] = (np.int64(1) << r) - 1 + (_bits(buf, state, r) if r else 0)
                r = 64                      # refine the rest of the band, place nothing
            # r == 15: skip sixteen zero coefficients (the 16th is "set" to 0)
        else:
            if s != 1:
                return BAD_CODE
            level = bit if _bits(buf, state, 1) else -bit
        while k <= se:
            i = o + UNZIGZAG[k]
            k += 1
            if coef[i] != 0:
                _refine(buf, state, coef, i, bit)
            elif r == 0:
                coef[i] = level
                break
            else:
                r -= 1
        if k > se:
            break
    return OK


@njit(cache=True)
def _reset(state, pred, restart_interval):
    """stbi__jpeg_reset: a new restart interval."""
    state[BITS] = 0
    state[WINDOW] = 0
    state[NOMORE] = 0
    state[MARKER] = MARKER_NONE
    state[TODO] = restart_interval if restart_interval else 0x7FFFFFFF
    state[EOB_RUN] = 0
    pred[:] = 0


@njit(cache=True)
def _stops_at_interval_end(buf, state, pred, restart_interval):
    """After each MCU: at the interval's end, True when the stream goes on after an RSTn marker
    (the reader reset); False when another marker ends the scan there, as stb stops."""
    state[TODO] -= 1
    if state[TODO] > 0:
        return False
    if state[BITS] < 24:
        _fill(buf, state)
    if state[MARKER] < 0xD0 or state[MARKER] > 0xD7:
        return True
    _reset(state, pred, restart_interval)
    return False


@njit(cache=True)
def _one_block(buf, state, coef, o, n, comps, pred, scan, dq, huff):
    if scan[S_PROGRESSIVE] == 0:
        return _block_baseline(buf, state, coef, o, n, comps[n, C_HD], comps[n, C_HA], pred,
                               dq[comps[n, C_TQ]], huff)
    if scan[S_START] == 0:
        return _block_dc(buf, state, coef, o, n, comps[n, C_HD], pred, scan, huff)
    return _block_ac(buf, state, coef, o, comps[n, C_HA], scan, huff)


@njit(cache=True)
def decode_scan(buf, state, coef, comps, scan, dq, huff):
    """stbi__parse_entropy_coded_data: one scan from state[POS] into `coef`; returns OK or an
    error code. One component: its blocks in raster order over the pixels it covers; several:
    interleaved MCUs, each component's h x v blocks in turn (progressive: DC only). `huff`:
    the Huffman tables (H_* layout)."""
    pred = np.zeros(4, np.int64)
    restart = scan[S_RESTART]
    _reset(state, pred, restart)
    if scan[S_N] == 1:
        n = scan[S_ORDER]
        bw = (comps[n, C_X] + 7) >> 3
        bh = (comps[n, C_Y] + 7) >> 3
        for j in range(bh):
            for i in range(bw):
                o = comps[n, C_OFF] + 64 * (j * comps[n, C_CW] + i)
                err = _one_block(buf, state, coef, o, n, comps, pred, scan, dq, huff)
                if err != OK:
                    return err
                if _stops_at_interval_end(buf, state, pred, restart):
                    return OK
        return OK
    for j in range(scan[S_MCU_Y]):
        for i in range(scan[S_MCU_X]):
            for q in range(scan[S_N]):
                n = scan[S_ORDER + q]
                h, v = comps[n, C_H], comps[n, C_V]
                for y in range(v):
                    for x in range(h):
                        o = comps[n, C_OFF] + 64 * ((j * v + y) * comps[n, C_CW] + i * h + x)
                        err = _one_block(buf, state, coef, o, n, comps, pred, scan, dq, huff)
                        if err != OK:
                            return err
            if _stops_at_interval_end(buf, state, pred, restart):
                return OK
    return OK
