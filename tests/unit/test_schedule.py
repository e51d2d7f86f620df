"""Learning-rate policies, seen / batch_num, and the update schedule of train_datum with
subdivisions > 1 and burn_in (gradients accumulate over subdivisions; one update per full
cfg batch; momentum carries over)."""
import math

import numpy as np
import pytest

import darknumba as dn

NET = """[net]
batch={batch}
subdivisions={subdivisions}
width=6
height=6
channels=3
momentum=0.9
decay=0.0005
learning_rate={lr}
burn_in={burn_in}
power={power}
policy={policy}
{extra}
"""

LAYERS = """
[convolutional]
batch_normalize=1
filters=4
size=3
stride=1
pad=1
activation=leaky

[convolutional]
filters=3
size=1
stride=1
pad=1
activation=linear

[avgpool]

[connected]
output=3
activation=linear

[softmax]
"""


def make_net(tmp_path, layers="", *, batch=4, subdivisions=1, lr=0.1, burn_in=0, power=4,
             policy="constant", extra=""):
    cfg = tmp_path / "net.cfg"
    cfg.write_text(NET.format(batch=batch, subdivisions=subdivisions, lr=lr, burn_in=burn_in,
                              power=power, policy=policy, extra=extra) + layers)
    return dn.load_network(cfg)


def rate_at(net, batch_num):
    net.seen = batch_num * net.batch * net.subdivisions
    return net.current_rate()


