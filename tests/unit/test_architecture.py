"""The tree's dependency direction: kernels import only kernels; the engine (top-level modules,
layers/, kernels/) never imports the applications built on it (vision, data, train, parity, cli);
every import goes to the importer's floor or one below (FLOORS), and no modules import each
other in a circle, whether the import sits at a module's top or inside a function."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import darknumba

PKG = Path(darknumba.__file__).parent
APPS = ("runtime", "vision", "data", "train", "parity", "export", "cli")
# The floors, bottom up: a module imports from its own floor or a lower one. The engine is the
# top-level modules and layers/; runtime/ is the process around it (threads, caches, cold start)
# and sits beside vision/, on one floor: a detector's cold start runs the detector (vision.box),
# and the Detector configures the process and asks its cold start (runtime).
FLOORS = ("kernels", "engine", ("runtime", "vision"), "data", "export", "train", "parity", "cli")


def level(module: str) -> int:
    """The index in FLOORS of a module's floor."""
    f = floor(module)
    return next(i for i, names in enumerate(FLOORS)
                if f in (names if isinstance(names, tuple) else (names,)))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PKG.rglob("*.py")}
# Imports the AST does not show (importlib.import_module): the cycle check counts them too
DYNAMIC_IMPORTS = {
    "darknumba": set(darknumba._EXPORTS.values()),     # dn.Network, dn.Detector, ... on first use
    "darknumba.cli": {m for m in MODULES if m.startswith("darknumba.cli.")},   # every command
}


def imports(path: Path, name: str | None = None) -> list[tuple[str, int]]:
    """(darknumba module, line) of every import in a file, at its top or inside a function,
    relative imports resolved: `from m import x` is m.x where that is a module, else m (a
    name that is no module counts as the module it comes from). `name`: the file's module."""
    name = name or module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found += [(f"{mod}.{a.name}", node.lineno) for a in node.names]
            found += [(mod, node.lineno)] * any(f"{mod}.{a.name}" not in MODULES
                                                for a in node.names)
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
    resolved = []
    for mod, line in found:
        if mod != "darknumba" and not mod.startswith("darknumba."):
            continue
        while mod not in MODULES and "." in mod:
            mod = mod.rpartition(".")[0]
        resolved.append((mod, line))
    return sorted(set(resolved))


def imported_modules(path: Path) -> set[str]:
    """The darknumba modules a file imports (relative imports resolved)."""
    return {m for m, _ in imports(path)}


def floor(module: str) -> str:
    """The floor of a darknumba module: its sub-package, or "engine" for top-level modules and
    layers/."""
    top = module.split(".")[1:2]
    return top[0] if top and top[0] != "layers" and (PKG / top[0]).is_dir() else "engine"


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of a graph (module -> modules it imports): every strongly connected set of
    two or more modules (Tarjan's algorithm), sorted."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while not members or members[-1] != v:
                members.append(stack.pop())
                on_stack.discard(members[-1])
            if len(members) > 1:
                cycles.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def engine_files():
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(PKG).parts
        if rel[0] not in APPS:
            yield p


def test_kernels_import_only_kernels():
    bad = {}
    for p in (PKG / "kernels").rglob("*.py"):
        mods = {m for m in imported_modules(p) if not m.startswith("darknumba.kernels")}
        if mods:
            bad[p.name] = sorted(mods)
    assert bad == {}


def test_engine_never_imports_applications():
    bad = {}
    for p in engine_files():
        mods = {m for m in imported_modules(p)
                if m.split(".")[1:2] and m.split(".")[1] in APPS}
        if mods:
            bad[str(p.relative_to(PKG))] = sorted(mods)
    assert bad == {}


def test_the_checker_resolves_relative_imports():
    """The resolver is not blind: `from ..x import y` in layers/ resolves to darknumba.x."""
    fake = PKG / "layers" / "base.py"
    assert "darknumba.kernels.fused" in imported_modules(fake)
    assert "darknumba.errors" in imported_modules(fake)


def test_importing_the_package_loads_no_application():
    """`dn.Detector` is exported lazily: `import darknumba` loads none of the applications."""
    code = ("import sys, darknumba\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[1:2] and "
            f"m.split('.')[0] == 'darknumba' and m.split('.')[1] in {APPS!r}))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(PKG.parent)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
    assert darknumba.Detector.__module__ == "darknumba.vision.detector"


def test_every_package_has_a_floor():
    names = {n for names in FLOORS for n in (names if isinstance(names, tuple) else (names,))}
    assert {floor(m) for m in MODULES} <= names


def test_no_import_runs_up_a_floor():
    """A module imports from its own floor or a lower one: vision reads no data/ module, the
    engine no runtime/ one, ... (`dn.Detector`, loaded by name on first use, is the package's
    one door to an application: test_importing_the_package_loads_no_application)"""
    bad = [f"{MODULES[m].relative_to(PKG)}:{line} imports {t} ({floor(t)} is above {floor(m)})"
           for m in sorted(MODULES) for t, line in imports(MODULES[m])
           if level(t) > level(m)]
    assert bad == []


def test_no_import_cycles():
    """No modules import each other in a circle, with a lazy import (inside a function) counted
    as an import: it ties the two modules as much as one at the top does; so does a dynamic one
    (DYNAMIC_IMPORTS)."""
    graph = {m: ({t for t, _ in imports(p)} | DYNAMIC_IMPORTS.get(m, set())) - {m}
             for m, p in MODULES.items()}
    circles = [[f"{MODULES[a].relative_to(PKG)}:{line} imports {b}"
                for a in cycle for b, line in imports(MODULES[a]) if b in cycle and b != a]
               + [f"{MODULES[a].relative_to(PKG)} loads {b} (import_module)"
                  for a in cycle for b in DYNAMIC_IMPORTS.get(a, ()) if b in cycle]
               for cycle in import_cycles(graph)]
    assert circles == []


def test_every_dynamic_import_is_known():
    """A module that loads modules by name is in DYNAMIC_IMPORTS, so the cycle check sees what
    it loads."""
    dynamic = {m for m, p in MODULES.items()
               if "import_module(" in p.read_text() or "__import__(" in p.read_text()}
    assert dynamic == set(DYNAMIC_IMPORTS)


def test_the_cycle_checker_sees_cycles_and_lazy_imports(tmp_path):
    """The checker is not blind: it finds a circle of three and one of two, leaves a module that
    only imports into a circle outside it, and reads an import inside a function."""
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"},
                          "f": {"a"}}) == [["a", "b", "c"], ["d", "e"]]
    lazy = tmp_path / "lazy.py"
    lazy.write_text("def f():\n    from ..parser import load_network\n    from . import yolo\n")
    assert imports(lazy, "darknumba.layers.lazy") == [("darknumba.layers.yolo", 3),
                                                      ("darknumba.parser", 2)]
    assert [floor(f"darknumba.{m}") for m in ("parser", "layers.yolo", "vision.box")] == \
        ["engine", "engine", "vision"]
