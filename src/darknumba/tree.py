"""Darknet's class hierarchy (`tree.c`, YOLO9000's `data/9k.tree`) and class maps.

A tree file has one line per class, `name parent` (parent -1 for a root). Consecutive lines
with the same parent form a *group*; a softmax runs within each group, and a class's
probability is the product of the conditional ones along its path to the root.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .errors import CfgError


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
    """read_tree"""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [ln.split() for ln in f.read().splitlines() if ln.strip()]
    except OSError as e:
        raise CfgError(f"{path}: cannot read class tree: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise CfgError(f"{path}: not a class tree: not UTF-8 text (byte {e.start})") from None
    if not lines:
        raise CfgError(f"{path}: not a class tree: no `name parent` lines")
    names, parents, groups = [], [], []
    offsets, sizes = [], []
    last_parent, size = -1, 0
    for k, tok in enumerate(lines):
        parent = _parent(tok, k, path)
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


def _parent(tok: list[str], k: int, path) -> int:
    """Node k's parent: -1 (a root) or an earlier node, so that every path to a root is
    finite and every index the tree kernels follow lies inside the tree."""
    if len(tok) < 2:
        return -1
    p = tok[1]
    if not (p.isascii() and p.lstrip("-").isdigit()):
        raise CfgError(f"{path}: class tree node {k} ({tok[0]}): parent {p!r} is not an integer")
    parent = int(p)
    if not -1 <= parent < k:
        raise CfgError(f"{path}: class tree node {k} ({tok[0]}): parent {parent} must be -1 "
                       f"(a root) or an earlier node (0..{k - 1})")
    return parent


def read_map(path) -> np.ndarray:
    """read_map: one class index per line."""
    try:
        return np.array([int(v) for v in open(path).read().split()], dtype=np.int64)
    except (OSError, ValueError) as e:
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
