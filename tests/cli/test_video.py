"""Detection on video files: `darknumba detect VIDEO`, `darknumba detector demo` and
Detector.iter_video / predict_video. A tiny yolo network with Darknet's random initialisation
runs on short synthetic clips and on one made of the sample photos of the test dependencies:
frame count, size and frame rate of the written video, one JSON line per frame whose detections
are Detector.predict's on the same decoded frames, Darknet's demo grammar, and one clear line for
every bad input. PyAV comes with the [test] extra; the message for a missing PyAV is checked
with its import blocked."""
import json
import sys
from fractions import Fraction

import numpy as np
import pytest
from conftest import sample_photos
from PIL import Image
from tiny_nets import NAMES, write_small_detector

import darknumba as dn
from darknumba.cli import run
from darknumba.errors import DataError

import av

THRESH = 0.4
FPS = Fraction(25, 2)


def shapes_frames(n, h, w, seed=0):
    """n (h, w, 3) uint8 frames: a ring and a block drifting over a noisy background."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    out = []
    for k in range(n):
        im = rng.integers(40, 90, (h, w, 3), dtype=np.uint8)
        cy, cx = h // 3 + k, w // 3 + 2 * k
        r = np.hypot(yy - cy, xx - cx)
        im[(r > h / 8) & (r < h / 5)] = (230, 60, 40)
        im[h // 2:h // 2 + h // 4, w // 2 - k:w // 2 - k + w // 4] = (40, 90, 220)
        out.append(im)
    return out


def write_video(path, frames, fps=FPS):
    """Frames into a lossless H.264 file (4:4:4, qp 0), so decoding gives them back."""
    h, w = frames[0].shape[:2]
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=fps, options={"qp": "0"})
        s.width, s.height, s.pix_fmt = w, h, "yuv444p"
        for a in frames:
            for packet in s.encode(av.VideoFrame.from_ndarray(a, format="rgb24")):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    return path


def decoded(path):
    """(frames as (h, w, 3) uint8 RGB, stream facts) read with PyAV directly."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(s)]
        return frames, {"width": s.width, "height": s.height, "fps": s.average_rate}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The tiny network's cfg, random .weights, names and .data files, and a 7-frame clip
    whose width and height are odd."""
    root = tmp_path_factory.mktemp("video")
    cfg, weights, names = write_small_detector(root)
    data = root / "small.data"
    data.write_text(f"classes=2\nnames={names}\n")
    clip = write_video(root / "clip.mp4", shapes_frames(7, 47, 63))
    return {"cfg": cfg, "weights": weights, "names": names, "data": data, "clip": clip}


def call(capsys, *args):
    code = run([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def error_line(err):
    """The one `darknumba: error: ...` line (the only line on stderr)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("darknumba: error: "), err
    return lines[0]


# -- the library -------------------------------------------------------------------------------
def test_frames_detect_as_predict_on_the_decoded_frames(small, tmp_path):
    """Batched 3 frames a pass (7 frames: a short last batch), each frame's detections are
    Detector.predict's on that decoded frame, one at a time; the drawn video keeps size and
    frame rate, and its frames are the drawn ones."""
    det = dn.Detector(small["cfg"], small["weights"], batch=3, thresh=THRESH, names=NAMES)
    out = tmp_path / "drawn.mp4"
    records = det.predict_video(small["clip"], out=out)
    frames, facts = decoded(small["clip"])
    assert len(records) == len(frames) == 7
    one = dn.Detector(small["cfg"], small["weights"], batch=1, thresh=THRESH, names=NAMES)
    expected = one.predict(frames)
    assert sum(len(r["detections"]) for r in records) > 0       # the check compares boxes
    for k, (r, e) in enumerate(zip(records, expected, strict=True)):
        assert r["video"] == str(small["clip"]) and r["frame"] == k
        assert r["time"] == pytest.approx(k / FPS, abs=1e-6)
        assert (r["width"], r["height"]) == (63, 47) == (e["width"], e["height"])
        assert r["detections"] == e["detections"], k
    drawn, out_facts = decoded(out)
    assert len(drawn) == 7 and out_facts == facts == {"width": 63, "height": 47, "fps": FPS}
    for k in (0, 6):
        want = np.asarray(one.draw(frames[k], expected[k]), np.float32)
        got = drawn[k].astype(np.float32)
        assert np.abs(got - want).mean() < 0.5 * np.abs(got - frames[k]).mean(), k


