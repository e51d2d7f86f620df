"""Darknet's class hierarchy (`tree.c`, YOLO9000's `data/9k.tree`) and class maps.

A tree file has one line per class, `name parent` (parent -1 for a root). Consecutive lines
with the same parent form a *group*; a softmax runs within each group, and a class's
probability is the product of the conditional ones along its path to the root.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np

from .errors import CfgError
from .textfile import read_text


@dataclass
class Tree:
    name: list[str]
    parent: np.ndarray         # (n,) int64, -1 for roots
    child: np.ndarray          # (n,) group index of the node's children, -1 for none
    group: np.ndarray          # (n,) the node's group
    group_offset: np.ndarray   # (groups,) first node of each group
    group_size: np.ndarray     # (groups,)
    leaf: np.ndarray           # (n,) 1 for nodes that are nobody's parent

    @property
    def n(self) -> int:
        return len(self.name)

    @property
    def groups(self) -> int:
        return len(self.group_size)


def read_tree(path) -> Tree:
    """read_tree: one `name parent` line per class. Each parent is -1 (a root) or an earlier
    line, so that every path to the root ends (Darknet follows parents until -1 and would loop
    forever on a cycle, or write out of bounds for a parent past the end)."""
    text = read_text(path, "class tree", CfgError)
    lines = [(k, ln.split()) for k, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    if not lines:
        raise CfgError(f"{path}: the class tree has no classes (expected `name parent` lines)")
    names, parents, groups = [], [], []
    offsets, sizes = [], []
    last_parent, size = -1, 0
    for k, (lineno, tok) in enumerate(lines):
        parent = _parent(path, lineno, tok, k)
        if parent != last_parent:
            offsets.append(k - size)
            sizes.append(size)
            size, last_parent = 0, parent
        names.append(tok[0])
        parents.append(parent)
        groups.append(len(sizes))
        size += 1
    offsets.append(len(lines) - size)
    sizes.append(size)
    parent = np.array(parents, dtype=np.int64)
    child = np.full(len(names), -1, dtype=np.int64)
    group = np.array(groups, dtype=np.int64)
    for k, p in enumerate(parents):
        if p >= 0:
            child[p] = group[k]
    leaf = np.ones(len(names), dtype=np.int64)
    leaf[parent[parent >= 0]] = 0
    return Tree(names, parent, child, group, np.array(offsets, dtype=np.int64),
                np.array(sizes, dtype=np.int64), leaf)


def _parent(path, lineno: int, tok: list[str], k: int) -> int:
    """The parent of class k (line `lineno`): -1 when absent, else an integer in -1..k-1
    (further words on the line are ignored, as Darknet's sscanf does)."""
    if len(tok) == 1:
        return -1
    if not re.fullmatch(r"-?[0-9]+", tok[1]):
        raise CfgError(f"{path}:{lineno}: expected `name parent` (parent an integer, -1 for a "
                       f"root), found {' '.join(tok)!r}: is this a class tree?")
    parent = int(tok[1])
    if not -1 <= parent < k:
        raise CfgError(f"{path}:{lineno}: class {k} ({tok[0]}) has parent {parent}; a parent "
                       f"is -1 or an earlier class (0..{k - 1})")
    return parent


def read_map(path) -> np.ndarray:
    """read_map: one class index per line."""
    text = read_text(path, "class map", CfgError)
    try:
        return np.array([int(v) for v in text.split()], dtype=np.int64)
    except ValueError as e:
        raise CfgError(f"{path}: cannot read class map: {e}") from None


def resolve(path: str, cfg_path: str) -> str:
    """A path from a cfg: as written if it exists (Darknet opens it from the working
    directory), else relative to the cfg's folder, else relative to the folder above it."""
    if os.path.isabs(path) or os.path.exists(path):
        return path
    base = os.path.dirname(os.path.abspath(cfg_path))
    for cand in (os.path.join(base, path), os.path.join(os.path.dirname(base), path)):
        if os.path.exists(cand):
            return cand
    return path
