"""Slow reference for AlexeyAB's [contrastive] forward (`softmax_layer.c`, `blas.c`), written
loop by loop from its C as it runs: the z pointers per sample, the list of pairs
(contrastive_params) searched linearly, P per pair, the gradients per sample over every index
of the map. float64, except where noted."""
import math

import numpy as np


def cosine(a, b):
    d = math.sqrt(sum(v * v for v in a)) * math.sqrt(sum(v * v for v in b))
    return sum(x * y for x, y in zip(a, b)) / d if d > 0 else 0.0


def forward(inp, labels, class_ids, batch, n, h, w, c, emb, steps, temperature, neg_max,
            detection, cls_normalizer=1.0, max_delta=None):
    """(delta, accuracy %, cost). labels, class_ids: per z index (b*n*h*w + a*h*w + cell)."""
    wh = h * w
    step = batch * n * wh
    mini_batch = batch // steps
    z = {}
    for s in range(step):
        if labels[s] < 0:
            continue
        b, a, cell = s // (n * wh), (s // wh) % n, s % wh
        z[s] = [float(inp[b * c * wh + a * emb * wh + m * wh + cell]) for m in range(emb)]
    pairs = []               # [i, j, sim, exp_sim, P]
    cos = np.zeros((step, step))
    expc = np.zeros((step, step))
    same = {s: -10.0 for s in z}
    diff = {s: -10.0 for s in z}
    for i in sorted(z):
        for j in sorted(z):
            if i == j or (detection and class_ids[i] != class_ids[j]):
                continue
            if (i // (n * wh)) // mini_batch != (j // (n * wh)) // mini_batch:
                continue
            sim = cosine(z[i], z[j])
            e = math.exp(sim / temperature)
            cos[i, j], expc[i, j] = sim, e
            if labels[i] == labels[j]:
                same[i] = max(same[i], sim)
            else:
                diff[i] = max(diff[i], sim)
            pairs.append([i, j, sim, e, 0.0])
    all_sims = [s for s in z if same[s] >= -1 and diff[s] >= -1]
    good = sum(diff[s] < same[s] for s in all_sims)
    accuracy = 100 * good // len(all_sims) if all_sims else -1

    for p in pairs:
        i, j, sim = p[0], p[1], p[2]
        if detection:
            den = sum(q[3] for q in pairs if q[0] != i and q[1] == j)
            r = math.exp(sim / temperature) / den if den != 0 else 0.9999
            p[4] = 0.9999 if r > 1 else r
        else:
            p[4] = expc[i, j] / sum(expc[k, j] for k in range(step) if k != i)

    def find(i, j):
        for q in pairs:
            if q[0] == i and q[1] == j:
                return q
        return None

    delta = np.zeros(batch * c * wh)
    for i in sorted(z):
        b, a, cell = i // (n * wh), (i // wh) % n, i % wh
        base = b * emb * n * wh + a * emb * wh + cell
        vec_len = math.sqrt(sum(v * v for v in z[i]))
        N = sum(1 for j in range(step) if labels[j] == labels[i])
        mult = 1 / ((N - 1) * temperature * vec_len) if N > 1 else math.inf
        for j in range(step):
            if j == i or labels[j] != labels[i]:
                continue
            q = find(i, j)
            if detection and q is None:
                continue
            sim, P = (q[2], q[4]) if q else (0.0, 0.0)
            for m in range(emb):
                delta[base + m * wh] -= mult * (sim * z[i][m] - z[j][m]) * (1 - P)
        counter = 0
        done = False
        for j in range(step):
            if done:
                break
            if j == i or labels[j] != labels[i]:
                continue
            for k in range(step):
                if k == i or k == j:
                    continue
                if detection:
                    if labels[k] == labels[i] or class_ids[j] != class_ids[k]:
                        continue
                    counter += 1
                    q = find(i, k)
                    if q is None:
                        continue
                elif labels[k] < 0:
                    continue
                else:
                    q = find(i, k)
                sim, P = (q[2], q[4]) if q else (0.0, 0.0)
                zk = z[k]
                for m in range(emb):
                    delta[base + m * wh] -= mult * (zk[m] - sim * z[i][m]) * P
                if detection and counter >= neg_max:
                    done = True
                    break
    delta *= cls_normalizer
    if max_delta is not None:
        delta = np.clip(delta, -max_delta, max_delta)
    return delta, accuracy, float(np.sum(delta ** 2))


def yolo_labels(truth, batch, truths, max_boxes, biases, mask, total, lw, lh, classes, netw,
                neth, class_map=None):
    """AlexeyAB's forward_yolo_layer's l.labels (track ids) and l.class_ids."""
    import naive_yolo_ab as ab
    n = len(mask)
    labels = np.full(batch * n * lw * lh, -1)
    class_ids = np.full(batch * n * lw * lh, -1)
    rows = np.asarray(truth, np.float64).reshape(batch, max_boxes, 6)
    for b in range(batch):
        for t in range(max_boxes):
            x, y, tw, th, c, track = rows[b, t]
            if x == 0:
                break
            if not (-1 < c < classes):
                continue
            i, j = int(x * lw), int(y * lh)
            ious = [ab.box_iou((0, 0, biases[2 * a] / netw, biases[2 * a + 1] / neth),
                               (0, 0, tw, th)) for a in range(total)]
            best = 0
            for a in range(total):
                if ious[a] > ious[best]:
                    best = a
            if best not in list(mask):
                continue
            k = b * n * lw * lh + list(mask).index(best) * lw * lh + j * lw + i
            labels[k] = int(track)
            class_ids[k] = int(class_map[int(c)]) if class_map is not None else int(c)
    return labels, class_ids
