"""Reading Caffe's files: the prototxt text format (nesting, comments, quotes, lists, line
numbers in errors) and the caffemodel wire format (written by tests/caffe_files.py: packed and
unpacked floats, the new and the legacy shape, V1 layers; damaged files)."""
import numpy as np
import pytest

from darknumba.export.caffe.caffemodel import CaffemodelError, parse_caffemodel
from darknumba.export.caffe.prototxt import PrototxtError, parse_prototxt

from caffe_files import caffemodel_bytes

TEXT = """name: "net"   # a comment
input: 'data'
layer {
  name: "c\\"1"
  type: "Convolution"
  convolution_param: { num_output: 8 kernel_size: 3 kernel_size: 3 pad: [1, 1] }
  include { phase: TEST }
}
layer < name: "p" type: "Pooling" pooling_param { pool: MAX global_pooling: true } >
"""


def test_prototxt():
    root = parse_prototxt(TEXT, "t.prototxt")
    assert root.str("name") == "net" and root.strs("input") == ["data"]
    c, p = root.all("layer")
    assert (c.str("name"), c.line, c.line_of("type")) == ('c"1', 3, 5)
    cp = c.msg("convolution_param")
    assert cp.int("num_output") == 8 and cp.ints("kernel_size") == [3, 3]
    assert cp.ints("pad") == [1, 1] and c.msg("include").str("phase") == "TEST"
    assert p.msg("pooling_param").str("pool") == "MAX"
    assert p.msg("pooling_param").bool("global_pooling", False) is True
    assert p.msg("missing").int("x", 7) == 7


@pytest.mark.parametrize("text, message", [
    ("layer { name: 'a'", "t.prototxt:1: this block is never closed"),
    ("a: 1\n}", "t.prototxt:2: '}' closes no block"),
    ("a: 1\nb: \n", "t.prototxt:2: 'b' has no value"),
    ("a: 1\n\n{", "t.prototxt:3: expected a field name"),
    ("a: 1\nb: ?", "t.prototxt:2: unexpected character '?'"),
])
def test_prototxt_errors(text, message):
    with pytest.raises(PrototxtError, match=message.replace("?", r"\?")):
        parse_prototxt(text, "t.prototxt")


def test_typed_values_name_their_line():
    root = parse_prototxt("a: 1\nb: x1\nc { d: 2 }\n", "t.prototxt")
    with pytest.raises(PrototxtError, match=r"t.prototxt:2: 'b: x1' should be an integer"):
        root.int("b")
    with pytest.raises(PrototxtError, match=r"t.prototxt:3: 'c' should be a value"):
        root.str("c")


@pytest.mark.parametrize("options", [{}, {"legacy": True}, {"unpacked": True}, {"v1": True}],
                         ids=["packed", "legacy-shape", "unpacked", "v1-layers"])
def test_caffemodel(options):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(4, 3, 3, 3)).astype(np.float32)
    b = rng.normal(size=4).astype(np.float32)
    layers = parse_caffemodel(caffemodel_bytes({"conv": ("Convolution", [w, b]),
                                                "relu": ("ReLU", [])}, **options))
    got_w, got_b = layers["conv"]
    assert layers["relu"] == []
    assert got_w.shape == (4, 3, 3, 3) and got_b.shape in ((4,), (1, 1, 1, 4))
    assert np.array_equal(got_w, w) and np.array_equal(got_b.ravel(), b)


def test_damaged_caffemodels():
    data = caffemodel_bytes({"conv": ("Convolution", [np.ones((2, 2), np.float32)])})
    with pytest.raises(CaffemodelError, match=r"m.caffemodel: byte \d+: field 100 runs past"):
        parse_caffemodel(data[:-3], "m.caffemodel")
    with pytest.raises(CaffemodelError, match="no layers found"):
        parse_caffemodel(b"\x0a\x03net", "m.caffemodel")
    with pytest.raises(CaffemodelError, match="unknown wire type 7"):
        parse_caffemodel(b"\x0f\x00", "m.caffemodel")


def test_mutated_files_raise_only_their_errors():
    """Random byte and text mutations of valid files: each either reads or raises the reader's
    own error (a DarknumbaError, one line), never another exception."""
    rng = np.random.default_rng(1)
    good = caffemodel_bytes({"conv": ("Convolution", [np.ones((2, 3), np.float32)] * 2),
                             "fc": ("InnerProduct", [np.ones(5, np.float32)])})
    for _ in range(300):
        data = bytearray(good)
        for _ in range(rng.integers(1, 4)):
            data[rng.integers(len(data))] = rng.integers(256)
        try:
            parse_caffemodel(bytes(data[:rng.integers(1, len(data) + 1)]), "m.caffemodel")
        except CaffemodelError as e:
            assert "\n" not in str(e)
    alphabet = list(TEXT) + list("{}:<>[]\"'#\n 0-x.e")
    for _ in range(300):
        text = list(TEXT)
        for _ in range(rng.integers(1, 4)):
            text[rng.integers(len(text))] = alphabet[rng.integers(len(alphabet))]
        try:
            root = parse_prototxt("".join(text), "t.prototxt")
            for layer in root.all("layer"):
                if hasattr(layer, "msg"):
                    layer.msg("convolution_param").ints("kernel_size")
        except PrototxtError as e:
            assert "\n" not in str(e)
