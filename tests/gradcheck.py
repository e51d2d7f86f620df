"""The finite-difference checker every layer's backward is tested with (tier 3).

Objective. Seeding the last layer's `delta` with random g makes `net.delta` and every
`*_updates` the gradients of J = sum(g * output) (Darknet's delta is the negative gradient of
the loss; here the "loss" is -J). With a truth the objective is instead -loss_scale * cost of
the last layer, whose deltas descend that cost.

Check. Every tensor (the network input, and the weights / biases / scales of every layer and
sub-layer) is sampled at `samples` entries, always including its entry of largest |analytic|,
and each sample is compared with a central difference
    numeric = (J(v + h) - J(v - h)) / (v+ - v-),
v+ and v- the float32 values actually stored, J summed in float64 from the float32 outputs.
A tensor's error is max |numeric - analytic| / max |analytic| over the samples.

Precision, and the tolerances. The engine is float32 only (its buffers and kernels), so J is a
float32 computation; everything the checker adds is float64. A float32 central difference is
off by its rounding, about eps32 / h of the objective's terms that the perturbation touches
(eps32 = 2^-23 = 1.2e-7: 1.2e-5 at h = 1e-2, 1.2e-4 at 1e-3, 1.2e-3 at 1e-4), and by its
truncation, h^2 / 6 of the third derivative (~2e-5 for tanh or logistic at h = 1e-2). h is
1e-2 for smooth layers; kinked ones (leaky, relu, maxpool...) take 1e-3 or 1e-4 so that no
output crosses a kink, where the difference quotient is exact but for that rounding.
- TOL_INPUT = 1e-3: a perturbed input touches one receptive field of outputs; the worst input
  error over all of test_gradcheck's cases is 6.4e-4 (rnn with batch norm over 4096
  sequences), typically 1e-5.
- TOL_PARAM = 2e-3: a perturbed parameter touches every output of its layer (batch x spatial
  of them, each rounded) and the backward sums as many float32 products; the worst is 6.4e-4
  (gru), then 6.1e-4 (hardtan's weights at h = 1e-4: the rounding term).
Both stay below 5e-3, so that a gradient 1% off, whose error at the sampled entry of largest
|gradient| is >= 1e-2 - tol > tol, fails: `assert_catches_one_percent` asserts it per tensor.

Darknet's batch-norm backward is not the exact gradient of its forward (unbiased variance and
eps 1e-6 outside the sqrt forward; N and 1e-5 inside the sqrt backward): it is off by O(1/N),
N = batch x spatial. Batch-norm cases therefore use N >= 1024 (off by ~1e-3 or less), not a
looser tolerance.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import darknumba as dn

H = 1e-2                                   # the step for smooth layers
TOL_INPUT = 1e-3
TOL_PARAM = 2e-3
ONE_PERCENT = 1.01
PARAMS = (("weights", "weight_updates"), ("biases", "bias_updates"), ("scales", "scale_updates"))
STATES = ("state", "h_state", "c_state")   # recurrent layers' carried-over state


@dataclass
class TensorCheck:
    """One tensor's samples: numeric (float64 central differences) and analytic gradients."""
    name: str
    numeric: np.ndarray
    analytic: np.ndarray
    scale: float                  # max |analytic| over the samples (the largest included)

    @property
    def tol(self) -> float:
        return TOL_INPUT if self.name == "input" else TOL_PARAM

    def error(self, factor: float = 1.0) -> float:
        """max |numeric - factor * analytic| / max |analytic|: `factor` = 1.01 is what a
        backward 1% off would be checked as."""
        return float(np.abs(self.numeric - factor * self.analytic).max() / max(self.scale, 1e-30))

    def ok(self, factor: float = 1.0) -> bool:
        return self.error(factor) <= self.tol


class GradCheck(dict):
    """{tensor name: TensorCheck} of one network."""

    def errors(self, factor: float = 1.0) -> dict[str, float]:
        return {k: c.error(factor) for k, c in self.items()}

    def failing(self, factor: float = 1.0) -> dict[str, str]:
        return {k: f"error {c.error(factor):.2e} > tol {c.tol:.1e} (max |grad| {c.scale:.3g})"
                for k, c in self.items() if not c.ok(factor)}

    def assert_ok(self, label: str = ""):
        bad = self.failing()
        assert not bad, f"{label} gradients off: {bad}"

    def assert_catches_one_percent(self, label: str = ""):
        missed = {k: f"error {c.error(ONE_PERCENT):.2e} <= tol {c.tol:.1e}"
                  for k, c in self.items() if c.ok(ONE_PERCENT)}
        assert not missed, f"{label}: a gradient 1% off would pass for {missed}"


