"""The named-behaviour object: each dialect x compat pair gives its documented fields, and
no module outside dialect.py asks which compat mode is on by comparing strings."""
import re
from pathlib import Path

import numpy as np
import pytest

import darknumba as dn
from darknumba.dialect import quirks_for

SRC = Path(dn.__file__).parent
CPU_QUIRKS = ("delta_overwrite_1x1", "strided_1x1_misread", "batchnorm_layer_not_updated",
              "region_no_backward", "rnn_late_delta", "two_pass_bn_stats", "adam_ignored",
              "sig_unsigned_wrap")
AB_CPU_QUIRKS = ("col2im_zeroes_delta", "sam_overwrites_from_delta", "bn_bias_not_updated",
                 "antialias_no_blur_backward", "implicit_not_updated", "activate_lacks_ab_cases",
                 "bn_delta_eps_outside_sqrt", "train_unset_not_updated")


@pytest.mark.parametrize("compat", [None, "darknet-cpu"])
def test_alexeyab_region_is_the_dialects_not_a_cpu_quirk(compat):
    """AlexeyAB's flattened [region] is what both of its builds compute: on in its dialect
    with or without compat, never in pjreddie's."""
    assert quirks_for("alexeyab", compat).region_alexeyab
    assert not quirks_for("pjreddie", compat).region_alexeyab


def test_pjreddie_default_has_no_cpu_quirks():
    q = quirks_for()
    assert (q.dialect, q.compat) == ("pjreddie", None)
    assert not any(getattr(q, k) for k in CPU_QUIRKS)
    assert (q.bn_epsilon_inside_sqrt, q.bn_rolling_momentum, q.weights_version) == \
        (False, 0.99, (0, 2, 0))


def test_darknet_cpu_turns_every_cpu_quirk_on():
    q = quirks_for("pjreddie", "darknet-cpu")
    assert all(getattr(q, k) for k in CPU_QUIRKS) and q.overwrite_delta
    assert not any(getattr(q, k) for k in AB_CPU_QUIRKS)


@pytest.mark.parametrize("compat", [None, "darknet-cpu"])
def test_alexeyab_cpu_quirks_only_under_compat(compat):
    """Both dialects' [activation], [batchnorm], [normalization] and [reorg] copy their delta
    down; AlexeyAB's CPU bugs come on with compat only."""
    q = quirks_for("alexeyab", compat)
    on = compat is not None
    assert all(getattr(q, k) == on for k in AB_CPU_QUIRKS) and q.overwrite_delta == on


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


def _dialect_switches(path: Path) -> list[str]:
    """Where a module names a dialect as a string literal ("pjreddie", "alexeyab": a compare,
    a dict key, a default) or compares a `.dialect`/`dialect`/DIALECTS constant at all."""
    where = path.relative_to(SRC) if path.is_relative_to(SRC) else path.name
    import ast
    names = {"pjreddie", "alexeyab"}
    constants = {"PJREDDIE", "ALEXEYAB", "DEFAULT_DIALECT"}
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and node.value in names:
            found.append(f"{where}:{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Compare) and not all(
                isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):   # `dialect is None`
            for side in (node.left, *node.comparators):
                name = side.attr if isinstance(side, ast.Attribute) else getattr(side, "id", None)
                if name in constants or name == "dialect":
                    found.append(f"{where}:{node.lineno}: compares {name}")
    return found


def test_dialect_reaches_code_only_through_quirks():
    """Outside dialect.py nobody asks which dialect a network follows: each difference is a
    named field of Quirks (or Defaults). A user-given name is passed to dialect.py as it is."""
    offenders = [hit for p in sorted(SRC.rglob("*.py")) if p.name != "dialect.py"
                 for hit in _dialect_switches(p)]
    assert offenders == []


