"""The documentation cannot drift: every code block in README.md and docs/*.md whose info string
says `runnable` is run as written, and every relative link points at a file (and heading) that
exists.

A block opens with ```bash runnable or ```python runnable, optionally followed by words:
`slow` (marked slow: it trains, compiles or runs MPI), `needs=mod1,mod2` (Python modules the
block needs; it is skipped without them), `timeout=N` (seconds, default 300). Each block runs
in a fresh folder laid out like a checkout: a copy of cfg/, the checkout's weights/ files
linked, tests/ and bench/ linked, dog.jpg from Darknet's sample photos (and clip.mp4, a few
frames of it, for the blocks that read one); bash blocks run
under `set -euo pipefail` with this venv's bin/ first on PATH (`darknumba`, `mpirun`), python
blocks with this interpreter. docs/index.md states the convention for writers."""
import os
import re
import shutil
import signal
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

import conftest
from conftest import ROOT

# Darknet's sample photo dog.jpg, which the docs use as Darknet's own docs do
PHOTO_DIRS = conftest.PHOTO_DIRS

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(`{3,})(\S*)(.*)$")
WORDS = {"runnable", "slow"}
DEFAULT_TIMEOUT = 300


def fenced(page: Path):
    """(line, language, words, text) of each fenced block of a page; a block closes at a fence of
    its own length (a ```` block may show ``` ones)."""
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, fence, lang, words = i, m.group(1), m.group(2), m.group(3).split()
        i += 1
        body = []
        while i < len(lines) and lines[i].rstrip() != fence:
            body.append(lines[i])
            i += 1
        i += 1
        yield start + 1, lang, words, "\n".join(body) + "\n"


def blocks(page: Path):
    """The runnable blocks of a page."""
    return [b for b in fenced(page) if "runnable" in b[2]]


def options(words):
    opts = {"slow": False, "needs": [], "timeout": DEFAULT_TIMEOUT}
    for w in words:
        if w in WORDS:
            opts["slow"] = opts["slow"] or w == "slow"
        elif w.startswith("needs="):
            opts["needs"] = w[len("needs="):].split(",")
        elif w.startswith("timeout="):
            opts["timeout"] = int(w[len("timeout="):])
        else:
            raise ValueError(f"unknown word {w!r} in a runnable block's info string")
    return opts


def cases():
    out = []
    for page in PAGES:
        for line, lang, words, text in blocks(page):
            opts = options(words)
            marks = [pytest.mark.slow] if opts["slow"] else []
            out.append(pytest.param(lang, opts, text, marks=marks,
                                    id=f"{page.relative_to(ROOT)}:{line}"))
    return out


def checkout_like(folder: Path) -> Path:
    """A folder a reader of the docs would stand in: cfg/, weights/, tests/, bench/, dog.jpg."""
    shutil.copytree(ROOT / "cfg", folder / "cfg")
    (folder / "weights").mkdir()
    for f in (ROOT / "weights").glob("*.weights"):
        (folder / "weights" / f.name).symlink_to(f)
    for d in ("tests", "bench"):
        (folder / d).symlink_to(ROOT / d)
    # the docs say any photo will do: without Darknet's own, a JPEG from the test dependencies
    # (matplotlib's grace_hopper.jpg) stands in under its name, so a bare clone runs every block
    dog = next((d / "dog.jpg" for d in PHOTO_DIRS if (d / "dog.jpg").is_file()), None)
    if dog is None:
        dog = next(p for p in conftest.sample_photos() if p.suffix == ".jpg")
    shutil.copy(dog, folder / "dog.jpg")
    return folder


def write_clip(path: Path, photo: Path, frames: int = 8, fps: int = 8) -> Path:
    """A short H.264 clip of the photo drifting sideways, for the blocks that read clip.mp4."""
    import av
    import numpy as np
    from PIL import Image
    a = np.asarray(Image.open(photo).convert("RGB").resize((320, 240)))
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = 320, 240, "yuv420p"
        for i in range(frames):
            for packet in s.encode(av.VideoFrame.from_ndarray(np.roll(a, 4 * i, axis=1), format="rgb24")):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    return path


@pytest.mark.parametrize("lang,opts,text", cases())
def test_runnable_block(lang, opts, text, tmp_path):
    missing = [m for m in opts["needs"] if find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (pip install -e '.[test]')")
    for name in set(re.findall(r"weights/([\w-]+)\.weights", text)):
        fetch = getattr(conftest, "official_weights", None)
        if fetch is not None and name in ("yolov3-tiny", "yolov4-tiny"):
            fetch(name, ROOT / "weights" / f"{name}.weights")
    work = checkout_like(tmp_path / "work")
    if "clip.mp4" in text:
        write_clip(work / "clip.mp4", work / "dog.jpg")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               DARKNUMBA_CACHE=str(tmp_path / "cache"), MPLBACKEND="Agg")
    if lang == "bash":
        cmd = ["bash", "-c", "set -euo pipefail\n" + text]
    elif lang == "python":
        cmd = [sys.executable, "-c", text]
    else:
        raise ValueError(f"runnable blocks are bash or python, not {lang!r}")
    with subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True) as p:
        try:
            out, _ = p.communicate(timeout=opts["timeout"])
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)        # the block's whole process group (mpirun's ranks)
            out, _ = p.communicate()
            pytest.fail(f"timed out after {opts['timeout']} s\n{text}\n--- output\n{out[-4000:]}")
    assert p.returncode == 0, f"exit status {p.returncode}\n{text}\n--- output\n{out[-6000:]}"


def test_the_convention_is_documented_and_blocks_are_found():
    """docs/index.md states the convention where writers look; the parser finds the blocks."""
    index = (ROOT / "docs" / "index.md").read_text()
    assert "```bash runnable" in index
    assert len(cases()) >= 10


LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (outside fenced blocks)."""
    text = page.read_text()
    for _, _, _, body in fenced(page):
        text = text.replace(body, "")
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"(?m)^#{1,6} (.+)$", text)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    bad = []
    for target, anchor in LINK.findall(page.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        path = page.parent / target if target else page
        if not path.exists():
            bad.append(target)
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            bad.append(f"{target}#{anchor}")
    assert not bad, f"{page.name}: links to missing files or headings: {bad}"
