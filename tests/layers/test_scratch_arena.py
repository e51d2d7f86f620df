"""The buffers a layer's step uses together (Scratch.parts) share one arena: disjoint aligned
parts, no allocation once the arena fits, and a training step of a small network ends with
one arena as large as its largest step's set (not the sum of every buffer's largest), with
the same weights as every part allocated on its own."""
import numpy as np
import pytest

from darknumba.layers.base import Scratch


def test_parts_are_disjoint_aligned_and_reused():
    s = Scratch()
    a, b, c = s.parts(5, 33, 1)
    assert [p.size for p in (a, b, c)] == [5, 33, 1]
    for p in (a, b, c):
        assert p.ctypes.data % 64 == s._arena.ctypes.data % 64
    a[:], b[:], c[:] = 1.0, 2.0, 3.0                  # no part writes over another
    assert (a == 1).all() and (b == 2).all() and (c == 3).all()
    arena = s._arena
    assert arena.size == 16 + 48 + 16
    x, y = s.parts(40, 30)                          # 40 + 32 floats fit: the same memory
    assert s._arena is arena and np.shares_memory(x, arena) and np.shares_memory(y, arena)
    assert s.in_arena(y) and not s.in_arena(np.zeros(3, np.float32))
    s.parts(200)                                    # a larger set: the arena grows to it alone
    assert s._arena.size == 208 and s.nbytes == 208 * 4


@pytest.fixture(autouse=True)
def small_layers_pay(monkeypatch):
    """The small layers count as large enough for Winograd in training."""
    import darknumba.layers.conv_plan as cp
    monkeypatch.setattr(cp, "TRAIN_MIN_BFLOPS", 0.0)


def small_cfg(tmp_path):
    """Winograd (20 -> 40 at 30x30), a batched 3x3 GEMM (40 -> 36 pad 0), a 1x1 and a strided
    3x3: the forward and backward sets of both kinds of step."""
    conv = "[convolutional]\nbatch_normalize={bn}\nfilters={n}\nsize={k}\nstride={s}\npad={p}\n" \
           "activation=leaky\n"
    cfg = tmp_path / "a.cfg"
    cfg.write_text("[net]\nbatch=2\nwidth=30\nheight=30\nchannels=20\nlearning_rate=0.01\n"
                   "momentum=0.9\ndecay=0.0005\n"
                   + conv.format(bn=1, n=40, k=3, s=1, p=1)
                   + conv.format(bn=0, n=36, k=3, s=1, p=0)
                   + conv.format(bn=1, n=24, k=1, s=1, p=0)
                   + conv.format(bn=1, n=8, k=3, s=2, p=1)
                   + "[cost]\ntype=sse\n")
    return cfg


def train_two_steps(cfg):
    import darknumba as dn
    net = dn.load_network(cfg, batch=2, exact=False)
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (2, 20, 30, 30)).astype(np.float32)
    truth = rng.uniform(0, 1, (2, net.outputs)).astype(np.float32)
    net.train_datum(x, truth)
    arena = net.scratch._arena
    net.train_datum(x, truth)
    return net, arena


def test_training_step_holds_one_arena_of_its_largest_set(tmp_path, monkeypatch):
    sets = []
    parts = Scratch.parts

    def recording(self, *sizes):
        sets.append(sum(-(-n // Scratch.ALIGN) * Scratch.ALIGN for n in sizes))
        return parts(self, *sizes)
    monkeypatch.setattr(Scratch, "parts", recording)
    net, arena = train_two_steps(small_cfg(tmp_path))
    net.train = True
    assert net.layers[0].forward_path(net).startswith("winograd")
    assert len(sets) >= 8                           # forward and backward sets of every step
    assert net.scratch._arena is arena              # the second step allocated no arena
    assert arena.size == max(sets) < sum(sorted(sets)[-2:])
    assert sum(b.nbytes for b in net.scratch._bufs.values()) < 1024   # no named big buffers


def test_shared_arena_changes_no_weight(tmp_path, monkeypatch):
    """Every part a buffer of its own (as before the arena): the same weights, bit for bit."""
    shared, _ = train_two_steps(small_cfg(tmp_path))

    def separate(self, *sizes):
        return [np.full(int(n), np.nan, np.float32) for n in sizes]
    monkeypatch.setattr(Scratch, "parts", separate)
    monkeypatch.setattr(Scratch, "in_arena", lambda self, a: False)
    alone, _ = train_two_steps(small_cfg(tmp_path))
    for ls, la in zip(shared.layers, alone.layers):
        for name in ("weights", "biases", "scales", "rolling_mean", "output", "delta"):
            if hasattr(la, name):
                np.testing.assert_array_equal(getattr(ls, name), getattr(la, name), name)


def test_the_workspace_is_the_arena(tmp_path):
    """The per-image im2col buffer is the arena's first part, not a buffer of its own: after
    a step, the scratch holds no more than the largest of the workspace and the sets."""
    net, arena = train_two_steps(small_cfg(tmp_path))
    ws = net.workspace
    assert ws.size == max(l.workspace_size for l in net.layers) > 0
    assert np.shares_memory(ws, arena) and net.scratch.nbytes < arena.nbytes + 1024
