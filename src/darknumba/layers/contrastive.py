"""[contrastive] as AlexeyAB's darknet computes it on the CPU (supervised contrastive learning:
`softmax_layer.c:make_contrastive_layer, forward_contrastive_layer,
backward_contrastive_layer`, `parser.c:parse_contrastive`; kernels in kernels/contrastive.py).

Two modes:
- detector (yolo_layer= names an AlexeyAB [yolo] with embedding_layer=): the input is the
  embedding map, n anchors x emb channels per cell; the samples are the anchors and cells a
  truth trains, labelled by the truth's track id (its 6th value), paired within one class and
  one time step. Pulls embeddings of one track together, pushes up to contrastive_neg_max
  others of the class away.
- classifier (no yolo_layer): one embedding of c values per image (a 1 x 1 input); image b's
  label is b / 2 (two augmentations of one picture), replaced by the last class whose truth
  value exceeds [net] label_smooth_eps.

Training forward fills delta (scaled by cls_normalizer, clipped to max_delta) and cost =
|delta|^2; `accuracy` is the C's "Contrast accuracy" (%). Backward adds delta to the input's.
The output is a copy of the input, as AlexeyAB's GPU forward makes it; its CPU forward never
writes the output (zeros): that under compat="darknet-cpu" (quirks.contrastive_output_zero).
"""
import numpy as np

from ..errors import DarknumbaError, DataError
from ..kernels.contrastive import (contrastive_accuracy_cpu, contrastive_deltas_cpu,
                                   contrastive_labels_cpu, contrastive_p_cls_cpu,
                                   contrastive_p_det_cpu, contrastive_pairs_cpu,
                                   get_embeddings_cpu, scale_clip_cpu)
from ..kernels.yolo_ab_loss import yolo_delta_squares
from .base import Layer, pass_delta, scratch_of
from .truth import check_box_truth

FLT_MAX = float(np.finfo(np.float32).max)


