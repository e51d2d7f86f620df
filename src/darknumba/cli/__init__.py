"""The `darknumba` command. Every module in this package that defines ``register(app)`` adds
its commands.

One contract for every command, kept here in `run` and nowhere else:
  0  success
  1  bad input: a DarknumbaError (cfg, weights, data, image ...) or an operating-system error on
     a user's file (missing, unreadable, disk full), printed as one line naming what and where;
     a standard output that is closed (`| head -c0`: quietly) or fails (a full disk)
  2  usage: an unknown option, a missing argument, a value of the wrong type or a count of zero
     (typer's message), an output that is one of the inputs (errors.UsageError, one line), a
     command that is not data-parallel started by mpirun with more than one rank
  3  internal error: a bug in darknumba; one line says so and how to report it
  75  data-parallel training: a rank stopped answering (--mpi-timeout) and the job was ended
      (`--restarts` restarts the job on it, as on a rank that died: train/supervise.py)
  130 interrupted (Ctrl-C; training saves a checkpoint first)
`--debug` (or DARKNUMBA_DEBUG=1) prints the traceback as well.
"""
from __future__ import annotations

import copy
import errno
import gc
import importlib
import os
import pkgutil
import sys
import traceback
from typing import Annotated

from ..runtime import collector_paused, configure

# This module is the `darknumba` command: the process is set up before numpy and numba load
# (the commands below import them), since they read the thread policy when they start
# (runtime/__init__.py). main() adds the command's own steps.
with collector_paused():
    configure()

import typer  # noqa: E402

try:                                    # typer >= 0.20 carries its own copy of click
    from typer._click.exceptions import ClickException
except ImportError:
    from click.exceptions import ClickException

from ..errors import DarknumbaError, UsageError  # noqa: E402
from ..runtime.launcher import DATA_PARALLEL_COMMANDS, launched_ranks  # noqa: E402
from .common import (EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE,  # noqa: E402
                     one_line)


app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  pretty_exceptions_enable=False,
                  help="Darknet's networks on the CPU: detect, train, compare.")

_state = {"debug": False}


@app.callback()
def _options(debug: Annotated[bool, typer.Option(
        "--debug", help="print the traceback of an error (also DARKNUMBA_DEBUG=1)")] = False):
    _state["debug"] = _state["debug"] or debug


def _register_all():
    with collector_paused():            # the commands' modules: numba's objects among them
        # the engine too (parser: network, layers, kernels), which the commands load lazily
        # but every network command runs: loaded here, main() freezes its objects with the
        # rest instead of the run's collections walking them (~0.2 s of a warm `detect`)
        from .. import parser  # noqa: F401
        for mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
            module = importlib.import_module(f"{__name__}.{mod}")
            if hasattr(module, "register"):
                module.register(app)


_register_all()


def _command_name(info) -> str | None:
    if info.name:
        return info.name
    cb = info.callback
    return cb.__name__.lower().replace("_", "-") if cb is not None else None


def _narrowed(typer_app: typer.Typer, args: list[str]) -> typer.Typer:
    """`typer_app` holding only the command (or group, narrowed in turn) that `args` name.
    Typer builds every command's options before parsing (~0.1 s for ours, per run); a run uses
    one. Anything else (no name, a typo, `--help`) gets the whole app and typer's messages."""
    words = [a for a in args if a != "--debug"]
    if not words or words[0].startswith("-"):
        return typer_app
    name, rest = words[0], words[1:]
    commands = [c for c in typer_app.registered_commands if _command_name(c) == name]
    groups = [g for g in typer_app.registered_groups if g.name == name]
    if len(commands) + len(groups) != 1:
        return typer_app
    narrow = copy.copy(typer_app)
    narrow.registered_commands = commands
    narrow.registered_groups = []
    for g in groups:
        g = copy.copy(g)
        g.typer_instance = _narrowed(g.typer_instance, rest)
        narrow.registered_groups = [g]
    return narrow


def _command_path(typer_app: typer.Typer, args: list[str]) -> tuple[list[str], bool]:
    """The command and subcommand names `args` start with, and whether they name a command
    (not only a group)."""
    path = []
    for name in (a for a in args if a != "--debug"):
        if name.startswith("-"):
            break
        groups = [g for g in typer_app.registered_groups if g.name == name]
        if groups:
            path.append(name)
            typer_app = groups[0].typer_instance
            continue
        found = any(_command_name(c) == name for c in typer_app.registered_commands)
        return path + [name] * found, found
    return path, False


