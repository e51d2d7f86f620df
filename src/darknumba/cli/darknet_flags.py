"""Darknet's single-dash flags -dont_show, -ext_output, -map, -clear, -thresh, -out, as options
for the commands whose Darknet counterpart reads them, so a Darknet command line runs unchanged.

Who reads what (examples/detector.c, classifier.c and darknet.c of both Darknets):
  run_detector parses its flags once for every sub-command (test, train, valid, recall, map,
  calc_anchors): pjreddie's -thresh, -out, -clear; AlexeyAB's all six. run_classifier parses
  -clear (and AlexeyAB's -dont_show) for every sub-command. `detect` reads -thresh and -out
  (pjreddie) or -thresh and -ext_output (AlexeyAB).
A command with a use for a flag gives it its meaning (an alias of its own option); the others
accept it and ignore it, as Darknet does for a sub-command that does not use what it parsed,
and their --help says so.
"""
from __future__ import annotations

from typing import Annotated, Optional

import typer


def _ignored(flag: str, why: str, value=bool):
    return Annotated[Optional[value] if value is not bool else bool, typer.Option(
        flag, help=f"Darknet's {flag}: accepted and ignored ({why})", show_default=False)]


DontShow = Annotated[bool, typer.Option(
    "-dont_show", help="Darknet's -dont_show: accepted; no window is ever shown (files such as "
                       "chart.png and predictions.png are written as usual)")]
ExtOutput = Annotated[bool, typer.Option(
    "--ext-output", "-ext_output", help="print each box's left_x, top_y, width, height "
                                        "(AlexeyAB's -ext_output)")]
IgnoredExtOutput = _ignored("-ext_output", "this command prints no boxes")
IgnoredMap = _ignored("-map", "only `detector train` measures mAP as it goes")
IgnoredClear = _ignored("-clear", "only training counts the images seen")
IgnoredThresh = _ignored("-thresh", "this command has no threshold", float)
IgnoredOut = _ignored("-out", "this command writes no file named by it", str)
