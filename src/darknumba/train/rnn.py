"""Darknet's character-level RNN example (`examples/rnn.c`): train a network on a text file one
byte at a time (`train_char_rnn`), generate text from it (`test_char_rnn`) and score a text
with it (`valid_char_rnn`).

The network reads one byte a step as a 256-way one-hot vector (`inputs=256` in [net]) and
predicts the next byte: its output layer has 256 outputs (a [softmax], usually followed by a
[cost] layer). A training datum holds `streams` = batch / subdivisions sequences of
`time_steps` bytes each, laid out step-major as the recurrent layers read them:

    x[step][stream][byte]   (net.batch = streams x time_steps rows of 256 values)

Every stream reads the text from its own offset, which moves on by time_steps bytes a datum
(wrapping at the end of the text); after every datum each stream jumps to a random offset with
probability 1/64 (AlexeyAB's: 1/10) and its carried state is reset (reset_network_state).
"""
from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from ..errors import CfgError, DarknumbaError, DataError
from ..inputs import MAX_TEXT, read_bytes
from ..parser import load_network
from .checkpoint import check_backups_not_inputs, remove_stale_temps, save_checkpoint
from .detector import StopFlag, training_network
from .history import Progress
from .lock import holds_backup_lock, lock_backup

CHARACTERS = 256        # one input (and one output) per byte value
MIN_PROB = 0.0001       # generation ignores outputs below this, as Darknet does


@dataclass
class RnnTrainOptions:
    weights: str | None = None      # starting weights
    clear: bool = False             # seen = 0 (fine-tuning)
    seed: int = 0                   # initial weights, stream offsets and resets
    backup: str = "backup"          # checkpoint folder
    max_batches: int | None = None  # override [net] max_batches
    checkpoint_every: int | None = None  # <cfg>_<i>.weights every N data (None: the dialect's)
    backup_every: int | None = None      # <cfg>.backup every N data (None: the dialect's)
    log_every: int = 1              # print a line every N data
    progress: bool = True           # a progress bar with ETA (on a terminal; history.Progress)
    dialect: str | None = None      # None: chosen from the cfg and weights
    partial: bool = False           # training_network's options that this workflow keeps fixed
    compat: str | None = None
    exact: bool | None = None


def read_text(path) -> np.ndarray:
    """The bytes of a text file. pjreddie's Darknet reads it as a C string (the text ends at
    the first NUL byte), AlexeyAB's stops at a NUL with "Bad char": a NUL or an empty file is
    refused here, naming the file (as is a file that is not a regular one: inputs.py)."""
    data = read_bytes(path, "text file", DataError, MAX_TEXT)
    if not data:
        raise DataError(f"{os.fspath(path)}: the text file is empty (nothing to learn from)")
    text = np.frombuffer(data, dtype=np.uint8)
    nul = np.flatnonzero(text == 0)
    if nul.size:
        raise DataError(f"{os.fspath(path)}: byte {nul[0]} is NUL (0): a text file to train on "
                        f"holds no NUL bytes")
    return text


def get_rnn_data(text: np.ndarray, offsets: np.ndarray, characters: int, streams: int,
                 steps: int) -> tuple[np.ndarray, np.ndarray]:
    """get_rnn_data: one-hot inputs x (the byte at each stream's offset, then the next ...) and
    truths y (the byte after each), both steps x streams x characters flattened; every offset
    moves on by `steps`, wrapping at the end of the text (offsets is changed in place)."""
    size = text.size
    pos = (offsets[None, :] + np.arange(steps)[:, None]) % size        # steps x streams
    step, stream = np.indices((steps, streams))
    x = np.zeros((steps, streams, characters), dtype=np.float32)
    y = np.zeros((steps, streams, characters), dtype=np.float32)
    x[step, stream, text[pos]] = 1.0
    y[step, stream, text[(pos + 1) % size]] = 1.0
    offsets[:] = (offsets + steps) % size
    return x.reshape(-1), y.reshape(-1)


