"""The cfg parser: Darknet's format and defaults, and errors that name file, line, section, key."""
import re
import warnings

import pytest

import darknumba as dn
from darknumba.cfg import parse_cfg_text
from darknumba.errors import CfgError
from darknumba.parser import CfgWarning
from conftest import ROOT, golden_dir

NET = "[net]\nbatch=4\nsubdivisions=2\nwidth=16\nheight=16\nchannels=3\n"


def write(tmp_path, text, name="t.cfg"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_format_comments_spaces_lists():
    secs = parse_cfg_text("# c\n; c\n\n[net]\n batch = 2 \n[route]\nlayers = -1, 8\n"
                          "[yolo]\nanchors = 10,14,  23,27\n", "x.cfg")
    assert [s.type for s in secs] == ["net", "route", "yolo"]
    assert secs[1].find_list("layers") == [-1, 8]
    assert secs[2].find_list("anchors", float) == [10, 14, 23, 27]
    assert secs[0].lines["batch"] == 5


def test_net_defaults_and_batch_division(tmp_path):
    net = dn.parse_network_cfg(write(tmp_path, NET + "[maxpool]\n"))
    assert net.batch == 2 and net.subdivisions == 2
    assert (net.learning_rate, net.momentum, net.decay, net.policy, net.power) == (0.001, 0.9, 0.0001, "constant", 4)
    mp = net.layers[0]
    assert (mp.size, mp.stride, mp.pad) == (1, 1, 0)         # size defaults to stride, padding to size-1
    assert dn.parse_network_cfg(write(tmp_path, NET + "[maxpool]\n"), batch=1).batch == 1


def test_conv_defaults(tmp_path):
    l = dn.parse_network_cfg(write(tmp_path, NET + "[convolutional]\n")).layers[0]
    assert (l.n, l.size, l.stride, l.pad, l.groups, l.activation, l.batch_normalize) == \
        (1, 1, 1, 0, 1, "logistic", False)
    l = dn.parse_network_cfg(write(tmp_path, NET + "[conv]\nsize=5\npad=1\nfilters=3\n")).layers[0]
    assert l.pad == 2 and l.out_w == 16


@pytest.mark.parametrize("body,pattern", [
    ("[bogus]\n", r"t\.cfg:7: \[bogus\].*unknown section type"),
    ("[convolutional]\nfilters=abc\n", r"t\.cfg:8: \[convolutional\] filters: expected an integer, found 'abc'"),
    ("[convolutional]\nactivation=swishy\n", r"t\.cfg:8: \[convolutional\] activation: unknown activation 'swishy'"),
    ("[maxpool]\n[route]\nlayers=-5\n", r"t\.cfg:9: \[route\] layers: layer index -5 points to layer -4"),
    ("[maxpool]\n[route]\nlayers=3\n", r"\[route\] layers: layer index 3 points to layer 3, but only layers 0\.\.0"),
    ("[maxpool]\n[maxpool]\nstride=2\n[route]\nlayers=-1,-2\n", r"\[route\] layers: cannot concatenate layer 1 \(8x8\) with layer 0 \(16x16\)"),
    ("[maxpool]\n[shortcut]\nfrom=-4\n", r"\[shortcut\] from: layer index -4"),
    ("[convolutional]\nfilters=20\n[yolo]\nclasses=2\nmask=0,1,2\nnum=3\n",
     r"\[yolo\]: the layer before this yolo layer has 20 filters, but \(classes\+5\)\*len\(mask\) = \(2\+5\)\*3 = 21"),
    ("[convolutional]\nfilters=21\n[yolo]\nclasses=2\nmask=0,-1,5\nnum=3\n", r"\[yolo\] mask: mask \[0, -1, 5\] names a negative anchor"),
    ("[convolutional]\ngroups=2\nfilters=4\n", r"groups: input channels \(3\) and filters \(4\) must both be divisible"),
    ("[connected]\noutput=10\n[softmax]\n[convolutional]\n", r"layer 2 needs an image input"),
])
def test_errors_name_file_line_section_key(tmp_path, body, pattern):
    with pytest.raises(CfgError, match=pattern):
        dn.parse_network_cfg(write(tmp_path, NET + body))


def test_missing_net_and_policy_errors(tmp_path):
    with pytest.raises(CfgError, match=r"t\.cfg:1: the first section must be \[net\]"):
        dn.parse_network_cfg(write(tmp_path, "[convolutional]\n"))
    with pytest.raises(CfgError, match="policy=steps needs both steps= and scales="):
        dn.parse_network_cfg(write(tmp_path, NET + "policy=steps\n[maxpool]\n"))
    with pytest.raises(CfgError, match="learning_rate: expected a number, found '0.0.1'"):
        dn.parse_network_cfg(write(tmp_path, NET + "learning_rate=0.0.1\n[maxpool]\n"))
    with pytest.raises(CfgError, match=r"t\.cfg:2: expected key=value in \[net\], found 'batch'"):
        dn.parse_network_cfg(write(tmp_path, "[net]\nbatch\n"))
    with pytest.raises(CfgError, match="cannot read cfg file"):
        dn.parse_network_cfg(tmp_path / "missing.cfg")


def test_unused_keys_warn_once_with_location(tmp_path):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        dn.parse_network_cfg(write(tmp_path, NET + "[convolutional]\nfilters=2\nfliters=3\n"))
    msgs = [str(x.message) for x in w if issubclass(x.category, CfgWarning)]
    assert msgs == ["%s:9: [convolutional] unused field 'fliters = 3'" % (tmp_path / "t.cfg")]


def test_shipped_cfgs_parse_without_warnings(tmp_path):
    """Every key of the shipped yolov3 family is read. Which keys a section reads depends on
    neither the input size nor the weights: each cfg is built at 64x64 without the random
    initialisation (62M normal draws for yolov3, most of the time at 608x608)."""
    for name in ("yolov3-tiny", "yolov3", "yolov3-spp"):
        text = (ROOT / "cfg" / f"{name}.cfg").read_text()
        text, n = re.subn(r"^(width|height)=\d+$", r"\1=64", text, flags=re.MULTILINE)
        assert n == 2, f"{name}.cfg: width/height lines found {n} times"
        with warnings.catch_warnings():
            warnings.simplefilter("error", CfgWarning)
            net = dn.parse_network_cfg(write(tmp_path, text, f"{name}.cfg"), batch=1, seed=None)
        assert (net.w, net.h) == (64, 64)


def test_summary_matches_darknets_printout():
    d = golden_dir("det-small")
    net = dn.parse_network_cfg(d / "det-small.cfg")
    printed = (d / "forward_test" / "stderr.txt").read_text().splitlines()
    start = printed.index("layer     filters    size              input                output")
    ours = net.summary().splitlines()
    assert ours[:net.n + 1] == printed[start:start + net.n + 1]
    tiny = golden_dir("yolov3-tiny-detect")
    net = dn.parse_network_cfg(ROOT / "cfg" / "yolov3-tiny.cfg", batch=1)     # darknet's network
    printed = (tiny / "dog" / "stderr.txt").read_text().splitlines()
    start = printed.index("layer     filters    size              input                output")
    assert net.summary().splitlines()[:net.n + 1] == printed[start:start + net.n + 1]


# -- reading the file as Darknet reads it ------------------------------------------------------

def test_a_repeated_key_keeps_darknets_first_value_and_warns(tmp_path):
    """option_find walks from the front of the section's list: the first batch= wins."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        net = dn.parse_network_cfg(write(tmp_path, NET + "batch=8\n[convolutional]\nsize=3\n"
                                                   "filters=4\nsize=5\n"))
    assert net.batch == 2 and net.layers[0].size == 3
    msgs = [str(x.message) for x in w if issubclass(x.category, CfgWarning)]
    assert msgs == [f"{tmp_path / 't.cfg'}:7: [net] batch: given again; Darknet uses the first "
                    "value ('4', line 2) and ignores '8'",
                    f"{tmp_path / 't.cfg'}:11: [convolutional] size: given again; Darknet uses "
                    "the first value ('3', line 9) and ignores '5'"]


def test_a_byte_order_mark_is_skipped(tmp_path):
    p = tmp_path / "t.cfg"
    p.write_bytes(b"\xef\xbb\xbf" + (NET + "[maxpool]\n").encode())
    assert dn.parse_network_cfg(p).batch == 2


def test_crlf_lines(tmp_path):
    p = tmp_path / "t.cfg"
    p.write_bytes((NET + "[convolutional]\nfilters=abc\n").replace("\n", "\r\n").encode())
    with pytest.raises(CfgError, match=r"t\.cfg:8: \[convolutional\] filters: expected an "
                                       r"integer, found 'abc'"):
        dn.parse_network_cfg(p)


@pytest.mark.parametrize("line,attr,want", [
    ("filters=16 # sixteen", "n", 16),
    ("filters=16;x", "n", 16),
    ("size=3#x\nfilters=2", "size", 3),
])
def test_a_comment_after_a_number_keeps_the_number(tmp_path, line, attr, want):
    """atoi("16#sixteen") reads 16."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = dn.parse_network_cfg(write(tmp_path, NET + "[convolutional]\n" + line + "\n"))
    assert getattr(net.layers[0], attr) == want


def test_a_comment_after_numbers_in_net_and_lists(tmp_path):
    net = dn.parse_network_cfg(write(tmp_path, NET.replace("batch=4", "batch=4 ; four") +
                                     "learning_rate=0.01#lr\n[maxpool]\n[maxpool]\n[route]\n"
                                     "layers=-1,-2 # both\n"))
    assert net.batch == 2 and net.learning_rate == 0.01
    assert net.layers[2].input_layers == [1, 0]


@pytest.mark.parametrize("body,key,value", [
    ("[convolutional]\nactivation=leaky #x\n", "activation", "leaky#x"),
    ("policy=steps;x\nsteps=1\nscales=.1\n[maxpool]\n", "policy", "steps;x"),
    ("[cost]\ntype=sse # squared\n", "type", "sse#squared"),
])
def test_a_comment_after_a_string_is_an_error(tmp_path, body, key, value):
    """activation=leaky#x is no activation Darknet knows: it silently trains with ReLU."""
    with pytest.raises(CfgError, match=rf"t\.cfg:\d+: \[\w+\] {key}: '{value}' has a comment "
                                       r"after the value"):
        dn.parse_network_cfg(write(tmp_path, NET + body))


@pytest.mark.parametrize("line,key,found", [
    ("filters=١٦", "filters", "'١٦'"),                 # Arabic-Indic digits
    ("filters=１６", "filters", "'１６'"),              # fullwidth digits
    ("size=1_0", "size", "'1_0'"),                     # Python's digit separator
    ("filters=0x10", "filters", "'0x10'"),
])
def test_only_ascii_digits_are_numbers(tmp_path, line, key, found):
    with pytest.raises(CfgError, match=rf"\[convolutional\] {key}: expected an integer, found {found}"):
        dn.parse_network_cfg(write(tmp_path, NET + "[convolutional]\n" + line + "\n"))


def test_only_ascii_digits_in_floats_and_lists(tmp_path):
    with pytest.raises(CfgError, match=r"\[net\] learning_rate: expected a number, found '０\.１'"):
        dn.parse_network_cfg(write(tmp_path, NET + "learning_rate=０.１\n[maxpool]\n"))
    with pytest.raises(CfgError, match=r"\[route\] layers: expected a list of integers, found '-1,٣'"):
        dn.parse_network_cfg(write(tmp_path, NET + "[maxpool]\n[route]\nlayers=-1,٣\n"))


def test_a_cfg_that_is_not_utf8(tmp_path):
    p = tmp_path / "t.cfg"
    p.write_bytes(NET.encode() + b"[convolutional]\nfilters=\xff\n")
    with pytest.raises(CfgError, match=rf"t\.cfg:8: not a UTF-8 text file: byte {len(NET) + 24} "
                                       r"is 0xff"):
        dn.parse_network_cfg(p)


def test_integers_beyond_a_c_int(tmp_path):
    with pytest.raises(CfgError, match=r"\[convolutional\] filters: 4294967312 does not fit a C int"):
        dn.parse_network_cfg(write(tmp_path, NET + "[convolutional]\nfilters=4294967312\n"))
