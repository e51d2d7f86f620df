"""Detection on a video file for `darknumba detect VIDEO` and `darknumba detector demo`: each
frame's lines (or one JSON line per frame), the drawn video, a progress bar in frames/s and a
summary line."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

from .common import check_detect_outputs, first_run_mode, json_lines_to, predicted_in, warn


def _fps(rate) -> str:
    return f"{float(rate):.6g}"


def run_video(detector, reader, writer=None, json_out: Optional[str] = None,
              demo: bool = False) -> int:
    """Detect on every frame of `reader` (vision.video.VideoReader) with a Detector; draw
    into `writer`; write JSON lines to `json_out` ('-': stdout, instead of the text lines).
    Text per frame: `VIDEO frame N at T s: Predicted in ...` and Darknet's lines, or with
    `demo` what Darknet's demo prints (`FPS:x`, `Objects:`, the lines). Closes both; returns
    the number of frames done."""
    from tqdm import tqdm

    from ..vision.video import detect_video

    text = json_out != "-"
    frames = 0
    bar = tqdm(total=reader.frames, unit="frame", file=sys.stderr, dynamic_ncols=True)
    start = time.perf_counter()
    try:
        with json_lines_to(json_out) as jf, bar:
            for f in detect_video(detector, reader, writer):
                frames += 1
                bar.update(1)
                if text:
                    rate = frames / max(time.perf_counter() - start, 1e-9)
                    head = ([f"FPS:{rate:.1f}", "Objects:", ""] if demo else
                            [f"{f.video} frame {f.frame} at {f.time:.3f} s: "
                             + predicted_in(f.prediction.seconds, detector.alexeyab)])
                    for line in head + f.lines():
                        bar.write(line, file=sys.stdout)
                if jf is not None:
                    jf.write(json.dumps(f.record) + "\n")
                    jf.flush()
    except BaseException:       # an error or Ctrl-C: the previous video (if any) stays
        if writer is not None:
            writer.discard()
        raise
    finally:
        reader.close()
        if writer is not None:
            writer.close()
    elapsed = time.perf_counter() - start
    warn(f"{frames} frames in {elapsed:.1f} s ({frames / max(elapsed, 1e-9):.2f} frames/s); "
         f"video {reader.width}x{reader.height} at {_fps(reader.fps)} fps"
         + (f"; drawn into {writer.path}" if writer is not None else ""))
    return frames


def detect_video_file(detector_args: dict, video, out: Optional[Path], json_out, batch: int,
                      demo: bool = False, thresh_default: str = "test_thresh") -> int:
    """Open the video (and its output), build the Detector from `detector_args` at `batch`
    frames per forward pass (a thresh of None: the dialect's `thresh_default`, a field of
    dialect.Defaults), and run_video."""
    from ..vision.detector import Detector
    from ..vision.video import open_video
    check_detect_outputs(out, json_out, [], {"the cfg": detector_args.get("cfg"),
                                             "the weights": detector_args.get("weights"),
                                             "--names": detector_args.get("names")}, video)
    reader, writer = open_video(video, out)
    try:
        detector = Detector(**detector_args, batch=batch, log=warn, first_run=first_run_mode())
    except BaseException:
        reader.close()
        if writer is not None:
            writer.discard()
        raise
    if detector_args.get("thresh") is None:
        detector.thresh = getattr(detector.defaults, thresh_default)
    if out is None and json_out is None and not demo:
        warn("no --out: the drawn video is not written")
    return run_video(detector, reader, writer, json_out, demo)


def video_args(args: list) -> Optional[str]:
    """The video among `detect`'s inputs (it must come alone), or None when there is none."""
    from ..errors import DataError
    from ..vision.video import is_video
    videos = [a for a in args if is_video(a)]
    if not videos:
        return None
    if len(args) > 1:
        raise DataError(f"a video is detected on alone: give one VIDEO ({videos[0]}) or images, "
                        f"not {len(args)} inputs")
    return videos[0]