def test_iter_video_gives_lines_and_predictions(small):
    det = dn.Detector(small["cfg"], small["weights"], batch=2, thresh=THRESH, names=NAMES)
    got = list(det.iter_video(small["clip"]))
    assert [f.frame for f in got] == list(range(7))
    for f in got:
        assert f.lines() == [f"{d['name']}: {d['prob'] * 100:.0f}%"
                             for d in f.record["detections"]]
        assert f.prediction.image.shape == (3, 47, 63)


@pytest.mark.parametrize("suffix", [".avi", ".mkv", ".webm"])
def test_other_containers_keep_size_and_rate(small, tmp_path, suffix):
    frames = shapes_frames(4, 40, 56)
    clip = write_video(tmp_path / "in.mp4", frames, fps=Fraction(30000, 1001))
    det = dn.Detector(small["cfg"], small["weights"], batch=2, thresh=THRESH, names=NAMES)
    assert len(det.predict_video(clip, out=tmp_path / f"out{suffix}")) == 4
    drawn, facts = decoded(tmp_path / f"out{suffix}")
    assert len(drawn) == 4
    assert facts == {"width": 56, "height": 40, "fps": Fraction(30000, 1001)}


def test_clip_of_photos(small, tmp_path):
    """A clip of the sample photos (each resized to 96x72, two frames each)."""
    frames = [np.asarray(Image.open(p).convert("RGB").resize((96, 72))) for p in sample_photos()
              for _ in range(2)]
    clip = write_video(tmp_path / "photos.mp4", frames)
    det = dn.Detector(small["cfg"], small["weights"], batch=4, thresh=0.3, names=NAMES)
    records = det.predict_video(clip)
    one = dn.Detector(small["cfg"], small["weights"], batch=1, thresh=0.3, names=NAMES)
    assert [r["detections"] for r in records] == \
        [e["detections"] for e in one.predict(decoded(clip)[0])]


# -- the command line --------------------------------------------------------------------------
def test_detect_video_writes_json_lines_and_the_video(small, tmp_path, capsys):
    out, jl = tmp_path / "annotated.mp4", tmp_path / "frames.jsonl"
    code, stdout, err = call(capsys, "detect", small["cfg"], small["weights"], small["clip"],
                             "--out", out, "--json", jl, "--thresh", THRESH, "--batch", 4,
                             "--names", small["names"])
    assert code == 0, err
    records = json_lines(jl.read_text())
    det = dn.Detector(small["cfg"], small["weights"], batch=4, thresh=THRESH, names=NAMES)
    assert records == det.predict_video(small["clip"])
    heads = [line for line in stdout.splitlines() if " frame " in line]
    assert len(heads) == 7 and heads[0].startswith(f"{small['clip']} frame 0 at 0.000 s: ")
    summary = err.strip().splitlines()[-1]
    assert summary.startswith("7 frames in ") and "frames/s" in summary
    assert "video 63x47 at 12.5 fps" in summary and f"drawn into {out}" in summary
    drawn, facts = decoded(out)
    assert len(drawn) == 7 and facts == {"width": 63, "height": 47, "fps": FPS}


def test_detect_video_json_to_stdout_replaces_the_lines(small, capsys):
    code, stdout, err = call(capsys, "detect", small["cfg"], small["weights"], small["clip"],
                             "--json", "-", "--thresh", THRESH, "--names", small["names"])
    assert code == 0, err
    records = json_lines(stdout)
    assert [r["frame"] for r in records] == list(range(7))
    assert all(set(r) == {"video", "frame", "time", "width", "height", "detections"}
               for r in records)


