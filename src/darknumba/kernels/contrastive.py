"""AlexeyAB's [contrastive] loss (supervised contrastive learning, its
`softmax_layer.c:forward_contrastive_layer` with `blas.c`'s get_embedding,
cosine_similarity, P_constrastive_f_det, P_constrastive, grad_contrastive_loss_positive(_f),
grad_contrastive_loss_negative(_f)).

Legend: a sample is one (image b, anchor a, cell) of the embedding map, z index
b*n*wh + a*wh + cell (n anchors, wh = w*h cells; a classifier has n = 1, wh = 1); its
embedding z is emb floats read with a stride of wh from the layer's input, whose images hold
c channels (c = n * emb when the filters divide evenly). A detector's samples are labelled by
the [yolo] layer's truth (label = track id, class_id = class) where a truth trains that
anchor's cell, else -1; pairs (i, j) are two labelled samples of one class and one time step
(b / mini_batch). The K labelled samples are numbered 0..K-1 in z-index order, which is the
order of the C's list of pairs, so every sum here adds its terms in the C's order. Float32
where the C computes in float.
"""
import math

import numpy as np
from numba import njit, prange

from .box_ab import box_iou

f32 = np.float32
_0 = f32(0.0)
_1 = f32(1.0)
NOT_FOUND_P = f32(0.9999)       # P when its denominator is 0 or it comes out above 1


@njit(cache=True, error_model="numpy")
def contrastive_labels_cpu(truth, batch, truths, truth_size, max_boxes, biases, mask, n, total,
                           lw, lh, classes, netw, neth, class_map, labels, class_ids):
    """What AlexeyAB's [yolo] forward writes into l.labels and l.class_ids for [contrastive]:
    -1 everywhere, then for every truth of a valid class (in list order, a later one
    overwriting), at the cell holding its centre and the anchor whose shape fits it best among
    all anchors, if that anchor is this layer's: label = (int) track id (truth value 5),
    class_id = its class (through the class map)."""
    labels[:] = -1
    class_ids[:] = -1
    wh = lw * lh
    has_map = class_map.shape[0] > 0
    for b in range(batch):
        for t in range(max_boxes):
            tb = b * truths + t * truth_size
            if truth[tb] == 0:
                break
            c = truth[tb + 4]
            if not (c > -1 and c < classes):
                continue
            cls = int(c)
            tw, th = truth[tb + 2], truth[tb + 3]
            i = min(max(int(truth[tb] * f32(lw)), 0), lw - 1)
            j = min(max(int(truth[tb + 1] * f32(lh)), 0), lh - 1)
            best_iou = _0
            best_n = 0
            for a in range(total):
                iou = box_iou(_0, _0, biases[2 * a] / f32(netw), biases[2 * a + 1] / f32(neth),
                              _0, _0, tw, th)
                if iou > best_iou:
                    best_iou = iou
                    best_n = a
            mask_n = -1
            for m in range(n):
                if mask[m] == best_n:
                    mask_n = m
                    break
            if mask_n < 0:
                continue
            if has_map:
                cls = class_map[cls]
            k = b * n * wh + mask_n * wh + j * lw + i
            labels[k] = int(truth[tb + 5])
            class_ids[k] = cls