def check_char_network(net, cfgfile):
    """A network for bytes: 256 inputs and 256 outputs a step."""
    if net.inputs != CHARACTERS:
        raise CfgError(f"{os.fspath(cfgfile)}: [net] inputs={net.inputs}; a character network "
                       f"reads each byte as {CHARACTERS} one-hot values: set inputs={CHARACTERS}")
    if net.outputs != CHARACTERS:
        raise CfgError(f"{os.fspath(cfgfile)}: the network outputs {net.outputs} values a step; "
                       f"predicting the next byte takes {CHARACTERS} (the layer before "
                       f"[softmax] needs output={CHARACTERS})")


@holds_backup_lock
def train_char_rnn(cfgfile, textfile, opts: RnnTrainOptions | None = None, log=print):
    """train_char_rnn: Darknet's loop and printout (`i: loss, avg avg, rate rate, seconds,
    epochs`; loss is the network's cost over batch = streams x time_steps), checkpoints
    <cfg>_<i>.weights every checkpoint_every data, <cfg>.backup every backup_every (the
    dialect's: 10000 and 100, AlexeyAB's 1000 and 10) and <cfg>_final.weights at the end
    (Ctrl-C: <cfg>.backup, then stop). Returns what happened."""
    opts = opts or RnnTrainOptions()
    text = read_text(textfile)
    lock_backup(opts.backup, log)      # one training per folder (lock.py)
    size = text.size
    base = os.path.splitext(os.path.basename(os.fspath(cfgfile)))[0]
    net = training_network(os.fspath(cfgfile), opts, log)
    check_char_network(net, cfgfile)
    log(base, file=sys.stderr)
    if not any(l.cost is not None for l in net.layers):
        raise CfgError(f"{os.fspath(cfgfile)}: no loss layer ([softmax] or [cost]) to train")
    steps = net.time_steps
    streams = net.batch // steps
    rules = net.quirks.defaults
    checkpoint_every = opts.checkpoint_every or rules.rnn_checkpoint_every
    backup_every = opts.backup_every or rules.rnn_backup_every
    if net.quirks.char_rnn_alexeyab:
        log(f"Learning Rate: {net.learning_rate:g}, Momentum: {net.momentum:g}, Decay: "
            f"{net.decay:g}", file=sys.stderr)
        log(f"\n batch = {net.batch}, steps = {steps}, streams = {streams}, subdivisions = "
            f"{net.subdivisions}, text_size = {size} \n global_batch = "
            f"{net.batch * net.subdivisions} ")
    else:
        log(f"Learning Rate: {net.learning_rate:g}, Momentum: {net.momentum:g}, Decay: "
            f"{net.decay:g}, Inputs: {net.inputs} {net.batch} {steps}", file=sys.stderr)
    os.makedirs(opts.backup, exist_ok=True)
    remove_stale_temps(opts.backup, log=lambda m: log(m, file=sys.stderr))
    check_backups_not_inputs(opts.backup, base, {"the cfg": cfgfile, "the text": textfile})
    written = []

    def save(name):
        path = os.path.join(opts.backup, name)
        save_checkpoint(net, path, written[-1] if written else None)
        written.append(path)
        log(f"Saving weights to {path}", file=sys.stderr)

    rng = np.random.default_rng(opts.seed)
    offsets = rng.integers(0, size, streams)
    i = net.seen // net.batch
    avg_loss, loss, interrupted = -1.0, math.nan, False
    bar = Progress(net.max_batches, net.current_batch(), opts.progress, log)
    try:
        with StopFlag() as stop:
            while net.current_batch() < net.max_batches:
                i += 1
                t0 = time.time()
                x, y = get_rnn_data(text, offsets, CHARACTERS, streams, steps)
                loss = net.train_datum(x, y) / net.batch
                avg_loss = loss if avg_loss < 0 else avg_loss * 0.9 + loss * 0.1
                chars = net.current_batch() * net.batch
                line = (f"{i}: {loss:f}, {avg_loss:f} avg, {net.current_rate():f} rate, "
                        f"{time.time() - t0:f} seconds, {chars / size:f} epochs")
                bar.step([line] if i % opts.log_every == 0 else [], loss, avg_loss)
                for j in np.flatnonzero(rng.integers(0, rules.rnn_reset_odds, streams) == 0):
                    offsets[j] = rng.integers(0, size)
                    net.reset_state(int(j))
                if i % checkpoint_every == 0:
                    save(f"{base}_{i}.weights")
                if i % backup_every == 0:
                    save(f"{base}.backup")
                if stop.set:
                    interrupted = True
                    break
    finally:
        bar.close()
    save(f"{base}.backup" if interrupted else f"{base}_final.weights")
    return {"iterations": i, "loss": loss, "avg_loss": avg_loss, "written": written,
            "interrupted": interrupted, "net": net}