def test_demo_in_darknets_grammar(small, tmp_path, capsys):
    out = tmp_path / "res.avi"
    code, stdout, err = call(capsys, "detector", "demo", small["data"], small["cfg"],
                             small["weights"], small["clip"], "-out_filename", out,
                             "-thresh", THRESH, "-dont_show", "-ext_output")
    assert code == 0, err
    assert stdout.splitlines()[0] == f"video file: {small['clip']}"
    assert stdout.count("Objects:") == 7 and stdout.count("FPS:") == 7
    det = dn.Detector(small["cfg"], small["weights"], thresh=THRESH, names=small["names"],
                      ext_output=True)
    lines = [line for f in det.iter_video(small["clip"]) for line in f.lines()]
    assert lines and "(left_x:" in lines[0]
    printed = [line for line in stdout.splitlines()
               if line and not line.startswith(("video file:", "FPS:", "Objects:"))]
    assert printed == lines
    drawn, facts = decoded(out)
    assert len(drawn) == 7 and facts == {"width": 63, "height": 47, "fps": FPS}


def test_demo_thresh_and_json(small, tmp_path, capsys):
    jl = tmp_path / "demo.jsonl"
    code, _, err = call(capsys, "detector", "demo", small["data"], small["cfg"],
                        small["weights"], small["clip"], "--json", jl, "-thresh", "0.6")
    assert code == 0, err
    records = json_lines(jl.read_text())
    assert len(records) == 7
    assert all(d["prob"] > 0.6 for r in records for d in r["detections"])
    assert not (tmp_path / "res.avi").exists()


def test_demo_usage(small, capsys):
    code, _, err = call(capsys, "detector", "demo", small["data"], small["cfg"],
                        small["weights"])
    assert code == 1 and "give VIDEO" in error_line(err)
    code, _, err = call(capsys, "detector", "demo", small["data"], small["cfg"],
                        small["weights"], small["clip"], "-c", "0")
    assert code == 2 and "unknown option '-c'" in err and "-out_filename X" in err


# -- bad input: one clear line, exit status 1 --------------------------------------------------
def test_bad_inputs_are_one_line(small, tmp_path, capsys):
    base = ["detect", small["cfg"], small["weights"]]
    fake = tmp_path / "notes.mp4"
    fake.write_text("not a video\n")
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    cases = [
        ([tmp_path / "missing.mp4"], "video not found"),
        ([fake], "is not a video FFmpeg can read"),
        ([small["clip"], "--out", blocker / "out.mp4"], "file.txt"),
        ([small["clip"], "--out", tmp_path / "out.png"], "needs one of the suffixes"),
        ([small["clip"], small["clip"]], "give one VIDEO"),
    ]
    for extra, text in cases:
        code, _, err = call(capsys, *base, *extra)
        assert code == 1 and text in error_line(err), (extra, err)
    code, _, err = call(capsys, *base, small["clip"], "--out", small["clip"])
    assert code == 2 and "is the input video" in error_line(err)     # usage: test_outputs_safe.py
    code, _, err = call(capsys, "detector", "demo", small["data"], small["cfg"],
                        small["weights"], small["data"])
    assert code == 1 and "not a video FFmpeg can read" in error_line(err)


def test_an_image_or_a_sound_is_not_a_video(small, tmp_path):
    im = tmp_path / "still.png"
    Image.fromarray(shapes_frames(1, 20, 20)[0]).save(im)
    sound = tmp_path / "sound.mp4"
    with av.open(str(sound), "w") as c:
        s = c.add_stream("aac", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp",
                                           layout="mono")
        frame.sample_rate = 8000
        for packet in [*s.encode(frame), *s.encode()]:
            c.mux(packet)
    det = dn.Detector(small["cfg"], small["weights"], names=NAMES)
    with pytest.raises(DataError, match="is an image, not a video"):
        det.predict_video(im)
    with pytest.raises(DataError, match=r"has no video stream \(streams: audio\)"):
        det.predict_video(sound)


def test_a_failed_network_leaves_no_output(small, tmp_path, capsys):
    bad = tmp_path / "bad.cfg"
    bad.write_text("[net]\nwidth=32\nheight=32\nchannels=3\n[convolutional]\nfilters=x\n")
    out = tmp_path / "never.mp4"
    code, _, err = call(capsys, "detect", bad, small["weights"], small["clip"], "--out", out)
    assert code == 1 and "filters" in error_line(err)
    assert not out.exists()


def test_without_pyav_one_line_says_how_to_install(small, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)          # `import av` raises ImportError
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\0" * 16)
    code, _, err = call(capsys, "detect", small["cfg"], small["weights"], clip)
    assert code == 1 and "pip install darknumba[video]" in error_line(err)
