"""Non-maximum suppression in the exported graph (`export onnx --nms`), and the self-checks
of the decoded outputs against darknumba's own detections.

With --nms the graph ends in one `detections` output, (num, 7) float32, a row per kept box
and class:

    batch index, class id, score, x1, y1, x2, y2

score is Darknet's probability (objectness x class score); x1, y1 (top left) and x2, y2
(bottom right) are in pixels of the network input (undo the letterbox or resize to get the
image's pixels, as correct_yolo_boxes does). Rows come batch by batch, class by class, each
class's highest score first (ONNX's NonMaxSuppression order; Darknet prints by box instead).

What is kept: per class, every box whose score is > score_threshold (Darknet's `thresh`: its
get_yolo_detections keeps probabilities > thresh, and objectness > thresh follows as class
scores are <= 1), then greedy suppression of a box whose IoU with a higher-scored kept box of
the same class is > iou_threshold: pjreddie's do_nms_sort and AlexeyAB's DEFAULT_NMS. The
thresholds are constants of the graph (--thresh, --nms-thresh when exporting). How it may
differ from Darknet:
- AlexeyAB's nms_kind=greedynms (yolov4, yolov4-tiny) suppresses by DIoU = IoU - (centre
  distance / enclosing diagonal)^2 <= IoU: Darknet then keeps a few overlapping boxes that
  this graph drops; diounms (IoU - (d/c)^beta) likewise. --nms always uses IoU.
- equal scores: Darknet's sort keeps its own order, ONNX's may differ; and an IoU within float
  rounding of the threshold (Darknet computes it on boxes relative to the image, here on input
  pixels; IoU is the same under the per-axis scaling between them) may decide differently.
OpenCV's DNN module (4.x) has no NonMaxSuppression: with OpenCV export --decode and run
cv2.dnn.NMSBoxesBatched on the rows.
"""
from __future__ import annotations

import numpy as np

DETECTION_COLUMNS = ("batch", "class", "score", "x1", "y1", "x2", "y2")


def nms_detections(g, rows: str, classes: int, iou_thresh: float, score_thresh: float,
                   name: str = "detections") -> str:
    """The (num, 7) `name` tensor from decoded rows (batch, boxes, 5 + classes): centre x, y,
    width, height in input pixels, objectness, class scores (yolo.py)."""
    entries = 5 + classes
    xy, wh = g.slice(rows, 0, 2, 2), g.slice(rows, 2, 4, 2)
    half = g.op("Mul", [wh, g.const(np.float32(0.5))])
    corners = g.op("Concat", [g.op("Sub", [xy, half]), g.op("Add", [xy, half])], axis=2)
    scores = g.op("Mul", [g.slice(rows, 4, 5, 2), g.slice(rows, 5, entries, 2)])   # B, N, C
    scores = g.op("Transpose", [scores], perm=[0, 2, 1])                             # B, C, N
    keep = g.op("NonMaxSuppression", [
        corners, scores, g.const([2 ** 31 - 1], dtype=np.int64),    # every box a class has
        g.const([iou_thresh]), g.const([score_thresh])])            # K, 3: batch, class, box
    batch_box = g.op("Gather", [keep, g.const([0, 2], dtype=np.int64)], axis=1)
    box = g.op("GatherND", [corners, batch_box])                                     # K, 4
    score = g.op("Unsqueeze", [g.op("GatherND", [scores, keep]), g.const([1], dtype=np.int64)])
    ids = g.op("Cast", [g.op("Gather", [keep, g.const([0, 1], dtype=np.int64)], axis=1)],
               to=1)                                                                 # FLOAT
    return g.op("Concat", [ids, score, box], axis=1, name=name)