def test_dialect_switch_finder_sees_compares(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text('x = net.dialect == "alexeyab"\ny = {PJREDDIE: 1}\nz = kind != ALEXEYAB\n'
                   'ok = dialect is None\n')
    assert sorted(h.split(":", 1)[1] for h in _dialect_switches(bad)) == [
        "1: 'alexeyab'", "1: compares dialect", "3: compares ALEXEYAB"]


BASE = "[net]\nwidth=8\nheight=8\nchannels=3\n"


def _cfg(tmp_path, body, name="n.cfg"):
    p = tmp_path / name
    p.write_text(BASE + body)
    return p


@pytest.mark.parametrize("body, what", [
    ("[convolutional]\nfilters=2\nsize=1\nactivation=mish\n", "activation=mish"),
    ("[convolutional]\nfilters=2\nsize=1\n[route]\nlayers=-1\ngroups=2\ngroup_id=1\n",
     "[route] groups=2"),
    ("[conv]\nfilters=2\nsize=3\npad=1\ndilation=1\nactivation=leaky\n", "[conv] dilation=1"),
])
def test_ab_only_keys_choose_alexeyab_and_say_where(tmp_path, body, what):
    from darknumba.cfg import read_cfg
    from darknumba.dialect import choose_dialect
    cfg = _cfg(tmp_path, body)
    dialect, why = choose_dialect(read_cfg(str(cfg)))
    assert dialect == "alexeyab" and what in why and f"{cfg}:" in why


def test_ab_only_net_key_and_section(tmp_path):
    from darknumba.cfg import read_cfg
    from darknumba.dialect import choose_dialect
    p = tmp_path / "m.cfg"
    p.write_text("[net]\nwidth=8\nheight=8\nchannels=3\nletter_box=1\n")
    assert choose_dialect(read_cfg(str(p)))[0] == "alexeyab"
    p.write_text(BASE + "[sam]\nfrom=-1\n")
    d, why = choose_dialect(read_cfg(str(p)))
    assert d == "alexeyab" and "[sam]" in why


def test_weights_header_0_2_5_is_a_hint_and_the_option_wins(tmp_path):
    cfg = _cfg(tmp_path, "[convolutional]\nfilters=2\nsize=1\n")
    net = dn.parse_network_cfg(cfg)
    assert net.dialect == "pjreddie" and "nothing in the cfg" in net.dialect_reason
    net.quirks = quirks_for("alexeyab")
    dn.save_weights(net, tmp_path / "ab.weights")           # AlexeyAB writes 0.2.5
    assert (tmp_path / "ab.weights").read_bytes()[:12] == \
        bytes([0, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0])
    loaded = dn.load_network(cfg, tmp_path / "ab.weights")
    assert loaded.dialect == "alexeyab" and "0.2.5" in loaded.dialect_reason
    assert loaded.layers[0].quirks.bn_epsilon_inside_sqrt
    forced = dn.load_network(cfg, tmp_path / "ab.weights", dialect="pjreddie")
    assert forced.dialect == "pjreddie" and forced.dialect_reason == "asked for"
    dn.save_weights(forced, tmp_path / "pj.weights")
    assert (tmp_path / "pj.weights").read_bytes()[8:12] == bytes(4)


def test_alexeyab_batch_norm_forward_and_rolling_statistics(tmp_path):
    """AlexeyAB's forward_batchnorm_layer: (x - m) / sqrt(v + 1e-5), rolling 0.9 / 0.1."""
    cfg = _cfg(tmp_path, "[convolutional]\nbatch_normalize=1\nfilters=3\nsize=1\n"
                         "activation=linear\n")
    rng = np.random.default_rng(3)
    out = {}
    for dialect in ("pjreddie", "alexeyab"):
        net = dn.parse_network_cfg(cfg, dialect=dialect, batch=2)
        l = net.layers[0]
        l.weights[:] = rng.standard_normal(l.weights.size)
        l.scales[:], l.biases[:] = [1.5, 0.5, 2.0], [0.1, -0.2, 0.3]
        l.rolling_mean[:], l.rolling_variance[:] = [0.2, -0.1, 0.0], [1e-4, 4e-4, 2.0]
        x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
        y = net.predict(x)
        conv = np.einsum("oc,bchw->bohw", l.weights.reshape(3, 3), x.astype(np.float64))
        m = l.rolling_mean[None, :, None, None].astype(np.float64)
        v = l.rolling_variance[None, :, None, None].astype(np.float64)
        d = np.sqrt(v + 1e-5) if dialect == "alexeyab" else np.sqrt(v) + 1e-6
        ref = (conv - m) / d * l.scales[None, :, None, None] + l.biases[None, :, None, None]
        np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())
        out[dialect] = y
        rm0 = l.rolling_mean.copy()
        net.forward(x, train=True)
        keep = 0.9 if dialect == "alexeyab" else 0.99
        np.testing.assert_allclose(l.rolling_mean, keep * rm0 + (1 - keep) * l.mean, rtol=1e-6,
                                   atol=1e-7)
    assert np.abs(out["alexeyab"] - out["pjreddie"]).max() > 1e-2   # the dialects differ here