@njit(cache=True)
def get_embeddings_cpu(inp, zidx, n, wh, c, emb, z):
    """get_embedding for each sample of zidx: z[k, m] = the input at image b, channel
    a*emb + m (c channels per image), the sample's cell."""
    for k in range(zidx.shape[0]):
        s = zidx[k]
        b = s // (n * wh)
        a = (s // wh) % n
        cell = s % wh
        base = b * c * wh + a * emb * wh + cell
        for m in range(emb):
            z[k, m] = inp[base + m * wh]


@njit(cache=True, error_model="numpy")
def cosine_similarity(z, i, j):
    """cosine_similarity of rows i and j of z: the three sums in float, one term at a time;
    0 when a vector is 0."""
    mul = _0
    da = _0
    db = _0
    for m in range(z.shape[1]):
        mul += z[i, m] * z[j, m]
        da += z[i, m] * z[i, m]
        db += z[j, m] * z[j, m]
    divider = f32(math.sqrt(np.float64(da))) * f32(math.sqrt(np.float64(db)))
    if divider > 0:
        return mul / divider
    return _0


@njit(cache=True, error_model="numpy")
def _expf(x):
    return f32(math.exp(np.float64(x)))


@njit(parallel=True, cache=True, error_model="numpy")
def contrastive_pairs_cpu(z, zidx, labels, class_ids, per_image, mini_batch, temperature,
                          detection, sim, exp_sim, valid):
    """The pairs forward_contrastive_layer lists: valid[i, j] = 1 for labelled samples i != j
    of one time step (and, for a detector, one class), with sim = their cosine similarity and
    exp_sim = expf(sim / temperature); 0 elsewhere. Row i is written by iteration i only."""
    K = zidx.shape[0]
    for i in prange(K):
        ts_i = (zidx[i] // per_image) // mini_batch
        for j in range(K):
            sim[i, j] = _0
            exp_sim[i, j] = _0
            valid[i, j] = _0
            if i == j or (zidx[j] // per_image) // mini_batch != ts_i:
                continue
            if detection and class_ids[i] != class_ids[j]:
                continue
            s = cosine_similarity(z, i, j)
            sim[i, j] = s
            exp_sim[i, j] = _expf(s / temperature)
            valid[i, j] = _1


@njit(cache=True)
def contrastive_accuracy_cpu(sim, valid, labels):
    """The C's "Contrast accuracy": a sample with both a pair of its own label and one of
    another counts; it is good when its most similar same-label partner beats its most
    similar other-label one. Returns (all, good)."""
    K = sim.shape[0]
    all_sims = 0
    good = 0
    for i in range(K):
        same = f32(-10.0)
        diff = f32(-10.0)
        for j in range(K):
            if valid[i, j] == 0:
                continue
            if labels[i] == labels[j]:
                if same < sim[i, j]:
                    same = sim[i, j]
            elif diff < sim[i, j]:
                diff = sim[i, j]
        if same >= -1 and diff >= -1:
            all_sims += 1
            if diff < same:
                good += 1
    return all_sims, good


@njit(parallel=True, cache=True, error_model="numpy")
def contrastive_p_det_cpu(sim, exp_sim, valid, temperature, p):
    """P_constrastive_f_det for every listed pair (i, j): expf(sim / T) over the sum of
    exp_sim of the listed pairs (i', j) with i' != i, in list order; 0.9999 when that sum is
    0 or the ratio exceeds 1."""
    K = sim.shape[0]
    for i in prange(K):
        for j in range(K):
            p[i, j] = _0
            if valid[i, j] == 0:
                continue
            num = _expf(sim[i, j] / temperature)
            den = _0
            for k in range(K):
                if k != i and valid[k, j] != 0:
                    den += exp_sim[k, j]
            r = NOT_FOUND_P
            if den != 0:
                r = num / den
            if r > 1:
                r = NOT_FOUND_P
            p[i, j] = r


@njit(parallel=True, cache=True, error_model="numpy")
def contrastive_p_cls_cpu(exp_sim, valid, p):
    """P_constrastive (the classifier's) for every listed pair (i, l): exp_sim[i, l] over the
    sum of exp_sim[k, l] for every k != i (unlisted pairs hold 0), no guard."""
    K = exp_sim.shape[0]
    for i in prange(K):
        for j in range(K):
            p[i, j] = _0
            if valid[i, j] == 0:
                continue
            den = _0
            for k in range(K):
                if k != i:
                    den += exp_sim[k, j]
            p[i, j] = exp_sim[i, j] / den


@njit(cache=True, error_model="numpy")
def _vec_len(z, i):
    s = _0
    for m in range(z.shape[1]):
        s += z[i, m] * z[i, m]
    return f32(math.sqrt(np.float64(s)))


@njit(parallel=True, cache=True, error_model="numpy")
def contrastive_deltas_cpu(z, zidx, labels, class_ids, act_idx, act_pos, act_labels,
                           act_class, sim, p, valid, n, wh, emb, temperature, neg_max,
                           detection, delta, bad):
    """The deltas of every labelled sample i (grad_contrastive_loss_positive(_f) then
    grad_contrastive_loss_negative(_f)), written at the input's position of its embedding:
    image b's block of n*emb*wh, anchor a's of emb*wh, its cell, stride wh (the C's
    delta_index, which assumes c = n * emb). mult = 1 / ((N - 1) T |z_i|), N = samples with
    its label (itself included).
    Positive: for each listed partner j of its label, delta -= mult (sim z_i - z_j)(1 - P).
    Negative, detector: for each partner j of its label, each other sample k (act_*: every
    sample a truth marked, labelled or not) with another label and j's class counts toward
    neg_max; a listed (i, k) adds -= mult (z_k - sim z_i) P; the loop ends when neg_max
    samples were counted. Classifier: every other labelled k, without a limit, listed or not
    (an unlisted pair has sim = P = 0, as the C's arrays hold).
    A zero embedding stops AlexeyAB with an error: bad[i] = 1 and no delta for it."""
    K = zidx.shape[0]
    A = act_idx.shape[0]
    for i in prange(K):
        vec_len = _vec_len(z, i)
        N = 0
        for j in range(K):
            if labels[j] == labels[i]:
                N += 1
        if vec_len == 0:
            bad[i] = 1
            continue
        mult = _1 / (f32(N - 1) * temperature * vec_len)
        s = zidx[i]
        b = s // (n * wh)
        a = (s // wh) % n
        base = b * emb * n * wh + a * emb * wh + s % wh
        for j in range(K):
            if j == i or labels[j] != labels[i]:
                continue
            if detection and valid[i, j] == 0:
                continue
            sj = sim[i, j]
            w = _1 - p[i, j]
            for m in range(emb):
                delta[base + m * wh] -= mult * (sj * z[i, m] - z[j, m]) * w
        counter = 0
        done = False
        for j in range(K):
            if done:
                break
            if j == i or labels[j] != labels[i]:
                continue
            if detection:
                for q in range(A):
                    if act_idx[q] == zidx[i] or act_idx[q] == zidx[j]:
                        continue
                    if act_labels[q] == labels[i] or act_class[q] != class_ids[j]:
                        continue
                    counter += 1
                    k = act_pos[q]
                    if k < 0 or valid[i, k] == 0:
                        continue
                    sk = sim[i, k]
                    pk = p[i, k]
                    for m in range(emb):
                        delta[base + m * wh] -= mult * (z[k, m] - sk * z[i, m]) * pk
                    if counter >= neg_max:
                        done = True
                        break
            else:
                for k in range(K):
                    if k == i or k == j:
                        continue
                    sk = sim[i, k]
                    pk = p[i, k]
                    for m in range(emb):
                        delta[base + m * wh] -= mult * (z[k, m] - sk * z[i, m]) * pk


@njit(cache=True, error_model="numpy")
def scale_clip_cpu(delta, scale, max_delta):
    """scal_cpu(scale) then clip_value to +-max_delta, every element."""
    for i in range(delta.shape[0]):
        v = delta[i] * scale
        if v > max_delta:
            v = max_delta
        elif v < -max_delta:
            v = -max_delta
        delta[i] = v
