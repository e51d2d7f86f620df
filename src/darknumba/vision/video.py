"""Detection on video files: Darknet's `detector demo` reading a file, with the frames batched
through a Detector (vision/detector.py) and the drawn frames written to a new video.

    det = dn.Detector("cfg/yolov3-tiny.cfg", "yolov3-tiny.weights", batch=4)
    for f in det.iter_video("clip.mp4", out="annotated.mp4"):
        print(f.record)

Decoding and encoding use PyAV, whose wheels carry FFmpeg's codecs (the optional extra:
`pip install darknumba[video]`). Frames are decoded as 8-bit RGB at the stream's size (a
frame of another size mid-stream is scaled to it) and go through the Detector as (h, w, 3)
uint8 arrays, converted to the network's channels as image files are; a rotation the file
asks players for is not applied (as EXIF orientation is not for images). The written video
keeps the input's size and frame rate (constant, the stream's average rate); audio and
subtitles are not copied.

A frame record is what `darknumba detect VIDEO --json` writes, one JSON line per frame:
    video          the path as given
    frame          the frame's index in decoding order, from 0
    time           its presentation time in seconds from the stream's start (index / fps when
                   the file gives none)
    width, height  the frame's size in pixels
    detections     as an image record's (vision/detector.py): box, class_id, name, prob,
                   left, top, right, bottom, x, y, w, h, objectness
"""
from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Iterator

import numpy as np

from ..errors import DataError, WriteError
from ..outputs import PendingFile, check_outputs_not_inputs

VIDEO_EXTS = {".mp4", ".m4v", ".mov", ".avi", ".mkv", ".webm", ".mpg", ".mpeg", ".ts",
              ".mts", ".m2ts", ".wmv", ".flv", ".3gp", ".ogv", ".mjpeg", ".y4m"}
# the encoders tried for an output suffix, first available wins; H.264 and MPEG-4 part 2 play
# almost anywhere, VP9 is what .webm players expect
ENCODERS = {".mp4": ("libx264", "mpeg4"), ".m4v": ("libx264", "mpeg4"),
            ".mov": ("libx264", "mpeg4"), ".mkv": ("libx264", "mpeg4"),
            ".avi": ("mpeg4", "mjpeg"), ".webm": ("libvpx-vp9", "libvpx")}
INSTALL = "pip install darknumba[video]"
_IMAGE_FORMATS = ("image2",)            # FFmpeg opens a still image as a one-frame "video"


def is_video(path) -> bool:
    """Whether a path names a video file by its suffix (.mp4, .avi, .mkv, .mov, .webm ...)."""
    return Path(path).suffix.lower() in VIDEO_EXTS


def require_av():
    """The `av` module (PyAV), or a DataError saying how to install it."""
    try:
        import av
    except ImportError:
        raise DataError(f"reading and writing video needs PyAV, which is not installed: "
                        f"{INSTALL}") from None
    return av


def _reason(e: Exception) -> str:
    """An FFmpeg error's message without PyAV's `[Errno N]` and the file name it appends."""
    return getattr(e, "strerror", None) or str(e)


# -- reading -----------------------------------------------------------------------------------
class VideoReader:
    """The frames of a video file's first video stream as (index, time, (h, w, 3) uint8 RGB);
    `width`, `height`, `fps` (a Fraction: the stream's average rate) and `frames` (the count
    the container states, None when it states none, as .mkv/.webm do).

    Use as a context manager. A file that is missing, not a video, or a still image is a
    DataError naming it; so is a frame FFmpeg cannot decode (naming its index)."""

    def __init__(self, path):
        av = require_av()
        self.path = Path(path)
        if not self.path.exists():
            raise DataError(f"video not found: {self.path}")
        if not self.path.is_file():
            raise DataError(f"video {self.path} is "
                            f"{'a directory' if self.path.is_dir() else 'not a regular file'}")
        try:
            self.container = av.open(os.fspath(self.path))
        except av.error.FFmpegError as e:
            raise DataError(f"{self.path} is not a video FFmpeg can read: {_reason(e)}") from None
        try:
            self.stream = self._video_stream()
        except DataError:
            self.container.close()
            raise
        self.stream.thread_type = "AUTO"        # FFmpeg's frame/slice threads decode ahead
        # read once: PyAV's stream objects must not be touched after the container closes
        self.width, self.height = int(self.stream.width), int(self.stream.height)
        self.fps = self._rate()
        self.frames = int(self.stream.frames) or None

    def _video_stream(self):
        if self.container.format.name in _IMAGE_FORMATS or \
                self.container.format.name.endswith("_pipe"):
            raise DataError(f"{self.path} is an image, not a video (detect on images with "
                            f"`darknumba detect` or `detector test`)")
        if not self.container.streams.video:
            raise DataError(f"{self.path} has no video stream (streams: "
                            + (", ".join(s.type for s in self.container.streams) or "none") + ")")
        stream = self.container.streams.video[0]
        try:
            width, height = stream.width, stream.height
        except AttributeError:      # PyAV has no codec context for a stream it cannot decode
            raise DataError(f"{self.path}: FFmpeg cannot decode its video stream (damaged or "
                            f"an unknown codec)") from None
        if not width or not height:
            raise DataError(f"{self.path}: its video stream has no frame size")
        return stream

    def _rate(self) -> Fraction:
        """Frames per second: the stream's average rate, else FFmpeg's guess, else 25."""
        for rate in (self.stream.average_rate, self.stream.guessed_rate, self.stream.base_rate):
            if rate:
                return Fraction(rate)
        return Fraction(25)

    def __iter__(self) -> Iterator[tuple[int, float, np.ndarray]]:
        av = require_av()
        if self.container is None:
            raise ValueError(f"{self.path}: the reader is closed")
        tb, start = self.stream.time_base, self.stream.start_time or 0
        index = 0
        try:
            for frame in self.container.decode(self.stream):
                t = (float((frame.pts - start) * tb) if frame.pts is not None and tb
                     else float(index / self.fps))
                yield index, t, frame.to_ndarray(format="rgb24", width=self.width,
                                                 height=self.height)
                index += 1
        except av.error.FFmpegError as e:
            raise DataError(f"{self.path}: frame {index} cannot be decoded: {_reason(e)}") from None

    def close(self):
        if self.container is not None:
            self.container.close()
            self.container = self.stream = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# -- writing -----------------------------------------------------------------------------------
