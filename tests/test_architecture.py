"""The tree's dependency direction: kernels import only kernels; the engine (top-level modules,
layers/, kernels/) never imports the applications built on it (vision, data, train, parity, cli)."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import darknumba

PKG = Path(darknumba.__file__).parent
APPS = ("vision", "data", "train", "parity", "export", "cli")


def imported_modules(path: Path) -> set[str]:
    """Absolute darknumba module names a file imports (relative imports resolved)."""
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    package = parts[:-1]                 # a module's package; an __init__'s own package
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name == "darknumba" or name.startswith("darknumba."):
                found.add(name)
                found.update(f"{name}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("darknumba"))
    return found


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
