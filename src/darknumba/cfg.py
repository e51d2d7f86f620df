"""Read Darknet .cfg files into sections with line numbers, and typed option getters.

Darknet's format (``read_cfg`` / ``read_option`` in C): ``[section]`` headers, ``key=value``
lines, ``#`` and ``;`` comment lines, blank lines; spaces anywhere are ignored. The getters
mirror ``option_find_int`` / ``option_find_float`` / ``option_find_str`` and remember which keys
were read so that ``unused()`` can report the rest, as Darknet's ``Unused field`` does.

Where Darknet reads a file silently wrong, we read it as it does and warn, or refuse it:
- a key given twice: Darknet's option_find walks the section's list from the front
  (option_list.c; list_insert appends at the back, list.c), so the FIRST value wins and the
  later one is never read; we keep the first too, and warn.
- a comment after a value (``filters=16 # x``): Darknet keeps the whole text (``16#x``);
  atoi/atof read its numeric prefix, so number keys get 16; a string key gets the comment
  too (``activation=leaky#x`` is no activation, and Darknet falls back to ReLU): an error.
- numbers are C's: ASCII digits only (Python would read Arabic-Indic or fullwidth digits,
  atoi reads none), integers within a C int, floats finite.
- a UTF-8 byte-order mark is skipped (Darknet takes ``\ufeff[net]`` for an unknown
  section); a file that is not UTF-8 is an error naming the byte.
"""
from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass, field

from .errors import CfgError, CfgWarning
from .inputs import MAX_CFG, read_bytes

_MISSING = object()
C_INT_MAX = 2 ** 31 - 1
_COMMENT = re.compile(r"[#;]")
_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|"
                    r"[+-]?(?:nan|inf|infinity)", re.ASCII | re.IGNORECASE)


def c_int(text: str) -> int | None:
    """An integer written with ASCII digits (or an integral float: atoi("1.0") reads 1), or
    None."""
    if _INT.fullmatch(text):
        return int(text)
    f = c_float(text)
    if f is not None and math.isfinite(f) and f == int(f):
        return int(f)
    return None


def c_float(text: str) -> float | None:
    """A decimal number as atof reads one whole (ASCII digits; nan and inf included), or None."""
    return float(text) if _FLOAT.fullmatch(text) else None


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

    def _find(self, key: str, default):
        """The value text as written (Darknet's option_find), or the default."""
        self.used.add(key)
        if key in self.options:
            return self.options[key]
        if default is _MISSING:
            raise self.error(key, "is required but missing")
        return default

    def _find_number_text(self, key: str, default):
        """A number key's text up to a trailing comment (what atoi / atof read)."""
        v = self._find(key, default)
        return v if v is default else _COMMENT.split(v, 1)[0]

    def find_str(self, key: str, default=_MISSING):
        v = self._find(key, default)
        if v is not default and _COMMENT.search(v):
            raise self.error(key, f"{v!r} has a comment after the value; Darknet would read "
                                  f"it all as the value: put the comment on a line of its own")
        return v

    def find_int(self, key: str, default=_MISSING, at_least: int | None = None) -> int:
        """An integer option (a C int, as atoi reads it); `at_least` bounds it."""
        v = self._find_number_text(key, default)
        if v is default:
            return default
        n = c_int(v)
        if n is None:
            raise self.error(key, f"expected an integer, found {v!r}")
        if not -C_INT_MAX - 1 <= n <= C_INT_MAX:
            raise self.error(key, f"{n} does not fit a C int (Darknet reads it with atoi)")
        if at_least is not None and n < at_least:
            raise self.error(key, f"expected at least {at_least}, found {n}")
        return n

    def find_float(self, key: str, default=_MISSING, at_least: float | None = None,
                   above: float | None = None, below: float | None = None) -> float:
        """A finite number (NaN and Inf, which atof would read, are refused); `at_least`,
        `above` and `below` bound it."""
        v = self._find_number_text(key, default)
        if v is default:
            return default
        f = c_float(v)
        if f is None:
            raise self.error(key, f"expected a number, found {v!r}")
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
        v = self._find_number_text(key, default)
        if v is default:
            return default
        parts = [p for p in v.split(",") if p != ""]
        out = []
        kind = "integers" if conv is int else "finite numbers"
        read = c_int if conv is int else c_float
        for p in parts:
            x = read(p)
            if x is None:
                raise self.error(key, f"expected a list of {kind}, found {v!r}")
            if not (-C_INT_MAX - 1 <= x <= C_INT_MAX if conv is int else math.isfinite(x)):
                raise self.error(key, f"expected a list of {kind}, found {p!r} in {v!r}")
            if above is not None and not x > above:
                raise self.error(key, f"expected values > {above:g}, found {p!r} in {v!r}")
            out.append(x)
        return out

    def unused(self) -> list[str]:
        return [k for k in self.options if k not in self.used]


def parse_cfg_text(text: str, path: str = "<cfg>") -> list[Section]:
    """Darknet's read_cfg on text: lines split at "\n" only (as fgetl does), every space,
    tab and other whitespace removed. A repeated key keeps its first value (see above)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    sections: list[Section] = []
    for lineno, raw in enumerate(text.split("\n"), start=1):
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
        if key in s.options:
            warnings.warn(CfgWarning(
                f"{path}:{lineno}: [{s.type}] {key}: given again; Darknet uses the first value "
                f"({s.options[key]!r}, line {s.lines[key]}) and ignores {value!r}"), stacklevel=3)
            continue
        s.options[key] = value
        s.lines[key] = lineno
    if not sections:
        raise CfgError(f"{path}: config file has no sections")
    return sections


def read_cfg(path: str | os.PathLike) -> list[Section]:
    """The sections of a cfg file: UTF-8 (a byte-order mark skipped), else a CfgError naming
    the first byte that is not."""
    path = os.fspath(path)
    data = read_bytes(path, "cfg file", CfgError, MAX_CFG)     # a regular file, not /dev/zero
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise CfgError(f"{path}:{line}: not a UTF-8 text file: byte {e.start} is "
                       f"0x{data[e.start]:02x}") from None
    return parse_cfg_text(text, path)