# -- policies ------------------------------------------------------------------------------
POLICIES = [
    ("constant", "", lambda b: 0.1),
    ("step", "step=3\nscale=0.5", lambda b: 0.1 * 0.5 ** (b // 3)),
    ("steps", "steps=2,5,9\nscales=.1,.5,2", lambda b: 0.1 * (0.1 if b >= 2 else 1)
     * (0.5 if b >= 5 else 1) * (2 if b >= 9 else 1)),
    ("exp", "gamma=0.9", lambda b: 0.1 * 0.9 ** b),
    ("poly", "max_batches=20", lambda b: 0.1 * (1 - b / 20) ** 4),
    ("sig", "gamma=0.7\nstep=6", lambda b: 0.1 / (1 + math.exp(0.7 * (b - 6)))),
]


@pytest.mark.parametrize("policy,extra,expected", POLICIES, ids=[p[0] for p in POLICIES])
def test_policies(tmp_path, policy, extra, expected):
    net = make_net(tmp_path, LAYERS, policy=policy, extra=extra)
    for b in range(16):
        assert rate_at(net, b) == pytest.approx(expected(b), rel=2e-6, abs=1e-12), f"batch {b}"


def test_burn_in_then_policy(tmp_path):
    net = make_net(tmp_path, LAYERS, policy="steps", extra="steps=6\nscales=.1", burn_in=4,
                   power=2)
    got = [rate_at(net, b) for b in range(8)]
    want = [0.1 * (b / 4) ** 2 for b in range(4)] + [0.1, 0.1, 0.01, 0.01]
    np.testing.assert_allclose(got, want, rtol=2e-7)
    # Darknet's numbers: 0.01 * (1/10)^4 on the first batch with burn_in=10
    net = make_net(tmp_path, LAYERS, lr=0.01, burn_in=10)
    assert rate_at(net, 1) == pytest.approx(1e-6, rel=1e-6)


def test_random_policy_bounds(tmp_path):
    net = make_net(tmp_path, LAYERS, policy="random", power=2)
    rates = [rate_at(net, b) for b in range(50)]
    assert all(0 <= r <= 0.1 for r in rates) and len(set(rates)) > 10


def test_sig_unsigned_wrap_under_compat(tmp_path):
    """Darknet subtracts `step` from an unsigned batch number: before `step` the exponent is
    huge, so with gamma > 0 the rate is 0 there (compat="darknet-cpu" only)."""
    cfg = tmp_path / "net.cfg"
    cfg.write_text(NET.format(batch=2, subdivisions=1, lr=0.1, burn_in=0, power=4, policy="sig",
                              extra="gamma=0.7\nstep=6") + LAYERS)
    net = dn.load_network(cfg, compat="darknet-cpu")
    assert rate_at(net, 5) == 0.0
    assert rate_at(net, 7) == pytest.approx(0.1 / (1 + math.exp(0.7)), rel=2e-7)


def test_poly_matches_c(tmp_path):
    """cls-small's first update: 0.1 * (1 - 1/1000)^4 = 0.0996006057 in float32."""
    net = make_net(tmp_path, LAYERS, policy="poly", extra="max_batches=1000")
    assert np.float32(rate_at(net, 1)) == np.float32(0.0996006057)


# -- the update schedule ---------------------------------------------------------------------
PARAMS = ("weights", "biases", "scales")
UPDATES = {"weights": "weight_updates", "biases": "bias_updates", "scales": "scale_updates"}


def params(net):
    return {(i, a): getattr(l, a).copy() for i, l in enumerate(net.layers)
            for a in PARAMS + tuple(UPDATES.values()) if getattr(l, a, None) is not None}


def test_subdivisions_accumulate_and_update_once_per_batch(tmp_path):
    """batch=4, subdivisions=2 (2 images per datum), burn_in=3: seen grows by 2 per datum,
    weights change only on even datums, with rate lr*(batch_num/3)^4 and the sum of both
    datums' gradients; momentum carries the rest. An independent numpy optimizer driven by
    the per-datum gradients follows the same trajectory."""
    net = make_net(tmp_path, LAYERS, batch=4, subdivisions=2, burn_in=3, lr=0.1)
    shadow = make_net(tmp_path, LAYERS, batch=4, subdivisions=2, burn_in=3, lr=0.1)
    assert net.batch == 2
    rng = np.random.default_rng(0)
    # the numpy optimizer's state: params and momentum buffers
    ref = {k: v.astype(np.float64) for k, v in params(shadow).items()}
    B, mom, decay = 4, 0.9, 0.0005
    updates = 0
    for step in range(1, 9):
        x = rng.uniform(0, 1, net.batch * net.inputs).astype(np.float32)
        truth = np.eye(3, dtype=np.float32)[rng.integers(0, 3, net.batch)].ravel()
        before = params(net)
        net.train_datum(x, truth)
        assert net.seen == 2 * step
        # the gradient of this datum alone, at the reference parameters
        for (i, a), v in ref.items():
            if a in PARAMS:
                getattr(shadow.layers[i], a)[:] = v
            else:
                getattr(shadow.layers[i], a)[:] = 0
        shadow.forward(x, train=True, truth=truth)
        shadow.backward()
        for (i, a) in ref:
            if a not in PARAMS:
                ref[(i, a)] += getattr(shadow.layers[i], a)
        if step % 2:
            after = params(net)
            for k in before:
                if k[1] in PARAMS:
                    assert np.array_equal(before[k], after[k]), f"{k} changed on datum {step}"
            assert net.t == updates
        else:
            updates += 1
            assert net.t == updates
            batch_num = step * 2 // B
            rate = 0.1 * min(batch_num / 3, 1) ** 4
            for (i, a) in list(ref):
                if a not in PARAMS:
                    continue
                u = ref[(i, UPDATES[a])]
                if a == "weights":
                    u += -decay * B * ref[(i, a)]
                ref[(i, a)] += rate / B * u
                u *= mom
        for k, v in params(net).items():
            np.testing.assert_allclose(v, ref[k], rtol=2e-5, atol=1e-7,
                                       err_msg=f"layer {k[0]} {k[1]} after datum {step}")
    assert updates == 4


def test_update_uses_full_cfg_batch(tmp_path):
    """lr / (batch * subdivisions): the same datum and gradient with subdivisions=1 and 2
    changes the biases by rates over 2 and 4 (burn-in off, constant policy)."""
    deltas = []
    for subdivisions, n in ((1, 1), (2, 2)):
        net = make_net(tmp_path, LAYERS, batch=2 * subdivisions, subdivisions=subdivisions)
        x = np.linspace(0, 1, net.batch * net.inputs, dtype=np.float32)
        truth = np.tile(np.eye(3, dtype=np.float32)[0], net.batch)
        b0 = net.layers[3].biases.copy()
        for _ in range(n):
            net.train_datum(x, truth)
        deltas.append(net.layers[3].biases - b0)
    # subdivisions=2 saw the same datum twice (twice the gradient) and divides by 4, not 2
    np.testing.assert_allclose(deltas[1], deltas[0], rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("compat", [None, "darknet-cpu"])
def test_adam(tmp_path, compat):
    """adam=1: Darknet's Adam (decay folded into the gradient, bias-corrected moments, the rate
    not divided by the batch, updates zeroed) on weights, biases and BN scales, two steps.
    compat="darknet-cpu" ignores adam=1 like Darknet's CPU build (plain SGD)."""
    extra = "adam=1\nB1=0.8\nB2=0.99\neps=1e-6"
    cfg = tmp_path / "net.cfg"
    cfg.write_text(NET.format(batch=2, subdivisions=1, lr=0.01, burn_in=0, power=4,
                              policy="constant", extra=extra) + LAYERS)
    net = dn.load_network(cfg, compat=compat)
    shadow = dn.load_network(cfg)
    rng = np.random.default_rng(1)
    for l in net.layers:
        if getattr(l, "weights", None) is not None and l.type != "yolo":
            l.weights[:] = rng.normal(0, 0.3, l.weights.size)
    ref = {k: v.astype(np.float64) for k, v in params(net).items() if k[1] in PARAMS}
    m = {k: 0.0 for k in ref}
    v = {k: 0.0 for k in ref}
    for t in (1, 2):
        x = rng.uniform(0, 1, net.batch * net.inputs).astype(np.float32)
        truth = np.eye(3, dtype=np.float32)[[0, 2]].ravel()
        for (i, a), val in ref.items():
            getattr(shadow.layers[i], a)[:] = val
            getattr(shadow.layers[i], UPDATES[a])[:] = 0
        shadow.forward(x, train=True, truth=truth)
        shadow.backward()
        net.train_datum(x, truth)
        for (i, a), w in list(ref.items()):
            g = getattr(shadow.layers[i], UPDATES[a]).astype(np.float64)
            if compat is None:
                g = g - 0.0005 * 2 * w
                m[(i, a)] = 0.8 * m[(i, a)] + 0.2 * g
                v[(i, a)] = 0.99 * v[(i, a)] + 0.01 * g * g
                mhat, vhat = m[(i, a)] / (1 - 0.8 ** t), v[(i, a)] / (1 - 0.99 ** t)
                ref[(i, a)] = w + 0.01 * mhat / (np.sqrt(vhat) + 1e-6)
            else:
                if a == "weights":
                    g = g - 0.0005 * 2 * w
                m[(i, a)] = g + 0.9 * m[(i, a)]            # SGD momentum buffer
                ref[(i, a)] = w + 0.01 / 2 * m[(i, a)]
        for (i, a), want in ref.items():
            np.testing.assert_allclose(getattr(net.layers[i], a), want, rtol=1e-4, atol=1e-6,
                                       err_msg=f"layer {i} {a}, step {t}")
            if compat is None:
                assert not getattr(net.layers[i], UPDATES[a]).any()


def _ab_net(tmp_path, net_keys):
    cfg = tmp_path / "ab.cfg"
    cfg.write_text("[net]\nbatch=2\nwidth=4\nheight=4\nchannels=1\nmosaic=0\n" + net_keys +
                   "[convolutional]\nfilters=1\nsize=1\n")
    return dn.parse_network_cfg(cfg)


def test_alexeyab_sgdr_policy_follows_its_cosine_cycles(tmp_path):
    net = _ab_net(tmp_path, "learning_rate=0.01\nlearning_rate_min=0.001\npolicy=sgdr\n"
                            "sgdr_cycle=10\nsgdr_mult=2\nmax_batches=100\n")
    assert net.dialect == "alexeyab" and net.policy == "sgdr"
    got = []
    for b in (0, 5, 10, 11, 20, 30, 31):
        net.seen = b * net.batch * net.subdivisions
        got.append(net.current_rate())
    # AlexeyAB: cycles [0, 10], (10, 30], (30, 70]: the cycle restarts after its length
    def ref(b):
        start, cycle = 0, 10
        while start + cycle < b:
            start, cycle = start + cycle, cycle * 2
        return 0.001 + 0.5 * 0.009 * (1 + math.cos((b - start) * 3.14159265 / cycle))
    np.testing.assert_allclose(got, [ref(b) for b in (0, 5, 10, 11, 20, 30, 31)], rtol=1e-6)
    assert got[0] == pytest.approx(0.01) and got[2] == pytest.approx(0.001)


def test_alexeyab_policy_names(tmp_path):
    net = _ab_net(tmp_path, "policy=sigmoid\ngamma=0.5\nstep=4\n")
    assert net.policy == "sig"
    net.seen = 0                        # AlexeyAB's batch_num - step is signed: no wrap
    assert net.current_rate() == pytest.approx(0.001 / (1 + math.exp(0.5 * -4)), rel=1e-6)
    with pytest.raises(dn.CfgError, match="calls it 'sigmoid'"):
        _ab_net(tmp_path, "policy=sig\n")
    cfg = tmp_path / "pj.cfg"
    cfg.write_text("[net]\nwidth=4\nheight=4\nchannels=1\npolicy=sgdr\n"
                   "[convolutional]\nfilters=1\nsize=1\n")
    with pytest.raises(dn.CfgError, match="AlexeyAB's name"):
        dn.parse_network_cfg(cfg, dialect="pjreddie")


def test_alexeyab_net_keys_are_kept_with_its_defaults(tmp_path):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # none of them is an "unused field"
        net = _ab_net(tmp_path, "letter_box=1\nema_alpha=0.9998\nflip=0\nblur=1\n"
                                "label_smooth_eps=0.1\nadam=1\n")
    assert (net.letter_box, net.ema_alpha, net.flip, net.blur, net.mosaic) == (1, 0.9998, 0, 1, 0)
    assert net.label_smooth_eps == pytest.approx(0.1) and net.gaussian_noise == 0
    assert net.eps == pytest.approx(1e-6)            # AlexeyAB's adam eps default


def test_alexeyab_sgdr_with_steps_and_no_scales(tmp_path):
    """AlexeyAB's parser reads sgdr's steps (for seq_scales) and takes each scale as 1."""
    net = _ab_net(tmp_path, "policy=sgdr\nsteps=10,20\nmax_batches=100\nsgdr_cycle=10\n")
    assert net.policy == "sgdr" and net.steps == [10, 20] and net.scales == [1.0, 1.0]
