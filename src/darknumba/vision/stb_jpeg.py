"""JPEG files decoded to the very bytes the C builds get from stb_image (`stbi_load`), so that
darknumba sees Darknet's pixels: a port of stb_image.h's JPEG path (v2.19 in pjreddie's src/,
v2.30 in AlexeyAB's 3rdparty/stb/; their JPEG code differs only in checks of damaged files).

    pixels = decode_jpeg(Path("dog.jpg").read_bytes(), req_comp=3)     # (576, 768, 3) uint8

Here: the markers (stbi__decode_jpeg_header, stbi__process_marker, stbi__process_frame_header,
stbi__process_scan_header, stbi__decode_jpeg_image) and the choices of load_jpeg_image (how many
components to upsample, which colour conversion); the numeric work is in
kernels/stb_jpeg.py (Huffman decoding of baseline and progressive scans, restart intervals) and
kernels/stb_jpeg_pixels.py (IDCT, upsampling, colour). 8-bit baseline, extended and progressive
Huffman JPEGs with 1, 3 or 4 components; EXIF orientation is not applied (stb ignores it).

Damaged files: what stb refuses raises JpegError with stb's reason. After the frame header, a
marker stb cannot read, or the end of a file that lacks its EOI marker, ends the decoding with
what is decoded, as v2.30 does (v2.19 refuses such a file; v2.30 then leaves a progressive
file's buffers unfinished, where this finishes the coefficients it has). A well-formed file
decodes to stb's bytes; a damaged one to something, or JpegError, never a crash.
"""
from __future__ import annotations

import numpy as np

from ..kernels.stb_jpeg import (BAD_CODE, BAD_DELTA, BAD_MERGE, C_CH, C_CW, C_H, C_HA, C_HD,
                                C_OFF, C_POFF, C_TQ, C_V, C_X, C_Y, COMP_FIELDS, H_DEFINED,
                                H_LOOK_LEN, H_LOOK_SYM, H_MAXCODE, H_MINCODE, H_VALPTR,
                                H_VALUES, HUFF_FIELDS, LOOKAHEAD, MARKER, MARKER_NONE, POS,
                                S_AH, S_AL, S_END, S_MCU_X, S_MCU_Y, S_N, S_ORDER,
                                S_PROGRESSIVE, S_RESTART, S_START, SCAN_FIELDS, STATE_SIZE,
                                UNZIGZAG, decode_scan)
from ..kernels.stb_jpeg_pixels import (CMYK, FIRST, GREY3, RGB_COPY, Y_OF_CMYK, Y_OF_RGB,
                                       Y_OF_YCCK, YCC, YCCK, idct_components, to_pixels)

SOI, EOI, SOS, DNL, DQT, DHT, DRI = 0xD8, 0xD9, 0xDA, 0xDC, 0xDB, 0xC4, 0xDD
SOF_BASELINE, SOF_EXTENDED, SOF_PROGRESSIVE = 0xC0, 0xC1, 0xC2
MAX_DIMENSION = 1 << 24                 # STBI_MAX_DIMENSIONS
KERNEL_ERRORS = {BAD_CODE: "bad huffman code", BAD_DELTA: "bad delta",
                 BAD_MERGE: "can't merge dc and ac"}


class JpegError(ValueError):
    """A JPEG stb_image would not load; the message is stb's reason (stbi_failure_reason)."""


def is_jpeg(head: bytes) -> bool:
    """stbi__jpeg_test: the file starts with an SOI marker (0xFF, any fill 0xFFs, 0xD8)."""
    rest = head.lstrip(b"\xff")
    return head[:1] == b"\xff" and rest[:1] == bytes([SOI])