# -- self-checks: darknumba's own detections on the same input --------------------------------
def decoded_reference(net, b: int) -> np.ndarray:
    """Every candidate of image b as the decoded rows, but with Darknet's probabilities
    (objectness x class score) in place of the class scores: x, y, w, h in input pixels,
    objectness, probabilities (get_detections at thresh 0 on an image of the network's size,
    where correct_yolo_boxes changes nothing). Needs a forward pass first."""
    rows = []
    for l in net.layers:
        if l.type == "yolo":
            d = l.get_detections(net.w, net.h, net.w, net.h, 0.0, relative=True, b=b)
            rows.append(np.column_stack([d.bbox * [net.w, net.h, net.w, net.h],
                                         d.objectness, d.prob]))
    return np.concatenate(rows)


def nms_reference(net, b: int, iou_thresh: float, score_thresh: float) -> np.ndarray:
    """darknumba's detections of image b as `detections` rows: get_network_boxes at
    score_thresh, do_nms_sort (IoU) at iou_thresh, one row per (box, class) with prob >
    score_thresh, sorted by class, then score (highest first). Needs a forward pass first."""
    from ..vision.box import do_nms_sort, get_network_boxes
    dets = do_nms_sort(get_network_boxes(net, net.w, net.h, score_thresh, 0.5, True, b, False),
                       iou_thresh)
    rows = []
    for r, c in zip(*np.nonzero(dets.prob > np.float32(score_thresh))):
        x, y, w, h = dets.bbox[r].astype(np.float64) * [net.w, net.h, net.w, net.h]
        rows.append([b, c, dets.prob[r, c], x - w / 2, y - h / 2, x + w / 2, y + h / 2])
    rows = np.array(rows, np.float64).reshape(-1, 7)
    return rows[np.lexsort((-rows[:, 2], rows[:, 1]))]


def match_detections(got: np.ndarray, want: np.ndarray) -> tuple[int, int, float, float]:
    """(matched, unmatched, max |score difference|, max |corner difference| in pixels): each
    wanted row paired with the nearest got row of the same batch and class."""
    used = np.zeros(len(got), bool)
    matched, worst_score, worst_box = 0, 0.0, 0.0
    for row in want:
        same = np.flatnonzero((got[:, 0] == row[0]) & (got[:, 1] == row[1]) & ~used)
        if not same.size:
            continue
        d = np.abs(got[same, 3:] - row[3:]).max(axis=1)
        k = same[np.argmin(d)]
        used[k] = True
        matched += 1
        worst_score = max(worst_score, abs(float(got[k, 2]) - float(row[2])))
        worst_box = max(worst_box, float(d.min()))
    return matched, len(want) - matched + int((~used).sum()), worst_score, worst_box


def check_detections(net, got: np.ndarray, x: np.ndarray, nms: tuple | None) -> str:
    """One line comparing the graph's `detections` on input x (after net.forward(x)) with
    darknumba's: the decoded rows (nms None) or the kept boxes (nms = (iou, score))."""
    if nms is None:
        worst = 0.0
        for b in range(x.shape[0]):
            ref = decoded_reference(net, b)
            row = got[b].astype(np.float64)
            if len(ref) != len(row):        # the reference keeps objectness > 0 only: a NaN
                return (f"detections {got.shape[0]}x{got.shape[1]} rows, not compared: "  # or 0
                        f"darknumba keeps {len(ref)} of image {b}'s {len(row)} candidates "
                        f"(the others' objectness is 0 or NaN)")
            row[:, 5:] *= row[:, 4:5]                   # class scores -> probabilities
            scale = np.array([net.w, net.h, net.w, net.h], np.float64)
            worst = max(worst, float(np.abs(row[:, :4] / scale - ref[:, :4] / scale).max()),
                        float(np.abs(row[:, 4:] - ref[:, 4:]).max()))
        return (f"detections {got.shape[0]}x{got.shape[1]} rows, max |difference| {worst:.2e} "
                f"(boxes relative to the input size)")
    want = np.concatenate([nms_reference(net, b, *nms) for b in range(x.shape[0])])
    matched, unmatched, ds, db = match_detections(got.astype(np.float64), want)
    return (f"detections {len(got)} kept, darknumba {len(want)}: {matched} matched "
            f"(max |score difference| {ds:.2e}, |corner difference| {db:.2e} px), "
            f"{unmatched} unmatched")
