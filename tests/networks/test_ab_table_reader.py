"""tests/ab_table.py, the reader of AlexeyAB's printed layer tables, and the verdicts of
ab_table.check: rows read field by field, every recorded table read whole, and a
difference turned into an expected failure only when darknumba says what it lacks."""
import json

import pytest
from ab_table import check, parse_row, parse_table
from conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "ab"


def test_every_recorded_table_reads_one_row_per_layer():
    index = json.loads((FIXTURES / "tables" / "INDEX.json").read_text())
    paths = sorted((FIXTURES / "tables").glob("*.txt")) + sorted(
        (FIXTURES / "tables-cfg").glob("*.txt")) + sorted(FIXTURES.glob("ab-small-*/table.txt"))
    assert len(paths) == 95 + 8 + 3
    for path in paths:
        table = parse_table(path.read_text())
        info = index.get(path.stem, {"built": True})
        if info["built"]:
            assert table.parsed[0] == len(table.rows), path
            assert table.total_bflops is not None


@pytest.mark.parametrize("text,kind,fields", [
    ("conv     32/  32  3 x 3/ 1    208 x 208 x  32 ->  208 x 208 x  32 0.025 BF", "conv",
     dict(variant="conv", filters=32, groups=32, size=3, stride_x=1, stride_y=1, dilation=1,
          w=208, h=208, c=32, out_w=208, out_h=208, out_c=32, bflops=0.025)),
    ("conv      8       3 x 3/ 1(2)  16 x  16 x   8 ->   16 x  16 x   8 0.000 BF", "conv",
     dict(filters=8, groups=1, size=3, stride_x=1, stride_y=1, dilation=2, w=16, out_c=8)),
    ("conv      8       3x 3/ 2x 1    8 x   8 x   8 ->    4 x   8 x   8 0.000 BF", "conv",
     dict(size=3, stride_x=2, stride_y=1, out_w=4, out_h=8)),
    ("convX    64       3 x 3/ 2    448 x 448 x  32 ->  224 x 224 x  64 0.058 BF", "conv",
     dict(variant="convX", filters=64, stride_x=2, bflops=0.058)),
    ("conv   1024       3 x 3/ 1     28 x  28 x 512 ->   28 x  28 x1024 7.399 BF", "conv",
     dict(filters=1024, c=512, out_c=1024, bflops=7.399)),
    ("max               13x13/ 1     13 x  13 x 256 ->   13 x  13 x 256 0.007 BF", "pool",
     dict(variant="max", size=13, stride_x=1, stride_y=1, c=256, out_w=13, bflops=0.007)),
    ("max-depth          1x 1/ 1     16 x  16 x   8 ->   16 x  16 x   4 0.000 BF", "pool",
     dict(variant="max-depth", size=1, c=8, out_c=4)),
    ("avg                2x 2/ 2     16 x  16 x   8 ->    8 x   8 x   8 0.000 BF", "pool",
     dict(variant="avg", size=2, stride_x=2, out_w=8)),
    ("avg                            16 x  16 x   8 ->      8", "avgpool",
     dict(w=16, h=16, c=8, out_c=8)),
    ("route  2 \t\t                       1/2 ->  104 x 104 x  32 ", "route",
     dict(layers=[2], group_id=1, groups=2, out_w=104, out_c=32)),
    ("route  112 110 108 107 \t                   ->   19 x  19 x2048 ", "route",
     dict(layers=[112, 110, 108, 107], group_id=0, groups=1, out_c=2048)),
    ("Shortcut Layer: 7, 4,  wt = 2, wn = 2, outputs:  16 x  16 x   8 0.000 BF", "shortcut",
     dict(layers=[7, 4], weights_type=2, weights_normalization=2, out_w=16, out_c=8)),
    ("scale Layer: 9", "scale", dict(index=9)),
    ("upsample                 2x    13 x  13 x 128 ->   26 x  26 x 128", "upsample",
     dict(variant="upsample", stride=2, w=13, out_w=26, out_c=128)),
    ("connected                            9216  ->  4096", "connected",
     dict(inputs=9216, outputs=4096)),
    ("dropout    p = 0.500        12544  ->   12544", "dropout",
     dict(probability=0.5, inputs=12544, outputs=12544)),
    ("reorg_old              / 2    26 x  26 x  64   ->    13 x  13 x 256", "reorg",
     dict(variant="reorg_old", stride=2, w=26, c=64, out_w=13, out_c=256)),
    ("Crop Layer: 32 x 32 -> 28 x 28 x 3 image", "crop", dict(h=32, w=32, out_h=28, out_w=28, c=3)),
    ("Local Layer: 7 x 7 x 1024 image, 256 filters -> 7 x 7 x 256 image", "local",
     dict(h=7, c=1024, filters=256, out_c=256)),
    ("RNN Layer: 256 inputs, 1024 outputs", "recurrent",
     dict(variant="RNN", inputs=256, outputs=1024)),
    ("implicit Layer: 8 x 1 \t mean=0.00, std=0.20 ", "implicit", dict(filters=8, atoms=1)),
    ("yolo", "yolo", {}),
    ("detection", "region", {}),
])
def test_rows_read_field_by_field(text, kind, fields):
    got_kind, got = parse_row(text)
    assert got_kind == kind
    assert {k: got[k] for k in fields} == fields