def _huffman(counts: list[int], values: bytes):
    """stbi__build_huffman for one DHT table: its row of the kernel's `huff` (H_* layout: the
    symbol and code length of every LOOKAHEAD-bit prefix that starts a code of at most
    LOOKAHEAD bits, and per length k the largest code (-1: none), the smallest, and where its
    symbols start in `values`). Raises JpegError for lengths that do not form a prefix code."""
    row = np.zeros(HUFF_FIELDS, np.int64)
    look_sym = row[H_LOOK_SYM:H_LOOK_SYM + (1 << LOOKAHEAD)]
    look_len = row[H_LOOK_LEN:H_LOOK_LEN + (1 << LOOKAHEAD)]
    maxcode = row[H_MAXCODE:H_MAXCODE + 17]
    mincode = row[H_MINCODE:H_MINCODE + 17]
    valptr = row[H_VALPTR:H_VALPTR + 17]
    huffval = row[H_VALUES:H_VALUES + 256]
    maxcode[:] = -1
    row[H_DEFINED] = 1
    huffval[:len(values)] = np.frombuffer(values, np.uint8)
    code = k = 0
    for length in range(1, 17):
        n = counts[length - 1]
        valptr[length], mincode[length] = k, code
        if n:
            if code + n - 1 >= 1 << length:
                raise JpegError("bad code lengths")
            if length <= LOOKAHEAD:
                for c in range(code, code + n):
                    span = 1 << (LOOKAHEAD - length)
                    look_sym[c * span:(c + 1) * span] = huffval[k + c - code]
                    look_len[c * span:(c + 1) * span] = length
            maxcode[length] = code + n - 1
            code, k = code + n, k + n
        code <<= 1
    return row


