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

    def find_int(self, key: str, default=_MISSING) -> int:
        v = self.find_str(key, default)
        if v is default:
            return default
        try:
            return int(v)
        except ValueError:
            try:                      # Darknet's atoi("1.0") reads 1; accept integral floats
                f = float(v)
            except ValueError:
                f = math.nan
            if f == int(f) if math.isfinite(f) else False:
                return int(f)
            raise self.error(key, f"expected an integer, found {v!r}") from None

    def find_float(self, key: str, default=_MISSING) -> float:
        v = self.find_str(key, default)
        if v is default:
            return default
        try:
            return float(v)
        except ValueError:
            raise self.error(key, f"expected a number, found {v!r}") from None

    def find_list(self, key: str, conv=int, default=_MISSING) -> list:
        """A comma-separated list such as ``layers=-1, 8`` or ``anchors = 10,14,  23,27``."""
        v = self.find_str(key, default)
        if v is default:
            return default
        parts = [p for p in v.split(",") if p != ""]
        out = []
        for p in parts:
            try:
                out.append(conv(p))
            except ValueError:
                kind = "integers" if conv is int else "numbers"
                raise self.error(key, f"expected a list of {kind}, found {v!r}") from None
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
