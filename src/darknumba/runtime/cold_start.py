"""A detector's first run on this CPU: the kernels it needs compiled (or loaded from numba's
cache) before an image is timed, in the least time the cache allows.

  - warm cache: the detector runs once on a blank image, every kernel loaded (fractions of a
    second);
  - cold cache (first_run="compile"): that run compiles, shared with a second process task by
    task (compile_ahead.py), with the compile notice (compile_notice.py);
  - cold cache (first_run="numpy"), a network numpy_forward.py covers: the forward pass runs in
    numpy instead, only the boxes' decoding and NMS are compiled here (seconds), and background
    processes compile the rest for later runs; the detector goes over to the compiled path once
    they have finished.

vision/detector.py's Detector holds one ColdStart and asks it `warm_up()` before its first
image and `forward()` before each batch.
"""
from __future__ import annotations

import atexit
import os
from typing import Callable

import numpy as np

from . import compile_ahead, launcher, numpy_forward
from .compile_notice import compile_notice

FIRST_RUNS = ("compile", "numpy")


class ColdStart:
    """The first run of `detector` (a vision.detector.Detector: its net, thresh, hier, nms and
    letterbox): `first_run` "compile" or "numpy" (see the module docstring); `log` receives the
    notices."""

    def __init__(self, detector, first_run: str, log: Callable[[str], None]):
        if first_run not in FIRST_RUNS:
            raise ValueError(f"first_run: 'compile' or 'numpy', not {first_run!r}")
        self.detector, self.first_run, self.log = detector, first_run, log
        self.warm = False
        self.numpy_forward = False          # the forward pass in numpy (a first run)
        self._background: list = []         # the background compile's helpers (a first run)

    def _blank(self) -> np.ndarray:
        net = self.detector.net
        return np.full((net.c, net.h, net.w), 0.5, np.float32)

    def warm_up(self):
        """Run the detector once on a blank image, every kernel it calls compiled or loaded; on
        a cold cache as the module docstring says. Once only."""
        if self.warm:
            return
        if self.first_run == "numpy" and self._numpy_first_run():
            self.warm = True
            return
        from ..vision.box import detect
        d = self.detector
        blank = self._blank()
        # on a cold cache a second process shares the compile, task by task (compile_ahead)
        claims = compile_ahead.Claims()
        helper = []
        try:
            with compile_notice(self.log, on_compile=lambda: helper.append(compile_ahead.start(
                    d.net, d.thresh, d.hier, d.nms, claims))):
                whole = compile_ahead.compile_forwards(d.net, blank, claims, d.thresh, d.hier,
                                                       d.nms, d.letterbox)
            if not whole:
                claims.wait_for_theirs(helper[0] if helper else None)
                detect(d.net, [blank], d.thresh, d.hier, d.nms, d.letterbox)
        finally:
            for h in helper:
                compile_ahead.stop(h)
            claims.remove()
        self.warm = True

    def _numpy_first_run(self) -> bool:
        """Start the numpy first run (see warm_up); False when it does not apply."""
        from ..vision.box import detect
        d = self.detector
        if numpy_forward.unsupported(d.net) is not None or not compile_ahead.has_cfg(
                d.net) or not compile_ahead.cold_forward(d.net):
            return False
        claims = compile_ahead.Claims()
        claims.take("boxes")                # compiled here, first: the background does the rest
        helpers = compile_ahead.start_background(d.net, d.thresh, d.hier, d.nms, claims)
        if not helpers:
            claims.remove()
        where = f" (pid {', '.join(str(h.pid) for h in helpers)})" if helpers else ""
        self.log(f"darknumba: first run on this CPU: numpy computes the forward pass while the "
                 f"kernels compile in the background{where} for the next runs; compiling the "
                 f"box decoding (seconds)")
        detect(d.net, [self._blank()], d.thresh, d.hier, d.nms, d.letterbox,
               forward=numpy_forward.forward)
        claims.finish("boxes")
        self.numpy_forward, self._background = True, helpers
        if helpers:
            # a second helper, from the other end, once this process no longer needs the
            # cores (started now, it would slow this first answer by half)
            atexit.register(self._second_helper, claims)
        return True

    def _second_helper(self, claims):
        d = self.detector
        if launcher.usable_cores() >= 2 and self._background \
                and self._background[0].poll() is None and os.path.isdir(claims.folder):
            self._background = compile_ahead.start_background(
                d.net, d.thresh, d.hier, d.nms, claims, "forwards", joining=self._background)

    def _compiled_ready(self) -> bool:
        """During a numpy first run: whether the background compile has finished, and the
        compiled path can take over (the next warm_up loads it from the cache)."""
        if self._background:
            if all(h.poll() is None for h in self._background):
                return False
        elif compile_ahead.background_running():
            return False
        return not compile_ahead.cold_forward(self.detector.net)

    def forward(self):
        """The forward pass for the next batch (vision.box.detect's `forward`): numpy's until
        the compiled kernels are ready, then None (the network's own)."""
        if self.numpy_forward and self._compiled_ready():
            self.numpy_forward, self.warm, self.first_run = False, False, "compile"
            self.warm_up()
        return numpy_forward.forward if self.numpy_forward else None
