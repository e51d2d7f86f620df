"""Read Darknet .cfg files into sections with line numbers, and typed option getters.

Darknet's format (``read_cfg`` / ``read_option`` in C): ``[section]`` headers, ``key=value``
lines, ``#`` and ``;`` comment lines, blank lines; spaces anywhere are ignored. The getters
mirror ``option_find_int`` / ``option_find_float`` / ``option_find_str`` and remember which keys
were read so that ``unused()`` can report the rest, as Darknet's ``Unused field`` does.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from .errors import CfgError

_MISSING = object()
C_INT_MAX = 2 ** 31 - 1


@dataclass
class Section:
    type: str                 # without brackets, lower case: "convolutional"
    line: int                 # line of the [header]
    path: str
    options: dict = field(default_factory=dict)    # key -> value string
    lines: dict = field(default_factory=dict)      # key -> line number
    used: set = field(default_factory=set)

    def where(self, key: str | None = None) -> str:
        line = self.lines.get(key, self.line) if key else self.line
        return f"{self.path}:{line}: [{self.type}]" + (f" {key}" if key else "")

    def error(self, key: str | None, msg: str) -> CfgError:
        return CfgError(f"{self.where(key)}: {msg}")

    def has(self, key: str) -> bool:
        return key in self.options

    def find_str(self, key: str, default=_MISSING):
        self.used.add(key)
        if key in self.options:
            return self.options[key]
        if default is _MISSING:
            raise self.error(key, "is required but missing")
        return default

    def find_int(self, key: str, default=_MISSING, at_least: int | None = None) -> int:
        """An integer option (a C int, as atoi reads it); `at_least` bounds it."""
        v = self.find_str(key, default)
        if v is default:
            return default
        try:
            n = int(v)
        except ValueError:
            try:                      # Darknet's atoi("1.0") reads 1; accept integral floats
                f = float(v)
            except ValueError:
                f = math.nan
            if not (f == int(f) if math.isfinite(f) else False):
                raise self.error(key, f"expected an integer, found {v!r}") from None
            n = int(f)
        if not -C_INT_MAX - 1 <= n <= C_INT_MAX:
            raise self.error(key, f"{n} does not fit a C int (Darknet reads it with atoi)")
        if at_least is not None and n < at_least:
            raise self.error(key, f"expected at least {at_least}, found {n}")
        return n

    def find_float(self, key: str, default=_MISSING, at_least: float | None = None,
                   above: float | None = None, below: float | None = None) -> float:
        """A finite number (NaN and Inf, which atof would read, are refused); `at_least`,
        `above` and `below` bound it."""
        v = self.find_str(key, default)
        if v is default:
            return default
        try:
            f = float(v)
        except ValueError:
            raise self.error(key, f"expected a number, found {v!r}") from None
        if not math.isfinite(f):
            raise self.error(key, f"expected a finite number, found {v!r}")
        if (at_least is not None and f < at_least) or (above is not None and f <= above) or \
                (below is not None and f >= below):
            lo = f"{at_least:g} <= " if at_least is not None else \
                f"{above:g} < " if above is not None else ""
            hi = f" < {below:g}" if below is not None else ""
            raise self.error(key, f"expected {lo}{key}{hi}, found {f:g}")
        return f

    def find_list(self, key: str, conv=int, default=_MISSING, above: float | None = None) -> list:
        """A comma-separated list such as ``layers=-1, 8`` or ``anchors = 10,14,  23,27``
        (numbers finite, integers C ints; every value > `above` when it is given)."""
        v = self.find_str(key, default)
        if v is default:
            return default
        parts = [p for p in v.split(",") if p != ""]
        out = []
        kind = "integers" if conv is int else "finite numbers"
        for p in parts:
            try:
                x = conv(p)
            except ValueError:
                raise self.error(key, f"expected a list of {kind}, found {v!r}") from None
            if not (-C_INT_MAX - 1 <= x <= C_INT_MAX if conv is int else math.isfinite(x)):
                raise self.error(key, f"expected a list of {kind}, found {p!r} in {v!r}")
            if above is not None and not x > above:
                raise self.error(key, f"expected values > {above:g}, found {p!r} in {v!r}")
            out.append(x)
        return out

    def unused(self) -> list[str]:
        return [k for k in self.options if k not in self.used]


def parse_cfg_text(text: str, path: str = "<cfg>") -> list[Section]:
    sections: list[Section] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = "".join(raw.split())          # Darknet strips every whitespace character
        if not line or line[0] in "#;":
            continue
        if line[0] == "[":
            if not line.endswith("]"):
                raise CfgError(f"{path}:{lineno}: section header {raw.strip()!r} has no closing ']'")
            sections.append(Section(type=line[1:-1].lower(), line=lineno, path=path))
            continue
        if not sections:
            raise CfgError(f"{path}:{lineno}: option {raw.strip()!r} before the first [section]")
        if "=" not in line:
            raise CfgError(f"{path}:{lineno}: expected key=value in [{sections[-1].type}], found {raw.strip()!r}")
        key, value = line.split("=", 1)
        s = sections[-1]
        s.options[key] = value
        s.lines[key] = lineno
    if not sections:
        raise CfgError(f"{path}: config file has no sections")
    return sections


def read_cfg(path: str | os.PathLike) -> list[Section]:
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise CfgError(f"{path}: cannot read cfg file: {e.strerror}") from None
    return parse_cfg_text(text, path)
