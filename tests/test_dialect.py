"""The named-behaviour object: each dialect x compat pair gives its documented fields, and
no module outside dialect.py asks which compat mode is on by comparing strings."""
import re
from pathlib import Path

import pytest

import darknumba as dn
from darknumba.dialect import quirks_for

SRC = Path(dn.__file__).parent
CPU_QUIRKS = ("delta_overwrite_1x1", "strided_1x1_misread", "overwrite_delta",
              "region_no_backward", "rnn_late_delta", "two_pass_bn_stats", "adam_ignored",
              "sig_unsigned_wrap")


def test_pjreddie_default_has_no_cpu_quirks():
    q = quirks_for()
    assert (q.dialect, q.compat) == ("pjreddie", None)
    assert not any(getattr(q, k) for k in CPU_QUIRKS)
    assert (q.bn_epsilon_inside_sqrt, q.bn_rolling_momentum, q.weights_version) == \
        (False, 0.99, (0, 2, 0))


def test_darknet_cpu_turns_every_cpu_quirk_on():
    q = quirks_for("pjreddie", "darknet-cpu")
    assert all(getattr(q, k) for k in CPU_QUIRKS)


@pytest.mark.parametrize("compat", [None, "darknet-cpu"])
def test_alexeyab_has_its_batch_norm_and_none_of_pjreddies_cpu_quirks(compat):
    q = quirks_for("alexeyab", compat)
    assert not any(getattr(q, k) for k in CPU_QUIRKS)
    assert (q.bn_epsilon_inside_sqrt, q.bn_rolling_momentum, q.weights_version) == \
        (True, 0.9, (0, 2, 5))


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="dialect"):
        quirks_for("hank")
    with pytest.raises(ValueError, match="compat"):
        quirks_for(None, "darknet-gpu")


def test_network_carries_its_quirks(tmp_path):
    cfg = tmp_path / "n.cfg"
    cfg.write_text("[net]\nwidth=4\nheight=4\nchannels=1\n[convolutional]\nfilters=1\nsize=1\n")
    net = dn.parse_network_cfg(cfg, compat="darknet-cpu")
    assert net.quirks is net.layers[0].quirks and net.compat == "darknet-cpu"
    assert net.layers[0].quirks.delta_overwrite_1x1


def test_no_compat_string_compares_outside_dialect():
    pattern = re.compile(r"""(==|!=)\s*["']darknet-cpu["']""")
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if p.name != "dialect.py" and pattern.search(p.read_text())]
    assert offenders == []