def _not_data_parallel(args: list[str]) -> str | None:
    """Why the command `args` name may not run here: under a launcher with more than one rank
    only the data-parallel commands run (launcher.DATA_PARALLEL_COMMANDS); the others would
    run once per rank side by side, writing the same files."""
    ranks = launched_ranks()
    if ranks <= 1 or "--help" in args:
        return None
    path, command = _command_path(app, args)
    name = " ".join(path)
    if not command or name in DATA_PARALLEL_COMMANDS:
        return None
    return (f"`darknumba {name}` is not data-parallel: started by mpirun with {ranks} ranks it "
            f"would run {ranks} times side by side; run it as one process (without mpirun). "
            f"Data-parallel: {', '.join(DATA_PARALLEL_COMMANDS)}")


def _os_error_message(e: OSError) -> str:
    """`path: reason` for an error the operating system raised on a file."""
    reason = e.strerror or str(e) or type(e).__name__
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        reason += " (free some space and run again)"
    elif e.errno == errno.EFBIG:
        reason += " (the file-size limit, `ulimit -f`, is too small)"
    names = [os.fsdecode(n) for n in (e.filename, e.filename2) if n is not None]
    return ": ".join(names + [reason])


def _where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    if not tb:
        return ""
    f = tb[-1]
    return f" at {os.path.basename(f.filename)}:{f.lineno}"


def _error(code: int, message: str, e: BaseException) -> int:
    if _state["debug"]:
        traceback.print_exception(e, file=sys.stderr)
    print(f"darknumba: {message}", file=sys.stderr)
    return code


def run(args: list[str] | None = None) -> int:
    """Run the command line `args` (default: sys.argv[1:]); returns the exit status."""
    _state["debug"] = os.environ.get("DARKNUMBA_DEBUG", "") not in ("", "0")
    try:
        argv = sys.argv[1:] if args is None else list(args)
        refused = _not_data_parallel(argv)
        if refused:
            print(f"darknumba: error: {refused}", file=sys.stderr)
            return EXIT_USAGE
        code = _narrowed(app, argv)(args=argv, prog_name="darknumba", standalone_mode=False)
        return code if isinstance(code, int) else EXIT_OK
    except ClickException as e:                # usage errors: exit_code 2
        e.show()
        return e.exit_code
    except typer.Abort:                        # Ctrl-C at a prompt, EOF
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print("darknumba: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except DarknumbaError as e:
        code = EXIT_USAGE if isinstance(e, UsageError) else EXIT_BAD_INPUT
        return _error(code, f"error: {one_line(e)}", e)
    except OSError as e:
        if e.errno == errno.EPIPE:             # `darknumba ... | head`: stop quietly
            _silence_broken_pipe()
            return EXIT_BAD_INPUT
        return _error(EXIT_BAD_INPUT, f"error: {one_line(_os_error_message(e))}", e)
    except MemoryError as e:
        return _error(EXIT_BAD_INPUT, "error: out of memory"
                      + (f" ({one_line(e)})" if str(e) else "")
                      + ": try a smaller batch, input size or network", e)
    except Exception as e:                     # noqa: BLE001 - the contract's exit 3
        return _error(EXIT_INTERNAL,
                      f"internal error (a bug in darknumba): {type(e).__name__}: "
                      f"{one_line(e)}{_where(e)}. Please rerun with --debug and open an issue "
                      f"with the command and the traceback", e)


def _silence_broken_pipe():
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _flush_stdout(code: int) -> int:
    """Write what the standard output still buffers before exit: a closed pipe (`| head -c0`)
    or a full disk there ends with status 1 (the pipe quietly), not with Python's `Exception
    ignored ... BrokenPipeError` and status 120 at shutdown."""
    try:
        sys.stdout.flush()
        return code
    except OSError as e:
        if e.errno != errno.EPIPE:
            print(f"darknumba: error: cannot write the standard output: "
                  f"{one_line(e.strerror or e)}", file=sys.stderr)
        _silence_broken_pipe()      # the shutdown's flush then writes to /dev/null
        return code or EXIT_BAD_INPUT


def main():
    # the command's steps of runtime.configure: its kernels load 0.2-0.35 s sooner (cache_loads),
    # what the imports made is frozen (later collections need not walk it)
    configure(command=True)
    code = _flush_stdout(run())
    # The objects of numba, llvmlite and typer stay until exit; frozen, the interpreter's last
    # collections skip them (~0.4 s of a warm `detect`). Nothing is lost: no objects we
    # create need a collector to be finalised (files are closed by `with`).
    gc.freeze()
    sys.exit(code)