class _Jpeg:
    """One file's decoding state (stbi__jpeg): the byte position, the tables, the components."""

    def __init__(self, data: bytes, max_pixels: int | None):
        self.buf = np.frombuffer(data, np.uint8)
        self.pos = 0
        self.marker = MARKER_NONE
        self.max_pixels = max_pixels
        self.dq = np.zeros((4, 64), np.int64)
        self.huff = np.zeros((8, HUFF_FIELDS), np.int64)       # none defined yet
        self.jfif = False
        self.app14_transform = -1
        self.restart_interval = 0
        self.rgb_ids = 0

    # -- bytes (stbi__get8, get16be, skip, at_eof; reading past the end gives zeros) -----------
    def at_eof(self) -> bool:
        return self.pos >= len(self.buf)

    def get8(self) -> int:
        if self.pos >= len(self.buf):
            return 0
        self.pos += 1
        return int(self.buf[self.pos - 1])

    def get16(self) -> int:
        return (self.get8() << 8) | self.get8()

    def take(self, n: int) -> bytes:
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos = min(self.pos + n, len(self.buf))
        return out + bytes(n - len(out))

    def get_marker(self) -> int:
        """stbi__get_marker: the marker the entropy decoder met, else the next byte pair's
        (0xFF, fill 0xFFs, the code), else MARKER_NONE (the byte read is dropped)."""
        if self.marker != MARKER_NONE:
            m, self.marker = self.marker, MARKER_NONE
            return m
        x = self.get8()
        if x != 0xFF:
            return MARKER_NONE
        while x == 0xFF:
            x = self.get8()
        return x

    # -- markers --------------------------------------------------------------------------------
    def segment(self, m: int):
        """stbi__process_marker: DRI, DQT, DHT, APPn (JFIF, Adobe's colour transform), COM."""
        if m == MARKER_NONE:
            raise JpegError("expected marker")
        if m == DRI:
            if self.get16() != 4:
                raise JpegError("bad DRI len")
            self.restart_interval = self.get16()
        elif m == DQT:
            left = self.get16() - 2
            while left > 0:
                q = self.get8()
                precision, t = q >> 4, q & 15
                if precision not in (0, 1):
                    raise JpegError("bad DQT type")
                if t > 3:
                    raise JpegError("bad DQT table")
                for i in range(64):
                    self.dq[t, UNZIGZAG[i]] = self.get16() if precision else self.get8()
                left -= 129 if precision else 65
            if left != 0:
                raise JpegError("bad DQT length")
        elif m == DHT:
            left = self.get16() - 2
            while left > 0:
                q = self.get8()
                tc, th = q >> 4, q & 15
                if tc > 1 or th > 3:
                    raise JpegError("bad DHT header")
                counts = [self.get8() for _ in range(16)]
                if sum(counts) > 256:
                    raise JpegError("bad DHT header")
                left -= 17
                self.huff[4 * tc + th] = _huffman(counts, self.take(sum(counts)))
                left -= sum(counts)
            if left != 0:
                raise JpegError("bad DHT length")
        elif 0xE0 <= m <= 0xEF or m == 0xFE:
            length = self.get16()
            if length < 2:
                raise JpegError("bad COM len" if m == 0xFE else "bad APP len")
            length -= 2
            if m == 0xE0 and length >= 5:
                self.jfif = self.jfif or self.take(5) == b"JFIF\0"
                length -= 5
            elif m == 0xEE and length >= 12:
                length -= 6
                if self.take(6) == b"Adobe\0":
                    self.take(5)                        # version, flags0, flags1
                    self.app14_transform = self.get8()
                    length -= 6
            self.take(length)
        else:
            raise JpegError("unknown marker")

    def header(self):
        """stbi__decode_jpeg_header: SOI, the segments before the frame, the frame header."""
        if self.get_marker() != SOI:
            raise JpegError("no SOI")
        m = self.get_marker()
        while m not in (SOF_BASELINE, SOF_EXTENDED, SOF_PROGRESSIVE):
            self.segment(m)
            m = self.get_marker()
            while m == MARKER_NONE:                     # padding between segments
                if self.at_eof():
                    raise JpegError("no SOF")
                m = self.get_marker()
        self.progressive = m == SOF_PROGRESSIVE
        self.frame()

    def frame(self):
        """stbi__process_frame_header: size, components and their sampling; the MCU grid and
        each component's coefficient and pixel buffers (MCU-padded)."""
        lf = self.get16()
        if lf < 11:
            raise JpegError("bad SOF len")
        if self.get8() != 8:
            raise JpegError("only 8-bit")
        self.img_y, self.img_x = self.get16(), self.get16()
        if self.img_y == 0:
            raise JpegError("no header height")
        if self.img_x == 0:
            raise JpegError("0 width")
        if max(self.img_x, self.img_y) > MAX_DIMENSION:
            raise JpegError("too large")
        self.img_n = self.get8()
        if self.img_n not in (1, 3, 4):
            raise JpegError("bad component count")
        if lf != 8 + 3 * self.img_n:
            raise JpegError("bad SOF len")
        if self.max_pixels is not None and self.img_x * self.img_y > self.max_pixels:
            raise JpegError(f"{self.img_x} x {self.img_y} is more than {self.max_pixels} pixels")
        self.comps = comps = np.zeros((4, COMP_FIELDS), np.int64)
        self.ids = []
        for i in range(self.img_n):
            self.ids.append(self.get8())
            if self.img_n == 3 and self.ids[-1] == b"RGB"[i]:
                self.rgb_ids += 1
            q = self.get8()
            comps[i, C_H], comps[i, C_V] = q >> 4, q & 15
            if not 1 <= comps[i, C_H] <= 4:
                raise JpegError("bad H")
            if not 1 <= comps[i, C_V] <= 4:
                raise JpegError("bad V")
            comps[i, C_TQ] = self.get8()
            if comps[i, C_TQ] > 3:
                raise JpegError("bad TQ")
        if self.img_x * self.img_y * self.img_n > 2**31 - 1:
            raise JpegError("too large")
        n = self.img_n
        self.h_max, self.v_max = int(comps[:n, C_H].max()), int(comps[:n, C_V].max())
        if np.any(self.h_max % comps[:n, C_H]):
            raise JpegError("bad H")
        if np.any(self.v_max % comps[:n, C_V]):
            raise JpegError("bad V")
        self.mcu_x = -(-self.img_x // (8 * self.h_max))
        self.mcu_y = -(-self.img_y // (8 * self.v_max))
        coef_at = pix_at = 0
        for i in range(n):
            h, v = comps[i, C_H], comps[i, C_V]
            comps[i, C_X] = -(-self.img_x * h // self.h_max)
            comps[i, C_Y] = -(-self.img_y * v // self.v_max)
            comps[i, C_CW], comps[i, C_CH] = self.mcu_x * h, self.mcu_y * v
            comps[i, C_OFF], comps[i, C_POFF] = coef_at, pix_at
            coef_at += 64 * comps[i, C_CW] * comps[i, C_CH]
            pix_at += 64 * comps[i, C_CW] * comps[i, C_CH]
        self.coef = np.zeros(coef_at, np.int16)
        self.planes = np.zeros(pix_at, np.uint8)

    def scan_header(self) -> np.ndarray:
        """stbi__process_scan_header: the scan's components (and their tables), its spectral
        band and successive-approximation bits."""
        scan = np.zeros(SCAN_FIELDS, np.int64)
        ls, count = self.get16(), self.get8()
        if not 1 <= count <= min(4, self.img_n):
            raise JpegError("bad SOS component count")
        if ls != 6 + 2 * count:
            raise JpegError("bad SOS len")
        for i in range(count):
            cid, q = self.get8(), self.get8()
            if cid not in self.ids:
                raise JpegError("bad SOS component id")
            which = self.ids.index(cid)
            self.comps[which, C_HD], self.comps[which, C_HA] = q >> 4, q & 15
            if q >> 4 > 3:
                raise JpegError("bad DC huff")
            if q & 15 > 3:
                raise JpegError("bad AC huff")
            scan[S_ORDER + i] = which
        ss, se, a = self.get8(), self.get8(), self.get8()
        ah, al = a >> 4, a & 15
        if self.progressive:
            if ss > 63 or se > 63 or ss > se or ah > 13 or al > 13:
                raise JpegError("bad SOS")
        else:
            if ss != 0 or ah != 0 or al != 0:
                raise JpegError("bad SOS")
            se = 63
        scan[[S_PROGRESSIVE, S_N, S_START, S_END, S_AH, S_AL]] = \
            [self.progressive, count, ss, se, ah, al]
        scan[[S_RESTART, S_MCU_X, S_MCU_Y]] = [self.restart_interval, self.mcu_x, self.mcu_y]
        return scan

    def skip_junk(self) -> int:
        """stbi__skip_jpeg_junk_at_end (v2.30): bytes after a scan's data up to something that
        looks like a marker (0xFF then neither 0x00 nor 0xFF)."""
        while not self.at_eof():
            x = self.get8()
            while x == 0xFF:
                if self.at_eof():
                    return MARKER_NONE
                x = self.get8()
                if x not in (0x00, 0xFF):
                    return x
        return MARKER_NONE

    def scans(self):
        """stbi__decode_jpeg_image after the header: scans and segments up to EOI."""
        state = np.zeros(STATE_SIZE, np.int64)
        m = self.get_marker()
        while m != EOI:
            if m == SOS:
                scan = self.scan_header()
                state[POS] = self.pos
                err = decode_scan(self.buf, state, self.coef, self.comps, scan, self.dq,
                                  self.huff)
                if err:
                    raise JpegError(KERNEL_ERRORS[err])
                self.pos, self.marker = int(state[POS]), int(state[MARKER])
                if self.marker == MARKER_NONE:
                    self.marker = self.skip_junk()
                m = self.get_marker()
                if 0xD0 <= m <= 0xD7:                   # a restart marker after the last MCU
                    m = self.get_marker()
            elif m == DNL:
                ld, nl = self.get16(), self.get16()
                if ld != 4:
                    raise JpegError("bad DNL len")
                if nl != self.img_y:
                    raise JpegError("bad DNL height")
                m = self.get_marker()
            else:
                try:
                    self.segment(m)
                except JpegError:
                    break               # v2.30 keeps what it has decoded; v2.19 fails here
                m = self.get_marker()

    def pixels(self, req_comp: int) -> np.ndarray:
        """load_jpeg_image's output: (img_y, img_x, req_comp) uint8."""
        n, img_n, t = req_comp, self.img_n, self.app14_transform
        idct_components(self.coef, self.comps, img_n, self.dq, self.progressive, self.planes)
        is_rgb = img_n == 3 and (self.rgb_ids == 3 or (t == 0 and not self.jfif))
        decode_n = 1 if img_n == 3 and n < 3 and not is_rgb else img_n
        if n >= 3:
            mode = {3: RGB_COPY if is_rgb else YCC, 1: GREY3,
                    4: {0: CMYK, 2: YCCK}.get(t, YCC)}[img_n]
        elif is_rgb:
            mode = Y_OF_RGB
        else:
            mode = {0: Y_OF_CMYK, 2: Y_OF_YCCK}.get(t, FIRST) if img_n == 4 else FIRST
        out = np.empty((self.img_y, self.img_x, n), np.uint8)
        to_pixels(self.planes, self.comps, decode_n, self.img_x, self.img_y, self.h_max,
                  self.v_max, mode, out)
        return out


def decode_jpeg(data: bytes, req_comp: int = 3, max_pixels: int | None = None) -> np.ndarray:
    """stbi_load_from_memory(data, ..., req_comp) for a JPEG: (h, w, req_comp) uint8, the bytes
    stb gives (req_comp 1 grey, 2 grey + alpha 255, 3 RGB, 4 RGBA). A file of more than
    `max_pixels` pixels is refused before any buffer is allocated. Raises JpegError."""
    if req_comp not in (1, 2, 3, 4):
        raise ValueError(f"req_comp must be 1, 2, 3 or 4, not {req_comp!r}")
    j = _Jpeg(data, max_pixels)
    j.header()
    j.scans()
    return j.pixels(req_comp)
