"""`detector train --ranks N --restarts K`: the command starts the training under mpirun and
restarts it from its last checkpoint when a rank is lost (train/supervise.py). Here: the options
and the command line of each attempt, rebuilt from what the user typed."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

RanksOption = Annotated[Optional[int], typer.Option(
    min=1, help="start the training on N ranks itself (mpirun -np N); with --restarts, "
                "restart it when a rank is lost", show_default=False)]
RestartsOption = Annotated[int, typer.Option(
    min=0, help="restart the job from its last checkpoint up to K times when a rank dies or "
                "stops answering (logged on stderr); the command then runs mpirun itself: "
                "give --ranks, do not start it under mpirun")]
ShrinkOption = Annotated[bool, typer.Option(
    "--shrink", help="--restarts: restart on the largest smaller number of ranks the cfg "
                     "allows (default: the same number)")]
HostfileOption = Annotated[Optional[Path], typer.Option(
    exists=True, dir_okay=False, help="--ranks: MPICH's host file (mpirun -f)",
    show_default=False)]

SUPERVISOR = ("ranks", "restarts", "shrink", "hostfile")


def typed_options(ctx: typer.Context) -> list[str]:
    """The options of ctx's command that were given on the command line (or by environment),
    as arguments again, the supervisor's own left out. Positional arguments are not included."""
    args = []
    for p in ctx.command.params:
        if p.name in SUPERVISOR or p.param_type_name != "option":
            continue
        source = ctx.get_parameter_source(p.name)
        if source is None or source.name not in ("COMMANDLINE", "ENVIRONMENT"):
            continue
        value = ctx.params[p.name]
        if p.is_flag:
            if value:
                args.append(p.opts[0])
            elif p.secondary_opts:
                args.append(p.secondary_opts[0])
        elif value is not None:
            for v in (value if p.multiple else [value]):
                args += [p.opts[0], str(v)]
    return args


def supervise_training(ctx: typer.Context, command: list[str], positional: list[str],
                       weights: Path | None, data: Path, cfg: Path, backup: Path | None,
                       ranks: int | None, restarts: int, shrink: bool, hostfile: Path | None,
                       sync_bn: bool, log) -> int:
    """Run `darknumba COMMAND POSITIONAL [WEIGHTS] OPTIONS` on `ranks` ranks under the
    supervisor; its exit status."""
    import os

    from ..data.datasets import read_data_cfg
    from ..errors import UsageError
    from ..parser import parse_network_cfg
    from ..runtime.launcher import launched_ranks
    from ..train.detector import backup_folder
    from ..train.supervise import Supervisor, fewer_ranks, rank_command
    if launched_ranks() > 1:
        raise UsageError("--ranks/--restarts start mpirun themselves: run the command once, "
                         "without mpirun")
    ranks = ranks or 1
    options = typed_options(ctx)
    folder = backup_folder(read_data_cfg(data), str(backup) if backup else None)
    base = os.path.splitext(os.path.basename(cfg))[0]
    shrink_to = None
    if shrink:
        shape = parse_network_cfg(str(cfg), seed=None, allocate=False)
        shrink_to = lambda n: fewer_ranks(n, shape.subdivisions, shape.batch, sync_bn)  # noqa: E731

    def attempt(start, n):
        args = command + positional + ([str(start)] if start else []) + options
        return rank_command(args, n, str(hostfile) if hostfile else None)

    return Supervisor(attempt, folder, base, ranks, restarts, str(weights) if weights else None,
                      shrink_to, log).run()