class ContrastiveLayer(Layer):
    """AlexeyAB's [contrastive]: classes 1000 (the classifier's truth width), yolo_layer
    (0: the classifier mode), temperature 1, cls_normalizer 1, max_delta FLT_MAX,
    contrastive_neg_max 3; steps = [net] time_steps."""
    type = "contrastive"
    reports_stats = True

    def __init__(self, batch, w, h, c, classes, n, embedding_size, yolo_layer=None):
        self.batch, self.w, self.h, self.c = batch, w, h, c
        self.out_w, self.out_h, self.out_c = w, h, c
        self.inputs = self.outputs = w * h * c
        self.classes, self.n, self.embedding_size = classes, n, embedding_size
        self.yolo_layer = yolo_layer           # the [yolo] layer's index, None: classifier
        self.detection = yolo_layer is not None
        self.temperature = 1.0
        self.steps = 1
        self.cls_normalizer = 1.0
        self.max_delta = FLT_MAX
        self.contrastive_neg_max = 3
        self.cost = 0.0
        self.accuracy = -1.0
        self.stats = None
        self._labels = self._class_ids = None
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        """parse_contrastive + make_contrastive_layer. AlexeyAB's parser dereferences a null
        [yolo] when yolo_layer is absent (its classifier mode cannot be built there); here it
        builds. Refused where AlexeyAB would read out of bounds: a classifier input of more
        than one cell, a detector input of another grid than the [yolo]'s."""
        net = params.net
        classes = s.find_int("classes", 1000, at_least=1)
        yid = s.find_int("yolo_layer", 0)
        if yid < 0:
            yid += params.index
        c, wh = params.c, params.w * params.h
        if yid == 0:
            if wh != 1 or not params.c:
                raise s.error(None, f"a [contrastive] layer without yolo_layer= (the "
                                    f"classifier's) needs a 1 x 1 x c input, one embedding per "
                                    f"image; found {params.w} x {params.h} x {params.c}")
            l = cls(params.batch, params.w, params.h, c, classes, 1, c)
            # it reads truth[b * classes + k] (the classifier trainer's one-hot rows): the
            # network's truth has classes values per image, whatever the embedding's size
            l.truths = classes
        else:
            if not 0 <= yid < params.index or net.layers[yid].type != "yolo" \
                    or not hasattr(net.layers[yid], "embedding_layer"):
                raise s.error("yolo_layer", f"must name an AlexeyAB [yolo] layer before this "
                                            f"one (0..{params.index - 1}), found layer {yid}")
            y = net.layers[yid]
            if (params.w, params.h) != (y.w, y.h):
                raise s.error("yolo_layer", f"the input is {params.w} x {params.h}, the [yolo] "
                                            f"layer {yid} {y.w} x {y.h}: they must match")
            emb = params.inputs // (y.n * wh)
            yolo_emb = (net.layers[y.embedding_layer].out_c // y.n
                        if y.embedding_layer is not None else 0)
            if emb != yolo_emb:
                raise s.error("yolo_layer", f"embedding size {emb} (the input's channels / "
                                            f"{y.n} anchors) is not the [yolo] layer {yid}'s "
                                            f"{yolo_emb} (its embedding_layer's filters / "
                                            f"anchors): they should read the same layer")
            l = cls(params.batch, params.w, params.h, c, y.classes, y.n, emb, yid)
        l.temperature = s.find_float("temperature", 1.0)
        if l.temperature == 0:
            raise s.error("temperature", "must not be 0 (AlexeyAB stops with an error)")
        l.steps = net.options.time_steps
        l.cls_normalizer = s.find_float("cls_normalizer", 1.0)
        l.max_delta = s.find_float("max_delta", FLT_MAX)
        l.contrastive_neg_max = s.find_int("contrastive_neg_max", 3)
        return l

    def resize(self, w, h):
        self.w = self.out_w = w
        self.h = self.out_h = h
        self.inputs = self.outputs = w * h * self.c
        self._alloc_io()

    # -- the verbs -------------------------------------------------------------------------
    def forward(self, net):
        """forward_contrastive_layer (its GPU twin's output copy, see the module)."""
        if not self.quirks.contrastive_output_zero:
            self.output[:] = net.input[:self.batch * self.inputs]
        if not net.train:
            return
        self.delta[:] = 0.0
        if net.truth is None:
            return
        if self.detection:
            zidx, labels, class_ids, act = self._detector_samples(net)
        else:
            zidx, labels, class_ids, act = self._classifier_samples(net)
        self._loss(net, zidx, labels, class_ids, act)

    def _detector_samples(self, net):
        """The [yolo] layer's labels and class ids (computed from the truth as its forward
        does), the labelled samples and every sample a truth marked."""
        y = net.layers[self.yolo_layer]
        where = f"[contrastive] layer {net.index}"
        check_box_truth(net.truth, where, self.batch, y.truths, y.truth_size, y.max_boxes,
                        y.classes, 4)
        rows = net.truth[:self.batch * y.truths].reshape(self.batch, -1)
        rows = rows[:, :y.max_boxes * y.truth_size].reshape(self.batch, y.max_boxes, -1)
        live = np.logical_and.accumulate(rows[..., 0] != 0, axis=1)
        if not np.isfinite(rows[..., 5][live]).all():
            raise DataError(f"{where}: a truth box's track id (its 6th value) is not finite")
        size = self.batch * self.n * self.w * self.h
        if self._labels is None or self._labels.size != size:
            self._labels = np.empty(size, np.int64)
            self._class_ids = np.empty(size, np.int64)
        contrastive_labels_cpu(net.truth, self.batch, y.truths, y.truth_size, y.max_boxes,
                               y.biases, np.ascontiguousarray(y.mask, np.int64), y.n, y.total,
                               y.w, y.h, y.classes, net.w, net.h, y.map, self._labels,
                               self._class_ids)
        zidx = np.flatnonzero(self._labels >= 0)
        act = np.flatnonzero(self._class_ids >= 0)
        return zidx, self._labels[zidx], self._class_ids[zidx], act

    def _classifier_samples(self, net):
        """Image b's label: b / 2, or the last class whose truth is > label_smooth_eps."""
        t = net.truth
        if t.size != self.batch * self.classes:
            raise DataError(f"[contrastive] layer {net.index}: the truth has {t.size} values, "
                            f"expected batch x classes = {self.batch} x {self.classes}")
        over = t.reshape(self.batch, self.classes) > np.float32(getattr(net, "label_smooth_eps",
                                                                         0.0))
        last = self.classes - 1 - np.argmax(over[:, ::-1], axis=1)
        labels = np.where(over.any(axis=1), last, np.arange(self.batch) // 2).astype(np.int64)
        zidx = np.arange(self.batch, dtype=np.int64)
        return zidx, labels, np.full(self.batch, -1, np.int64), np.zeros(0, np.int64)

    def _loss(self, net, zidx, labels, class_ids, act):
        f = np.float32
        K, emb, wh = zidx.size, self.embedding_size, self.w * self.h
        z = np.empty((K, emb), np.float32)
        get_embeddings_cpu(net.input, zidx, self.n, wh, self.c, emb, z)
        scratch = scratch_of(net)
        sim, exp_sim, valid, p = (scratch(f"contrastive_{k}", K * K).reshape(K, K)
                                  for k in ("sim", "exp_sim", "valid", "p"))
        per_image = self.n * wh
        mini_batch = max(self.batch // self.steps, 1)
        t = f(self.temperature)
        contrastive_pairs_cpu(z, zidx, labels, class_ids, per_image, mini_batch, t,
                              self.detection, sim, exp_sim, valid)
        all_sims, good = contrastive_accuracy_cpu(sim, valid, labels)
        self.accuracy = float(100 * good // all_sims) if all_sims else -1.0
        if self.detection:
            contrastive_p_det_cpu(sim, exp_sim, valid, t, p)
        else:
            contrastive_p_cls_cpu(exp_sim, valid, p)
        pos = np.searchsorted(zidx, act)
        found = (pos < K) & (zidx[np.minimum(pos, max(K - 1, 0))] == act) if K else \
            np.zeros(act.size, bool)
        act_pos = np.where(found, pos, -1).astype(np.int64)
        act_labels = self._labels[act] if self.detection else act
        act_class = self._class_ids[act] if self.detection else act
        bad = np.zeros(K, np.int64)
        contrastive_deltas_cpu(z, zidx, labels, class_ids, act, act_pos, act_labels, act_class,
                               sim, p, valid, self.n, wh, emb, t, self.contrastive_neg_max,
                               self.detection, self.delta, bad)
        if bad.any():
            s = int(zidx[np.argmax(bad)])
            raise DarknumbaError(
                f"[contrastive] layer {net.index}: the embedding of image {s // per_image}, "
                f"anchor {(s // wh) % self.n}, cell {s % wh} is all zeros (AlexeyAB stops: "
                f"vec_len == 0)")
        scale_clip_cpu(self.delta, f(self.cls_normalizer), f(self.max_delta))
        total, _ = yolo_delta_squares(self.delta, 1, self.delta.size, 1)
        self.cost = float(f(float(f(np.sqrt(np.float64(total)))) ** 2))
        self.stats = {"index": net.index, "accuracy": self.accuracy, "pairs": int(valid.sum()),
                      "samples": K, "all": all_sims, "good": good}

    def stats_line(self) -> str:
        """What AlexeyAB's forward prints: ` Contrast accuracy = A %, all = N, good = G, same =
        N, diff = N ` and ` contrastive loss = C ` (same and diff count the samples that have
        both kinds of partner, as all does)."""
        s = self.stats
        if s is None:
            return ""
        n = s["all"]
        return (f" Contrast accuracy = {s['accuracy']:f} %, all = {n}, good = {s['good']}, "
                f"same = {n}, diff = {n} \n contrastive loss = {self.cost:f} ")

    def backward(self, net):
        """backward_contrastive_layer: delta added into the input's."""
        pass_delta(net, self.delta, self.batch * self.inputs)

    def describe(self):
        return "contrastive"