def generation_network(cfgfile, weightsfile, dialect: str | None = None):
    """The network one byte at a time: batch 1, time_steps 1, whatever the cfg trains with
    (AlexeyAB's parse_network_cfg_custom(cfg, 1, 1); pjreddie's takes the cfg as it is, so
    its users keep a second cfg with batch=1 and time_steps=1)."""
    net = load_network(os.fspath(cfgfile), os.fspath(weightsfile), batch=1, time_steps=1,
                       dialect=dialect)
    check_char_network(net, cfgfile)
    return net


def sample_array(p: np.ndarray, r: float) -> int:
    """sample_array: p scaled to sum 1; the first index whose running sum reaches r (uniform
    in [0, 1)); the last index if rounding leaves none."""
    total = float(np.sum(p, dtype=np.float64))
    if not math.isfinite(total) or total <= 0:
        raise DarknumbaError("the network's output is not a distribution (NaN, Inf or all "
                             "zero): are the weights from a diverged run?")
    running = np.cumsum(p / np.float32(total), dtype=np.float32)
    return min(int(np.searchsorted(running, r)), p.size - 1)


def generate(net, seed: bytes, length: int, temp: float, srand: int):
    """test_char_rnn: every layer's temperature set to `temp`; the seed's bytes fed in turn,
    then `length` bytes sampled, each fed back. Yields the seed's bytes, then the sampled
    ones."""
    if not seed:
        raise DarknumbaError("the seed is empty: give at least one character to start from")
    for l in net.layers:
        if l.temperature is not None:
            l.temperature = temp
    rng = np.random.default_rng(srand)
    x = np.zeros(CHARACTERS, dtype=np.float32)
    for c in seed[:-1]:
        x[c] = 1.0
        net.forward(x)
        x[c] = 0.0
        yield c
    c = seed[-1]
    yield c
    for _ in range(length):
        x[c] = 1.0
        out = net.forward(x).copy()
        x[c] = 0.0
        out[out < MIN_PROB] = 0.0
        c = sample_array(out, rng.random())
        yield c


def valid_char_rnn(net, seed: bytes, text: bytes):
    """valid_char_rnn: the seed fed in, then every byte of `text` but the last, each scored by
    the probability the network gave it. Yields (count, bits per character, perplexity, word
    perplexity) after every scored byte; words are 1 + the spaces, tabs and newlines scored.
    (Darknet refuses byte 255, an off-by-one: it is a byte like the others here.)"""
    x = np.zeros(CHARACTERS, dtype=np.float32)
    for c in seed:
        x[c] = 1.0
        net.forward(x)
        x[c] = 0.0
    bits, words = 0.0, 1
    for count, (c, nxt) in enumerate(zip(text[:-1], text[1:]), start=1):
        if nxt in b" \n\t":
            words += 1
        x[c] = 1.0
        p = float(net.forward(x)[nxt])
        x[c] = 0.0
        bits += math.log2(p) if p > 0 else -math.inf
        yield count, -bits / count, _exp2(-bits / count), _exp2(-bits / words)


def _exp2(x: float) -> float:
    """2 ** x, inf past float64's range (a long run of text without a space, badly predicted,
    makes the word perplexity's exponent large) instead of Python's OverflowError."""
    return 2.0 ** x if x < 1024 else math.inf