@pytest.mark.parametrize("text", ["type: Using default 'sse'", "mask_scale: Using default '1.0'",
                                  "nms_kind: greedynms (1), beta = 0.600000 ",
                                  " (  16 x  16 x   8) + (  16 x  16 x   4) ", " reorg_old "])
def test_messages_are_not_rows(text):
    assert parse_row(text) is None


def test_chunks_take_the_row_after_messages_and_the_blur_of_antialiasing():
    text = """   layer   filters  size/strd(dil)      input                output
   0 conv      8       3 x 3/ 1     12 x  12 x   3 ->   12 x  12 x   8 0.000 BF
   1 max                2x 2/ 1     12 x  12 x   8 ->   12 x  12 x   8 0.000 BF
AA:  conv      8/   8  3 x 3/ 2     12 x  12 x   8 ->    6 x   6 x   8 0.000 BF
   2 
 reorg_old 
reorg_old              / 2     6 x   6 x   8   ->     3 x   3 x  32
   3 connected                             288  ->    10
   4 type: Using default 'sse'
cost                                              10
Total BFLOPS 0.001 
ABREC parsed 5 layers, w=12 h=12 c=3
"""
    t = parse_table(text)
    assert [r.kind for r in t.rows] == ["conv", "pool", "reorg", "connected", "cost"]
    assert t.rows[1].fields["blur"]["out_w"] == 6 and t.rows[1].fields["out_w"] == 12
    assert t.rows[2].fields["out_c"] == 32 and t.rows[4].fields["inputs"] == 10
    assert t.parsed == (5, 12, 12, 3) and t.total_bflops == 0.001


# -- verdicts --------------------------------------------------------------------------------
def _copy(tmp_path, cfg_edit=None, table_edit=None):
    """cfg/yolov7-tiny.cfg and AlexeyAB's table of it, edited."""
    cfg = (ROOT / "cfg" / "yolov7-tiny.cfg").read_text()
    table = (FIXTURES / "tables-cfg" / "yolov7-tiny.txt").read_text()
    if cfg_edit:
        cfg = cfg_edit(cfg)
    if table_edit:
        table = table_edit(table)
    (tmp_path / "net.cfg").write_text(cfg)
    (tmp_path / "table.txt").write_text(table)
    return tmp_path / "net.cfg", tmp_path / "table.txt"


def _layer9_is_3x3(table):
    old = "   9 max                2x 2/ 2    104 x 104 x  64 ->   52 x  52 x  64 0.001 BF"
    assert old in table
    return table.replace(old, old.replace("2x 2/ 2", "3x 3/ 2"))


def _unknown_key_in_layer9(cfg):
    return cfg.replace("# 9\n[maxpool]\n", "# 9\n[maxpool]\nfrobnicate=3\n")


def test_verdict_pass(tmp_path):
    check(*_copy(tmp_path))


def test_verdict_fail_when_nothing_explains_the_difference(tmp_path):
    with pytest.raises(pytest.fail.Exception, match=r"layer 9 \[maxpool\]: size: ours 2, "
                                                    r"AlexeyAB 3"):
        check(*_copy(tmp_path, table_edit=_layer9_is_3x3))


def test_verdict_xfail_names_the_unused_key_of_the_first_differing_layer(tmp_path):
    with pytest.raises(pytest.xfail.Exception, match=r"layer 9 uses \[maxpool\] frobnicate"):
        check(*_copy(tmp_path, _unknown_key_in_layer9, _layer9_is_3x3))


def test_an_unused_key_elsewhere_explains_nothing(tmp_path):
    edit = lambda cfg: cfg.replace("# 8\n[convolutional]\n", "# 8\n[convolutional]\nfrobnicate=3\n")
    with pytest.raises(pytest.fail.Exception, match="layer 9"):
        check(*_copy(tmp_path, edit, _layer9_is_3x3))


def test_verdict_xfail_quotes_the_cfg_error(tmp_path):
    edit = lambda cfg: cfg.replace("# 9\n[maxpool]\n", "# 9\n[frobnicator]\n")
    with pytest.raises(pytest.xfail.Exception, match=r"unknown section type \[frobnicator\]"):
        check(*_copy(tmp_path, edit))
