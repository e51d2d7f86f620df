"""`darknumba rnn train|generate`: Darknet's character-level RNN (`./darknet rnn ...`)."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from .options import DialectOption

rnn_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                      help="Darknet's character-level RNN: train on a text file, generate text, "
                           "score a text.")

CfgArg = Annotated[Path, typer.Argument(help="Darknet .cfg file (inputs=256)")]


def _log(msg, file=None):
    typer.echo(msg, err=file is sys.stderr)


@rnn_app.command()
def train(cfg: CfgArg,
          text: Annotated[Optional[Path], typer.Argument(
              help="text file to learn (or -file TEXT, Darknet's way, with WEIGHTS here)")] = None,
          weights: Annotated[Optional[Path], typer.Argument(help="starting weights")] = None,
          file: Annotated[Optional[Path], typer.Option(
              "--file", "-file", help="the text file, as Darknet takes it: `rnn train CFG [WEIGHTS] -file TEXT`")] = None,
          clear: Annotated[bool, typer.Option("--clear", "-clear", help="reset `seen` to 0 (fine-tuning)")] = False,
          backup: Annotated[Path, typer.Option(help="checkpoint folder")] = Path("backup"),
          max_batches: Annotated[Optional[int], typer.Option(min=1, help="override [net] max_batches")] = None,
          seed: Annotated[int, typer.Option(min=0, help="random seed (initial weights, stream offsets)")] = 0,
          checkpoint_every: Annotated[Optional[int], typer.Option(min=1, help="<cfg>_<i>.weights every N iterations (default 10000; alexeyab: 1000)")] = None,
          backup_every: Annotated[Optional[int], typer.Option(min=1, help="<cfg>.backup every N iterations (default 100; alexeyab: 10)")] = None,
          log_every: Annotated[int, typer.Option(min=1, help="print a line every N iterations")] = 1,
          progress: Annotated[bool, typer.Option(help="progress bar with ETA (drawn only when stdout and stderr are terminals)")] = True,
          dialect: DialectOption = None):
    """Train on TEXT one byte at a time (Darknet's `rnn train`): prints `i: loss, avg avg, rate
    rate, seconds, epochs`; writes <cfg>_<i>.weights, <cfg>.backup and <cfg>_final.weights in
    the backup folder (Ctrl-C: <cfg>.backup, exit status 130)."""
    if file is not None:                    # Darknet's grammar: the argument after CFG is WEIGHTS
        if weights is not None:
            raise typer.BadParameter("with -file the text is given, so only CFG [WEIGHTS] "
                                     "may follow", param_hint="'-file'")
        text, weights = file, text
    elif text is None:
        raise typer.BadParameter("no text file to learn (give TEXT, or -file TEXT as Darknet)",
                                 param_hint="'TEXT'")
    from ..train.rnn import RnnTrainOptions, train_char_rnn
    opts = RnnTrainOptions(weights=str(weights) if weights else None, clear=clear,
                           seed=seed, backup=str(backup), max_batches=max_batches,
                           checkpoint_every=checkpoint_every, backup_every=backup_every,
                           log_every=log_every, progress=progress, dialect=dialect)
    result = train_char_rnn(str(cfg), str(text), opts, _log)
    if result["interrupted"]:
        raise typer.Exit(130)


def _positive(value: float) -> float:
    if not value > 0 or value == float("inf"):
        raise typer.BadParameter(f"takes a number above 0, not {value}")
    return value


@rnn_app.command()
def generate(cfg: CfgArg,
             weights: Annotated[Path, typer.Argument(help=".weights file")],
             seed: Annotated[str, typer.Option("--seed", "-seed", help="text fed in before sampling (printed first)")] = "\n\n",
             length: Annotated[int, typer.Option("--len", "-len", min=1, help="characters to sample")] = 1000,
             temp: Annotated[float, typer.Option("--temp", "-temp", callback=_positive, help="softmax temperature (lower: likelier characters)")] = 0.7,
             srand: Annotated[Optional[int], typer.Option("--srand", "-srand", min=0, help="random seed of the sampling (default: the time)")] = None,
             dialect: DialectOption = None):
    """Feed the seed, then sample LEN characters at temperature TEMP, each fed back in
    (Darknet's `rnn generate`); prints the seed and the sampled text."""
    from ..train.rnn import generate as generate_text, generation_network
    net = generation_network(cfg, weights, dialect)
    _log(os.path.splitext(cfg.name)[0], file=sys.stderr)
    data = os.fsencode(seed)
    out = bytearray()
    for c in generate_text(net, data, length, temp, int(time.time()) if srand is None else srand):
        out.append(c)
        if c == 10 or len(out) >= 256:
            typer.echo(bytes(out), nl=False)
            out.clear()
    typer.echo(bytes(out))


@rnn_app.command()
def valid(cfg: CfgArg,
          weights: Annotated[Path, typer.Argument(help=".weights file")],
          text: Annotated[Optional[Path], typer.Argument(help="text to score (default: standard input, as Darknet)")] = None,
          seed: Annotated[str, typer.Option("--seed", "-seed", help="text fed in before scoring")] = "\n\n",
          log_every: Annotated[int, typer.Option(min=1, help="print a line every N characters (and the last)")] = 1,
          dialect: DialectOption = None):
    """How well the network predicts TEXT (Darknet's `rnn valid`): after every character,
    `n BPC: bits per character   Perplexity: p    Word Perplexity: w` (alexeyab: without BPC)."""
    from ..errors import DataError
    from ..inputs import MAX_TEXT, read_bytes
    from ..train.rnn import generation_network, valid_char_rnn
    net = generation_network(cfg, weights, dialect)
    _log(os.path.splitext(cfg.name)[0], file=sys.stderr)
    if text is not None:
        data = read_bytes(text, "text file", DataError)
    else:                       # bounded as a file is (`< /dev/zero` would never end)
        data = sys.stdin.buffer.read(MAX_TEXT + 1)
        if len(data) > MAX_TEXT:
            raise DataError(f"the standard input holds more than {MAX_TEXT:,} bytes of text")
    line = None
    for count, bpc, ppl, wppl in valid_char_rnn(net, os.fsencode(seed), data):
        line = (f"{count} " + ("" if net.quirks.char_rnn_alexeyab else f"BPC: {bpc:4.4f}   ")
                + f"Perplexity: {ppl:4.4f}    Word Perplexity: {wppl:4.4f}")
        if count % log_every == 0:
            typer.echo(line)
            line = None
    if line is not None:
        typer.echo(line)


def register(app: typer.Typer):
    app.add_typer(rnn_app, name="rnn")
