"""What a training run leaves beside its checkpoints and shows while it runs, for detector and
classifier training alike:

  <cfg>_history.csv  one row per iteration: iteration, loss, avg_loss, rate, images, map (empty
                     when not measured), seconds (wall-clock seconds of training up to that
                     iteration, summed over resumed runs). Rows are buffered and written
                     when a checkpoint is written (and at the end), so the file never runs
                     ahead of the checkpoints by more than a crash loses anyway. A run that
                     resumes at iteration k keeps the rows up to k and drops the later ones
                     (a run killed after its last checkpoint wrote them); a fresh run (k = 0)
                     starts the file anew.
  chart.png          loss, average loss and mAP (AlexeyAB's chart) of the whole history.
  the progress bar   Darknet's per-iteration lines on stdout above a tqdm bar with ETA (on a
                     terminal; to a file or pipe: the lines alone, repeated ones once).
"""
from __future__ import annotations

import io
import math
import os
import sys
import time

from ..errors import DataError
from ..inputs import MAX_TEXT, read_bytes
from ..outputs import atomic_write

COLUMNS = ("iteration", "loss", "avg_loss", "rate", "images", "map", "seconds")
HEADER = ",".join(COLUMNS) + "\n"


def parse_row(line: str) -> list | None:
    """A CSV line as [iteration, loss, avg_loss, rate, images, map or None, seconds]; None for
    the header or a line a crash cut short."""
    parts = line.rstrip("\n").split(",")
    if len(parts) != len(COLUMNS):
        return None
    try:
        return [int(parts[0]), float(parts[1]), float(parts[2]), float(parts[3]), int(parts[4]),
                float(parts[5]) if parts[5] else None, float(parts[6])]
    except ValueError:
        return None


def format_row(row) -> str:
    i, loss, avg, rate, images, mean_ap, seconds = row
    return (f"{i},{loss:.6g},{avg:.6g},{rate:.6g},{images},"
            f"{'' if mean_ap is None else f'{mean_ap:.6f}'},{seconds:.3f}\n")


def read_history(path) -> tuple[list[list], bool]:
    """(rows, clean) of a history file: the rows that parse, and whether every line but the
    header did (and the file ends with a newline)."""
    # checked like every user file: a history.csv that is a FIFO, a device or a huge file (one
    # row is ~60 bytes: 1 GiB is millions of iterations) is refused by name
    text = read_bytes(path, "training history (CSV)", DataError, MAX_TEXT).decode(
        "utf-8", errors="replace")
    lines = text.splitlines(keepends=True)
    rows = [r for r in map(parse_row, lines) if r is not None]
    clean = (not text or text.endswith("\n")) and len(rows) == len(lines) - (
        1 if lines and lines[0] == HEADER else 0)
    return rows, clean


class TrainingHistory:
    """The history CSV and chart.png of one run (see the module docstring). `enabled=False`
    (a data-parallel rank other than 0) makes every method a no-op."""

    def __init__(self, folder, base: str, start: int, max_batches: int, chart: bool = True,
                 enabled: bool = True, log=print):
        self.path = os.path.join(folder, f"{base}_history.csv")
        self.enabled = enabled
        self.rows: list[list] = []
        self.pending: list[list] = []
        self.chart = LossChart(os.path.join(folder, "chart.png"), max_batches) \
            if chart and enabled else None
        if self.chart is not None and self.chart.plt is None:
            log("chart.png: matplotlib is not installed (pip install darknumba[chart]); no chart",
                file=sys.stderr)
        if enabled:
            self._resume(start, log)
        self.offset = self.rows[-1][6] if self.rows else 0.0
        self.t0 = time.time()

    def _resume(self, start: int, log):
        """Keep the rows up to iteration `start`; rewrite the file when anything is dropped."""
        if not os.path.exists(self.path):
            return
        rows, clean = read_history(self.path)
        self.rows = [r for r in rows if r[0] <= start]
        dropped = len(rows) - len(self.rows)
        if dropped or not clean:
            atomic_write(self.path, (HEADER + "".join(map(format_row, self.rows))).encode())
        if self.rows:
            log(f"{self.path}: continuing the history after iteration {self.rows[-1][0]}"
                + (f" ({dropped} later rows of an unsaved run dropped)" if dropped else ""),
                file=sys.stderr)

    def add(self, i: int, loss: float, avg_loss: float, rate: float, images: int):
        if not self.enabled:
            return
        row = [i, loss, avg_loss, rate, images, None, self.offset + time.time() - self.t0]
        self.rows.append(row)
        self.pending.append(row)

    def set_map(self, i: int, mean_ap: float):
        """The mAP measured at iteration i (its row is still buffered: rows are written at
        checkpoints, after the measurement)."""
        for row in reversed(self.pending):
            if row[0] == i:
                row[5] = mean_ap
                return

    def flush(self):
        """Write the file anew with every row (through a temporary file and a rename: a crash
        or a full disk leaves the previous file whole)."""
        if not self.enabled or not self.pending:
            return
        atomic_write(self.path, (HEADER + "".join(map(format_row, self.rows))).encode())
        self.pending.clear()

    def draw(self):
        if self.chart is not None:
            self.chart.save(self.rows)


