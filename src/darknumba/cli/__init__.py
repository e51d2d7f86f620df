"""The `darknumba` command. Every module in this package that defines ``register(app)`` adds
its commands; errors a user can act on (DarknumbaError) print as one line, exit status 1."""
from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from ..errors import DarknumbaError

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Darknet's networks on the CPU: detect, train, compare.")


def _register_all():
    for mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        module = importlib.import_module(f"{__name__}.{mod}")
        if hasattr(module, "register"):
            module.register(app)


_register_all()


def main():
    try:
        app()
    except DarknumbaError as e:
        print(f"darknumba: error: {e}", file=sys.stderr)
        sys.exit(1)