def check_output(path, source=None) -> Path:
    """An output video path: a suffix with an encoder (ENCODERS; else a DataError) and not
    the input itself, nor a link to it (a UsageError)."""
    p = Path(path)
    if p.suffix.lower() not in ENCODERS:
        raise DataError(f"the output video {p} needs one of the suffixes "
                        f"{', '.join(sorted(ENCODERS))} (its container and codec)")
    check_outputs_not_inputs({"the output video": p}, {"the input video": source})
    return p


class VideoWriter:
    """Frames (h, w, 3) uint8 RGB arrays or Pillow images, all of one size, encoded into a
    new file at a constant frame rate: H.264 for .mp4/.m4v/.mov/.mkv (4:2:0; 4:4:4 for an odd
    width or height, which 4:2:0 cannot hold), MPEG-4 for .avi, VP9 for .webm.

    The video is encoded into a temporary file beside `path`, created when the writer is
    made (an unwritable folder fails before any work); close() flushes the encoder and
    renames it over `path`. A failed write (full disk, file-size limit) or discard() leaves
    `path` as it was; the error is a WriteError naming it. Use as a context manager."""

    def __init__(self, path, width: int, height: int, fps, source=None):
        av = require_av()
        self.path = check_output(path, source)
        tried = ENCODERS[self.path.suffix.lower()]
        codec = next((c for c in tried if c in av.codecs_available), None)
        if codec is None:
            raise DataError(f"no encoder for {self.path.suffix} in this PyAV build (tried "
                            f"{', '.join(tried)})")
        self.pending = PendingFile(self.path)   # FFmpeg reports an unwritable path only later
        self.pending.close_fd()
        try:
            self.container = av.open(self.pending.tmp, "w")     # the format: from the suffix
        except BaseException:
            self.pending.discard()
            raise
        self.stream = self.container.add_stream(codec, rate=Fraction(fps))
        self.stream.width, self.stream.height = int(width), int(height)
        odd = width % 2 or height % 2
        self.stream.pix_fmt = ("yuvj420p" if codec == "mjpeg" else
                               "yuv444p" if odd and codec == "libx264" else "yuv420p")

    def write(self, image):
        av = require_av()
        if self.container is None:
            raise ValueError(f"{self.path}: the writer is closed")
        a = np.asarray(image.convert("RGB") if hasattr(image, "convert") else image, np.uint8)
        if a.shape != (self.stream.height, self.stream.width, 3):
            raise ValueError(f"a frame of shape {a.shape} for a {self.stream.width}x"
                             f"{self.stream.height} video")
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(a), format="rgb24")
        try:
            for packet in self.stream.encode(frame):
                self.container.mux(packet)
        except OSError as e:
            self.discard()
            raise WriteError(self.path, e) from None

    def close(self):
        """Flush the encoder and put the video in place at `path`."""
        if self.container is None:
            return
        try:
            for packet in self.stream.encode():
                self.container.mux(packet)
            self.container.close()
        except OSError as e:
            self.discard()
            raise WriteError(self.path, e) from None
        except BaseException:
            self.discard()
            raise
        self.container = None
        self.pending.commit()

    def discard(self):
        """Stop and delete what was written: `path` is left as it was."""
        try:
            if self.container is not None:
                self.container.close()
        except OSError:
            pass
        finally:
            self.container = None
            self.pending.discard()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_video(video, out=None):
    """(reader, writer or None) for a video and its drawn copy, both checked before the
    network loads: a missing or unreadable video, a bad output suffix or an unwritable output
    fails here."""
    if out is not None:
        check_output(out, video)
    reader = VideoReader(video)
    try:
        writer = (VideoWriter(out, reader.width, reader.height, reader.fps, source=video)
                  if out is not None else None)
    except BaseException:
        reader.close()
        raise
    return reader, writer


# -- detection ---------------------------------------------------------------------------------
@dataclass
class FramePrediction:
    """One frame's outcome in Detector.iter_video: the image Prediction (its detections,
    lines, drawing) with where the frame sits in the video."""
    video: str
    frame: int
    time: float
    prediction: object              # vision.detector.Prediction

    @cached_property
    def record(self) -> dict:
        """The frame's JSON record (see the module docstring)."""
        rec = self.prediction.record
        return {"video": self.video, "frame": self.frame, "time": round(self.time, 6),
                **{k: rec[k] for k in ("width", "height", "detections")}}

    def lines(self) -> list[str]:
        return self.prediction.lines()


def detect_video(detector, reader: VideoReader, writer: VideoWriter | None = None
                 ) -> Iterator[FramePrediction]:
    """Every frame of `reader` through `detector` (net.batch frames per forward pass, decoded
    ahead by Detector.run), in order; each drawn into `writer` when one is given."""
    where: deque = deque()

    def frames():
        for index, t, rgb in reader:
            where.append((index, t))
            yield rgb

    video = os.fspath(reader.path)
    for p in detector.run(frames()):
        index, t = where.popleft()
        if writer is not None:
            writer.write(p.draw())
        yield FramePrediction(video, index, t, p)
