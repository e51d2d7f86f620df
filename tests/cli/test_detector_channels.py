"""Detector.predict's colour order: a BGR array (OpenCV's) with channels="bgr" gives the
detections of the RGB array with the default channels="rgb"; a wrong value is refused."""
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, tiny_weights
from PIL import Image

from darknumba.vision.detector import Detector

skimage = pytest.importorskip("skimage")
COFFEE = Path(skimage.__file__).parent / "data" / "coffee.png"


@pytest.fixture(scope="module")
def det():
    return Detector(ROOT / "cfg" / "yolov3-tiny.cfg", tiny_weights(), thresh=0.25)


@pytest.fixture(scope="module")
def rgb():
    return np.asarray(Image.open(COFFEE).convert("RGB"))


def test_bgr_array_same_as_rgb(det, rgb):
    bgr = np.ascontiguousarray(rgb[..., ::-1])
    want = det.predict(rgb)
    assert want[0]["detections"], "the sample photo should give a detection"
    assert det.predict(bgr, channels="bgr") == want
    assert det.predict(COFFEE) == [dict(want[0], image=str(COFFEE))]    # as the file
    assert det.predict(bgr) != want                 # BGR taken as RGB: other probabilities
    chw = rgb.transpose(2, 0, 1).astype(np.float32) / 255
    assert det.predict(np.ascontiguousarray(chw[::-1]), channels="bgr") == \
        det.predict(chw)


def test_opencv_image(det, rgb):
    cv2 = pytest.importorskip("cv2")
    bgr = cv2.imread(str(COFFEE))
    assert np.array_equal(bgr[..., ::-1], rgb)
    assert det.predict(bgr, channels="bgr") == det.predict(rgb)


def test_draw_takes_the_order_too(det, rgb):
    rec = det.predict(rgb)[0]
    a = np.asarray(det.draw(rgb, rec))
    b = np.asarray(det.draw(np.ascontiguousarray(rgb[..., ::-1]), rec, channels="bgr"))
    assert np.array_equal(a, b)


def test_wrong_order_refused(det, rgb):
    with pytest.raises(ValueError, match="channels must be one of 'rgb', 'bgr', not 'BGR'"):
        det.predict(rgb, channels="BGR")
