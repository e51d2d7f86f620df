"""Caffe's .prototxt: protobuf's text format, read into messages that remember their lines.

The grammar a deploy prototxt uses: `field: value` (a number, a "string" or 'string', or an
enum name such as MAX), `field { ... }` or `field: { ... }` for a nested message, `#` comments
to the end of the line, fields repeated by writing them again. No schema is needed to read it:
every value keeps its text, and the mapping (mapping.py) asks for the type it expects, so a
wrong value is an error naming the file and line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...errors import DarknumbaError
from ...inputs import read_bytes

MAX_PROTOTXT = 64 << 20
_TOKEN = re.compile(r"""\s+|\#[^\n]*|(?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')|"""
                    r"""(?P<word>[A-Za-z0-9_.+\-]+)|(?P<punct>[:{}<>;,\[\]])""")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}


class PrototxtError(DarknumbaError):
    """A prototxt that cannot be read, or whose values are not what Caffe expects."""


@dataclass
class Value:
    text: str            # as written, quotes removed from a string
    quoted: bool
    line: int


@dataclass
class Message:
    """One message: its fields in file order, each a (name, Value or Message) pair."""
    path: str
    line: int
    fields: list = field(default_factory=list)

    def all(self, name: str) -> list:
        return [v for k, v in self.fields if k == name]

    def has(self, name: str) -> bool:
        return any(k == name for k, _ in self.fields)

    def line_of(self, name: str) -> int:
        return next((v.line for k, v in self.fields if k == name), self.line)

    def error(self, msg: str, name: str | None = None) -> PrototxtError:
        return PrototxtError(f"{self.path}:{self.line_of(name) if name else self.line}: {msg}")

    def msg(self, name: str) -> "Message":
        """The nested message `name` (an empty one, at this message's line, when absent)."""
        found = self.all(name)
        if found and not isinstance(found[-1], Message):
            raise self.error(f"'{name}' should be a {{ ... }} block", name)
        return found[-1] if found else Message(self.path, self.line)

    def _scalar(self, v, name):
        if isinstance(v, Message):
            raise self.error(f"'{name}' should be a value, found a {{ ... }} block", name)
        return v

    def str(self, name: str, default=None):
        found = self.all(name)
        return self._scalar(found[-1], name).text if found else default

    def strs(self, name: str) -> list[str]:
        return [self._scalar(v, name).text for v in self.all(name)]

    def _number(self, v, name, kind):
        v = self._scalar(v, name)
        try:
            return kind(v.text) if kind is float else int(v.text, 0)
        except ValueError:
            raise PrototxtError(f"{self.path}:{v.line}: '{name}: {v.text}' should be "
                                f"{'a number' if kind is float else 'an integer'}") from None

    def int(self, name: str, default=None):
        found = self.all(name)
        return self._number(found[-1], name, int) if found else default

    def ints(self, name: str) -> list[int]:
        return [self._number(v, name, int) for v in self.all(name)]

    def float(self, name: str, default=None):
        found = self.all(name)
        return self._number(found[-1], name, float) if found else default

    def floats(self, name: str) -> list[float]:
        return [self._number(v, name, float) for v in self.all(name)]

    def bool(self, name: str, default: bool) -> bool:
        text = self.str(name)
        if text is None:
            return default
        if text.lower() in ("true", "t", "1"):
            return True
        if text.lower() in ("false", "f", "0"):
            return False
        raise self.error(f"'{name}: {text}' should be true or false", name)


def _unescape(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


def _tokens(text: str, path: str):
    """(kind, text, line) for every token: 'str', 'word' or 'punct'."""
    pos, line = 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise PrototxtError(f"{path}:{line}: unexpected character {text[pos]!r}")
        kind = m.lastgroup
        if kind == "str":
            yield kind, _unescape(m.group()[1:-1]), line
        elif kind is not None:
            yield kind, m.group(), line
        line += m.group().count("\n")
        pos = m.end()


def parse_prototxt(text: str, path: str = "<prototxt>") -> Message:
    """The top-level message of a prototxt text."""
    root = Message(path, 1)
    stack = [root]
    toks = list(_tokens(text, path))
    i = 0
    while i < len(toks):
        kind, tok, line = toks[i]
        if kind == "punct" and tok in ";,":
            i += 1
            continue
        if kind == "punct" and tok in "}>":
            if len(stack) == 1:
                raise PrototxtError(f"{path}:{line}: '{tok}' closes no block")
            stack.pop()
            i += 1
            continue
        if kind != "word":
            raise PrototxtError(f"{path}:{line}: expected a field name, found {tok!r}")
        name = tok
        i += 1
        if i < len(toks) and toks[i][1] == ":":
            i += 1
        if i >= len(toks):
            raise PrototxtError(f"{path}:{line}: '{name}' has no value")
        vkind, vtok, vline = toks[i]
        if vkind == "punct" and vtok in "{<":
            child = Message(path, line)
            stack[-1].fields.append((name, child))
            stack.append(child)
        elif vkind == "punct" and vtok == "[":        # a list: field: [a, b, c]
            i += 1
            while i < len(toks) and toks[i][1] != "]":
                k, t, ln = toks[i]
                if k != "punct":
                    stack[-1].fields.append((name, Value(t, k == "str", ln)))
                i += 1
        elif vkind == "punct":
            raise PrototxtError(f"{path}:{vline}: '{name}' is followed by {vtok!r}, expected a "
                                f"value or a {{ ... }} block")
        else:
            stack[-1].fields.append((name, Value(vtok, vkind == "str", vline)))
        i += 1
    if len(stack) != 1:
        raise PrototxtError(f"{path}:{stack[-1].line}: this block is never closed")
    return root


def read_prototxt(path) -> Message:
    """parse_prototxt of a file (UTF-8), checked as every input is (inputs.read_bytes)."""
    data = read_bytes(path, "the Caffe prototxt", PrototxtError, MAX_PROTOTXT)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PrototxtError(f"{path}: not UTF-8 text (byte {e.start})") from None
    return parse_prototxt(text, str(path))
