"""Our cfg copies of AlexeyAB's networks and their -custom training templates.

tests/fixtures/ab/tables-cfg/NAME.txt is the layer table AlexeyAB's parser printed for our
cfg/NAME.cfg; tables/NAME.txt the one it printed for its own cfg/NAME.cfg. The copies must give
AlexeyAB the very same table; a template must be its network with the head resized to its
classes. (That darknumba builds each with that table is tests/networks/test_ab_tables.py.)
"""
import fnmatch
import re

import pytest
from conftest import ROOT

from darknumba.cfg import read_cfg

TABLES = ROOT / "tests" / "fixtures" / "ab" / "tables"
CFG_TABLES = ROOT / "tests" / "fixtures" / "ab" / "tables-cfg"
COPIES = ["yolov4-tiny", "yolov4", "yolov4-csp", "yolov7-tiny"]
TEMPLATES = {f"{name}-custom": name for name in COPIES}


def _rows(path):
    """The table rows and totals, without the first line (it echoes the cfg's batch)."""
    return path.read_text().splitlines()[1:]


@pytest.mark.parametrize("name", COPIES)
def test_copy_gives_alexeyab_its_own_table(name):
    assert _rows(CFG_TABLES / f"{name}.txt") == _rows(TABLES / f"{name}.txt")


def _values(v: str):
    out = []
    for p in v.split(","):
        try:
            out.append(float(p))
        except ValueError:
            out.append(p)
    return out


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_template_is_its_network_with_a_resized_head(template):
    net = read_cfg(ROOT / "cfg" / f"{TEMPLATES[template]}.cfg")
    tpl = read_cfg(ROOT / "cfg" / f"{template}.cfg")
    assert [s.type for s in tpl] == [s.type for s in net]
    heads = [i for i, s in enumerate(tpl) if s.type == "yolo"]
    classes = {int(tpl[i].options["classes"]) for i in heads}
    assert len(classes) == 1
    n_classes = classes.pop()
    for i in heads:
        masks = len(tpl[i].options["mask"].split(","))
        assert int(tpl[i - 1].options["filters"]) == (n_classes + 5) * masks
    opts = tpl[0].options
    max_batches, steps = int(opts["max_batches"]), [int(s) for s in opts["steps"].split(",")]
    assert max_batches == max(2000 * n_classes, 6000)
    assert steps == [max_batches * 8 // 10, max_batches * 9 // 10]
    changed = {"classes", "filters", "mask"}
    for a, b in zip(net[1:], tpl[1:]):
        same = {k: _values(v) for k, v in a.options.items() if k not in changed}
        assert same == {k: _values(v) for k, v in b.options.items() if k not in changed}


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_template_gives_alexeyab_its_networks_table_but_the_heads(template):
    """AlexeyAB's table of the template differs from the network's only in the head convs
    (filters, output channels, BFLOPs) and the totals."""
    net = [r for r in _rows(TABLES / f"{TEMPLATES[template]}.txt") if not r.startswith("avg_")]
    tpl = [r for r in _rows(CFG_TABLES / f"{template}.txt") if not r.startswith("avg_")]
    assert len(net) == len(tpl)
    differ = [(a, b) for a, b in zip(net, tpl) if a != b]
    assert differ[-1][0].startswith("Total BFLOPS")
    heads = sum(r.strip().endswith("yolo") for r in tpl)
    assert len(differ) == heads + 1
    for a, b in differ[:-1]:
        assert a.split()[:2] == b.split()[:2] and a.split()[1] == "conv"
        assert a.split()[2] == "255" and b.split()[2] == "18"


def test_cfg_folder_ships_in_the_package():
    """The package ships cfg/ through resources/cfg (a symlink) and pyproject's package-data
    glob: every copy and template is inside it."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[tool.setuptools.package-data]", 1)[1]
    globs = re.findall(r'"([^"]+)"', re.search(r"^darknumba = \[(.*)\]$", section, re.MULTILINE).group(1))
    for name in COPIES + sorted(TEMPLATES):
        rel = f"resources/cfg/{name}.cfg"
        assert any(fnmatch.fnmatch(rel, g) for g in globs)
        assert (ROOT / "src" / "darknumba" / rel).is_file()