def owners(net):
    """(label, layer or sub-layer) of every object that may hold parameters: "L3", "L0.self"."""
    for i, l in enumerate(net.layers):
        yield f"L{i}", l
        subs = getattr(l, "sublayers", list)()
        for name, sub in zip(getattr(l, "SUB_NAMES", ()) or range(len(subs)), subs, strict=True):
            yield f"L{i}.{name}", sub


def zero_updates(net):
    for _, owner in owners(net):
        for _, u in PARAMS:
            if getattr(owner, u, None) is not None:
                getattr(owner, u)[:] = 0


def reset_states(net):
    """Recurrent layers carry their state across calls: every evaluation starts from 0."""
    for l in net.layers:
        for key in STATES:
            if getattr(l, key, None) is not None:
                getattr(l, key).fill(0)


def randomize(net, rng):
    """Weights ~ N(0, 1.5 / sqrt(fan-in)), biases ~ N(0, 0.2), batch-norm scales ~ U(0.5, 1.5)
    for every layer and sub-layer: outputs of order 1, off the activations' saturation."""
    for _, owner in owners(net):
        w, b, s = (getattr(owner, p, None) for p, _ in PARAMS)
        if w is not None and b is not None and w.size:
            w[:] = rng.normal(0, 1.5 / np.sqrt(max(w.size // b.size, 1)), w.size)
        if b is not None and getattr(owner, "bias_updates", None) is not None:
            b[:] = rng.normal(0, 0.2, b.size)
        if s is not None:
            s[:] = rng.uniform(0.5, 1.5, s.size)


def gradient_tensors(net, x, dx) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{name: (array the forward reads, its analytic gradient)} after a backward."""
    tensors = {"input": (x, dx)}
    for label, owner in owners(net):
        for p, u in PARAMS:
            if getattr(owner, u, None) is not None and getattr(owner, p, None) is not None:
                tensors[f"{label} {p}"] = (getattr(owner, p), getattr(owner, u).copy())
    return tensors


def check_network(net, rng, *, x=None, truth=None, loss_scale=1.0, h=H, samples=24,
                  before_forward=reset_states) -> GradCheck:
    """Analytic gradients of `net` (one forward + backward in train mode) against central
    differences, per tensor. Without truth the objective is sum(g * last output), g random and
    seeded into the last layer's delta; with truth it is -loss_scale * the last layer's cost."""
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32) if x is None else x
    last = net.layers[-1]
    zero_updates(net)
    before_forward(net)
    net.forward(x, train=True, truth=truth)
    if truth is None:
        g = rng.standard_normal(last.output.size).astype(np.float32)
        last.delta[:] = g
        g64 = g.astype(np.float64)

        def objective():
            before_forward(net)
            net.forward(x, train=True)
            return float(np.dot(g64, last.output.astype(np.float64)))
    else:
        def objective():
            before_forward(net)
            net.forward(x, train=True, truth=truth)
            return -loss_scale * float(last.cost)
    dx = np.zeros_like(x)
    net.backward(dx)
    result = GradCheck()
    for name, (arr, analytic) in gradient_tensors(net, x, dx).items():
        idx = sample_indices(analytic, samples, rng)
        result[name] = TensorCheck(name, central_differences(objective, arr, idx, h),
                                   analytic[idx].astype(np.float64),
                                   float(np.abs(analytic[idx]).max()))
    return result


def sample_indices(analytic, samples, rng) -> np.ndarray:
    """`samples` distinct entries, the one of largest |analytic| among them."""
    top = int(np.argmax(np.abs(analytic)))
    rest = np.delete(np.arange(analytic.size), top)
    pick = rng.choice(rest, min(samples - 1, rest.size), replace=False)
    return np.concatenate([[top], pick]).astype(np.int64)


def central_differences(objective, arr, idx, h) -> np.ndarray:
    """(J(v + h) - J(v - h)) / (v+ - v-) at each entry, v+- as stored in float32; arr restored."""
    out = np.empty(idx.size)
    for n, i in enumerate(idx):
        v = arr[i]
        arr[i] = v + np.float32(h)
        up, v_up = objective(), float(arr[i])
        arr[i] = v - np.float32(h)
        down, v_down = objective(), float(arr[i])
        arr[i] = v
        out[n] = (up - down) / (v_up - v_down)
    return out


def build_cfg(tmp_path, body, *, batch=2, w=7, h=7, c=3, net_extra="", compat=None, seed=0):
    """A network from a [net] header and `body`, its parameters randomized; (net, rng).
    w=0 makes the input a flat vector of c values (recurrent and connected stacks)."""
    cfg = tmp_path / "g.cfg"
    size = f"width={w}\nheight={h}\nchannels={c}\n" if w else f"inputs={c}\n"
    cfg.write_text(f"[net]\nbatch={batch}\n{size}{net_extra}\n{body}")
    net = dn.load_network(cfg, compat=compat)
    rng = np.random.default_rng(seed)
    randomize(net, rng)
    return net, rng
