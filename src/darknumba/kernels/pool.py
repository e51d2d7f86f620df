"""Max and average pooling (Darknet's `maxpool_layer.c`, `avgpool_layer.c`).

Maxpool: the window's top-left is at ``-pad//2`` (C integer division of a non-negative pad);
cells outside the image never win (treated as -FLT_MAX); ties go to the first maximum in
(ky, kx) scan order; ``indexes`` records the flat input index of each winner.
"""
import numpy as np
from numba import njit, prange

from .im2col import valid_span

FLT_MAX = np.float32(3.4028234663852886e38)


@njit(parallel=True, cache=True)
def forward_maxpool_cpu(inp, batch, c, h, w, size, stride, pad, out_h, out_w, output, indexes,
                        want_indexes=True):
    """One output row per iteration. The window offsets (n, m) are visited in Darknet's scan
    order and each sweeps the whole row with a strict `>`, so ties resolve exactly as in C;
    each offset's in-bounds columns form one interval, so the inner loop has no bounds test.
    With want_indexes False (inference) the winners' positions are not recorded."""
    w_offset = -(pad // 2)
    h_offset = -(pad // 2)
    for bki in prange(batch * c * out_h):
        i = bki % out_h
        in_base = (bki // out_h) * h * w
        out_base = bki * out_w
        out_row = output[out_base:out_base + out_w]
        idx_row = indexes[out_base:out_base + out_w]
        out_row[:] = -FLT_MAX
        idx_row[:] = -1
        # only the window rows inside the image, and the window columns some output column
        # sees inside it, can win: visiting just those keeps Darknet's scan order and costs
        # nothing however large `size` is (a 10^9 window would otherwise loop 10^18 times)
        top = h_offset + i * stride
        for n in range(max(0, -top), min(size, h - top)):
            cur_h = top + n
            row = in_base + cur_h * w
            _window_columns_max(inp, row, w_offset, stride, size, w, out_w, out_row, idx_row,
                                want_indexes)


@njit(cache=True, inline="always")
def _window_columns_max(inp, row, off, stride, size, w, out_w, o_row, ix_row, want_indexes):
    """o_row[j] = max(o_row[j], inp[row + off + j*stride + m]) over the window columns m
    (0 <= m < size) inside the image, in Darknet's scan order; with want_indexes, ix_row[j]
    the winner's index. Only the columns some output column sees inside the row are visited."""
    for m in range(max(0, -off - (out_w - 1) * stride), min(size, w - off)):
        col0 = off + m                          # input column of output column 0
        j_lo, j_hi = valid_span(col0, stride, out_w, w)
        if j_hi <= j_lo:
            continue
        first = row + col0 + j_lo * stride
        # slices (not computed indices) let the loop vectorise; selects, not branches
        src = inp[first:first + (j_hi - j_lo - 1) * stride + 1:stride]
        o = o_row[j_lo:j_hi]
        ix = ix_row[j_lo:j_hi]
        if want_indexes:
            for j in range(j_hi - j_lo):
                val = src[j]
                better = val > o[j]
                o[j] = val if better else o[j]
                ix[j] = np.int32(first + j * stride) if better else ix[j]
        else:
            for j in range(j_hi - j_lo):
                o[j] = max(o[j], src[j])


@njit(cache=True, inline="always")
def _maxpool_rows_plane(inp, p, h, w, size, stride, off, out_h, out_w, output, indexes, rm, ri,
                        want_indexes):
    """forward_maxpool_rows_cpu's two passes over plane p."""
    plane = p * h * w
    rm[:] = -FLT_MAX
    ri[:] = -1
    for y in range(h):
        row = plane + y * w
        _window_columns_max(inp, row, off, stride, size, w, out_w,
                            rm[y * out_w:(y + 1) * out_w], ri[y * out_w:(y + 1) * out_w], True)
    for i in range(out_h):
        o = output[(p * out_h + i) * out_w:(p * out_h + i + 1) * out_w]
        ix = indexes[(p * out_h + i) * out_w:(p * out_h + i + 1) * out_w]
        o[:] = -FLT_MAX
        if want_indexes:
            ix[:] = -1
        top = off + i * stride
        for y in range(max(0, top), min(h, top + size)):
            r = rm[y * out_w:(y + 1) * out_w]
            rix = ri[y * out_w:(y + 1) * out_w]
            if want_indexes:
                for j in range(out_w):
                    better = r[j] > o[j]
                    o[j] = r[j] if better else o[j]
                    ix[j] = rix[j] if better else ix[j]
            else:
                for j in range(out_w):
                    o[j] = max(o[j], r[j])


@njit(parallel=True, cache=True)
def forward_maxpool_rows_cpu(inp, batch, c, h, w, size, stride, pad, out_h, out_w, output, indexes,
                             groups, rows_max, rows_idx, want_indexes=True):
    """forward_maxpool_cpu in two passes for large windows (SPP's 5, 9, 13): first every input
    row's maximum over each output column's window columns, then each output the maximum of
    its window rows' results, size + size steps an output instead of size^2. Both passes scan
    in Darknet's order with a strict `>` from -FLT_MAX, so the winner is the first maximum in
    row-major order, as the single scan picks it: same values, indexes and ties. The planes
    are dealt to `groups` parallel iterations, each with its h x out_w block of the
    caller-owned scratch rows_max, rows_idx (groups * h * out_w)."""
    off = -(pad // 2)
    for g in prange(groups):
        rm = rows_max[g * h * out_w:(g + 1) * h * out_w]
        ri = rows_idx[g * h * out_w:(g + 1) * h * out_w]
        for p in range(g, batch * c, groups):
            _maxpool_rows_plane(inp, p, h, w, size, stride, off, out_h, out_w, output, indexes,
                                rm, ri, want_indexes)


@njit(parallel=True, cache=True)
def backward_maxpool_cpu(delta, indexes, prev_delta, parts, out_per_part):
    """prev_delta[indexes[i]] += delta[i], the outputs cut into `parts` runs of out_per_part
    whose winners lie in disjoint parts of the input (planes for a spatial maxpool, images
    for maxpool_depth): threads split over parts own their writes."""
    for part in prange(parts):
        for i in range(part * out_per_part, (part + 1) * out_per_part):
            idx = indexes[i]
            if idx >= 0:
                prev_delta[idx] += delta[i]


@njit(parallel=True, cache=True)
def forward_avgpool_cpu(inp, batch, c, spatial, output):
    """Global average pool: output[b, k] = mean of input[b, k, :, :]."""
    for bk in prange(batch * c):
        acc = 0.0
        base = bk * spatial
        for i in range(spatial):
            acc += inp[base + i]
        output[bk] = np.float32(acc / spatial)


@njit(parallel=True, cache=True)
def backward_avgpool_cpu(delta, batch, c, spatial, prev_delta):
    for bk in prange(batch * c):
        d = delta[bk] / np.float32(spatial)
        base = bk * spatial
        for i in range(spatial):
            prev_delta[base + i] += d


@njit(cache=True)
def _window_max(inp, plane, h, w, size, y0, x0):
    """(max, flat index) of the size x size window at (y0, x0) of one plane, cells outside the
    image skipped, scanned row by row with a strict `>` (Darknet's tie rule); (-FLT_MAX, -1)
    when the window lies wholly outside."""
    best = -FLT_MAX
    best_i = -1
    for n in range(size):
        y = y0 + n
        if y < 0 or y >= h:
            continue
        for m in range(size):
            x = x0 + m
            if x < 0 or x >= w:
                continue
            v = inp[plane + y * w + x]
            if v > best:
                best = v
                best_i = plane + y * w + x
    return best, best_i


@njit(cache=True)
def _maxpool2_run(top, bottom, o, ix, first, w, step, n, want_indexes):
    """n outputs whose 2x2 windows lie inside the image: window j's cells are top[j*step + {0,
    1}] and bottom[j*step + {0, 1}], and `first` is the flat input index of top[0] (bottom
    starts w later). Selects from -FLT_MAX in Darknet's scan order with a strict `>`, so ties,
    NaN and -inf cells give what the general kernel gives. `step` is a literal at the call
    sites: the loads vectorise. `ix` None: no indexes (that signature compiles one loop)."""
    if ix is None or not want_indexes:
        for j in range(n):
            x = j * step
            # max(a, b) is b if b > a else a: the same chain of selects, in scan order
            o[j] = max(max(max(max(-FLT_MAX, top[x]), top[x + 1]), bottom[x]), bottom[x + 1])
        return
    for j in range(n):                              # the same chain, the winner's index beside
        x = j * step
        best = -FLT_MAX
        bi = np.int32(-1)
        v = top[x]
        bi = np.int32(first + x) if v > best else bi
        best = max(best, v)
        v = top[x + 1]
        bi = np.int32(first + x + 1) if v > best else bi
        best = max(best, v)
        v = bottom[x]
        bi = np.int32(first + w + x) if v > best else bi
        best = max(best, v)
        v = bottom[x + 1]
        bi = np.int32(first + w + x + 1) if v > best else bi
        best = max(best, v)
        o[j] = best
        ix[j] = bi


# outputs per parallel iteration of forward_maxpool2_cpu (whole rows): short rows are grouped so
# the per-iteration set-up is paid rarely, long planes are split so both cores share few planes
MAXPOOL2_BLOCK = 4096


@njit(parallel=True, cache=True)
def forward_maxpool2_cpu(inp, batch, c, h, w, stride, pad, out_h, out_w, output, indexes,
                         want_indexes=True):
    """forward_maxpool_cpu for size 2 (Darknet's usual maxpool), one block of output rows of
    one plane per iteration. Windows wholly inside the image take _maxpool2_run (stride 2 with
    a literal step), the border windows go through _window_max. Same values, indexes and tie
    rule as the general kernel; with want_indexes False or indexes None (inference: a smaller
    compile) the indexes are not written."""
    off = -(pad // 2)
    # output columns j whose two input columns off + j*stride + {0, 1} lie inside [0, w)
    j_lo = min(out_w, 0 if off >= 0 else (-off + stride - 1) // stride)
    j_hi = max(j_lo, min(out_w, (w - 2 - off) // stride + 1))
    rows = max(1, min(out_h, MAXPOOL2_BLOCK // out_w))
    blocks = (out_h + rows - 1) // rows
    for pb in prange(batch * c * blocks):
        p = pb // blocks
        i0 = (pb % blocks) * rows
        plane = p * h * w
        for i in range(i0, min(out_h, i0 + rows)):
            y0 = off + i * stride
            o = (p * out_h + i) * out_w
            j0, j1 = (j_lo, j_hi) if y0 >= 0 and y0 + 1 < h else (0, 0)
            if j1 > j0:
                first = plane + y0 * w + off + j0 * stride
                span = (j1 - j0 - 1) * stride + 2
                top = inp[first:first + span]
                bottom = inp[first + w:first + w + span]
                orow = output[o + j0:o + j1]
                # numba drops the untaken side when indexes is None (inference: _maxpool2_run
                # then compiles without its index loop)
                irow = None if indexes is None else indexes[o + j0:o + j1]
                # a literal step for stride 2 and one other call site, not one per stride (each
                # compiles its loops for seconds)
                if stride == 2:
                    _maxpool2_run(top, bottom, orow, irow, first, w, 2, j1 - j0, want_indexes)
                else:
                    _maxpool2_run(top, bottom, orow, irow, first, w, stride, j1 - j0,
                                  want_indexes)
            # the border windows: the columns left of j0 and from j1 on (all of a border row),
            # not a loop over every column skipping the inside (it cost a third of the time)
            for side in range(2):
                lo, hi = (0, j0) if side == 0 else (max(j0, j1), out_w)
                for j in range(lo, hi):
                    v, vi = _window_max(inp, plane, h, w, 2, y0, off + j * stride)
                    output[o + j] = v
                    if indexes is not None and want_indexes:
                        indexes[o + j] = vi


@njit(parallel=True, cache=True)
def forward_maxpool2_same_cpu(inp, batch, c, h, w, output, indexes, want_indexes=True):
    """forward_maxpool2_cpu for size 2, stride 1, padding 1 (the output as large as the input,
    yolov3-tiny's layer 11), one plane per iteration. Output k (flat in its plane) is the
    maximum of cells k, k+1, k+w, k+w+1: computed for the whole plane but its last row as one
    long run (no per-row set-up: rows are 13 wide), then the outputs of the last column, whose
    cells k+1, k+w+1 wrapped to the next row, and of the last row are redone over the cells
    inside the image. Values, indexes and ties as forward_maxpool_cpu."""
    hw = h * w
    for p in prange(batch * c):
        plane = p * hw
        n = (h - 1) * w - 1                          # run outputs: all four cells in the plane
        if n > 0:
            irow = None if indexes is None else indexes[plane:plane + n]
            _maxpool2_run(inp[plane:plane + n + 1], inp[plane + w:plane + w + n + 1],
                          output[plane:plane + n], irow, plane, w, 1, n, want_indexes)
        for i in range(h):
            for j in range(w - 1 if i < h - 1 else 0, w):
                v, vi = _window_max(inp, plane, h, w, 2, i, j)
                output[plane + i * w + j] = v
                if indexes is not None and want_indexes:
                    indexes[plane + i * w + j] = vi


@njit(parallel=True, cache=True)
def forward_maxpool_depth_cpu(inp, batch, c, spatial, out_c, output, indexes):
    """AlexeyAB's maxpool_depth: output channel g of each pixel is the maximum of input channels
    g, g + out_c, g + 2*out_c, ... < c (first maximum wins; indexes as forward_maxpool_cpu)."""
    for bg in prange(batch * out_c):
        b = bg // out_c
        g = bg % out_c
        o = output[bg * spatial:(bg + 1) * spatial]
        ix = indexes[bg * spatial:(bg + 1) * spatial]
        o[:] = -FLT_MAX
        ix[:] = -1
        for k in range(g, c, out_c):
            base = (b * c + k) * spatial
            src = inp[base:base + spatial]
            for j in range(spatial):
                better = src[j] > o[j]
                o[j] = src[j] if better else o[j]
                ix[j] = np.int32(base + j) if better else ix[j]


@njit(parallel=True, cache=True)
def forward_local_avgpool_cpu(inp, batch, c, h, w, size, stride, pad, out_h, out_w, output):
    """AlexeyAB's forward_local_avgpool_layer: the mean of each window's cells inside the image
    (the window's top-left at -pad/2, as maxpool's)."""
    off = -(pad // 2)
    for bk in prange(batch * c):
        plane = bk * h * w
        for i in range(out_h):
            for j in range(out_w):
                acc = np.float32(0.0)
                count = 0
                for n in range(size):
                    y = off + i * stride + n
                    if y < 0 or y >= h:
                        continue
                    for m in range(size):
                        x = off + j * stride + m
                        if 0 <= x < w:
                            acc += inp[plane + y * w + x]
                            count += 1
                output[(bk * out_h + i) * out_w + j] = acc / np.float32(count)


@njit(parallel=True, cache=True)
def backward_local_avgpool_cpu(delta, batch, c, h, w, size, stride, pad, out_h, out_w,
                               prev_delta):
    """AlexeyAB's backward_local_avgpool_layer: every cell of a window inside the image gets
    delta / (size*size) (not / the count the forward divided by)."""
    off = -(pad // 2)
    for bk in prange(batch * c):
        plane = bk * h * w
        for i in range(out_h):
            for j in range(out_w):
                d = delta[(bk * out_h + i) * out_w + j] / np.float32(size * size)
                for n in range(size):
                    y = off + i * stride + n
                    if y < 0 or y >= h:
                        continue
                    for m in range(size):
                        x = off + j * stride + m
                        if 0 <= x < w:
                            prev_delta[plane + y * w + x] += d