class LossChart:
    """chart.png like AlexeyAB's: loss and average loss per iteration, mAP when measured."""

    def __init__(self, path, max_batches):
        self.path, self.max_batches = path, max_batches
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            self.plt = plt
        except ImportError:
            self.plt = None

    def save(self, rows):
        if self.plt is None or not rows:
            return
        plt = self.plt
        iters = [r[0] for r in rows]
        avg = [r[2] for r in rows]
        fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
        ax.plot(iters, [r[1] for r in rows], color="0.75", lw=0.8, label="loss")
        ax.plot(iters, avg, color="tab:blue", lw=1.5, label="avg loss")
        ax.set_xlim(0, max(self.max_batches, iters[-1]))
        tail = [v for v in (avg[len(avg) // 10:] if len(avg) > 20 else avg) if math.isfinite(v)]
        top = 1.5 * max(tail, default=1.0)  # the first iterations' huge losses flatten the rest
        ax.set_ylim(0, max(top, 1e-3))
        ax.set_xlabel("iteration")
        ax.set_ylabel("loss")
        ax.grid(alpha=0.3)
        maps = [(r[0], r[5]) for r in rows if r[5] is not None]
        if maps:
            ax2 = ax.twinx()
            x, y = zip(*maps)
            ax2.plot(x, [100 * v for v in y], "o-", color="tab:red", label="mAP@0.5 %")
            ax2.set_ylim(0, 100)
            ax2.set_ylabel("mAP@0.5 %")
            ax2.legend(loc="lower right")
        ax.legend(loc="upper left")
        ax.set_title(f"iteration {iters[-1]}: avg loss {avg[-1]:.4f}")
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        plt.close(fig)
        atomic_write(self.path, buf.getvalue())


def is_terminal(stream) -> bool:
    """Whether `stream` is an interactive terminal (False for files, pipes, captured output)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):        # no isatty, or closed
        return False


class Progress:
    """Darknet's lines on stdout above a tqdm bar (stderr) with the ETA to max_batches.

    The bar is drawn only when it is `enabled` and stdout and stderr are both terminals; with
    it off the lines go through `log`. When stdout is not a terminal (a file, a pipe, a log
    collector) a line that the step before also had (AlexeyAB's "(next mAP calculation at N
    iterations)" and "Last accuracy mAP@0.50 = ..." before every iteration's line) is printed
    only when it changes."""

    def __init__(self, total: int, initial: int, enabled: bool, log=print):
        self.log = log
        self.bar = None
        self.quiet_repeats = not is_terminal(sys.stdout)
        self.previous: set[str] = set()
        if enabled and is_terminal(sys.stdout) and is_terminal(sys.stderr):
            from tqdm import tqdm
            self.bar = tqdm(total=total, initial=initial, unit="it", dynamic_ncols=True,
                            file=sys.stderr, leave=False)

    def step(self, lines: list[str], loss: float, avg_loss: float):
        """One iteration done: print its lines, move the bar."""
        shown = lines
        if self.quiet_repeats:
            shown = [t for t in lines if t not in self.previous]
            self.previous = set(lines)
        if self.bar is None:
            for text in shown:
                self.log(text)
            return
        for text in shown:
            self.bar.write(text, file=sys.stdout)
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{loss:.3f}", avg=f"{avg_loss:.3f}")

    def close(self):
        if self.bar is not None:
            self.bar.close()
