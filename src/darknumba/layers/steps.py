"""What the recurrent layers ([rnn], [gru], [lstm], [crnn]) share: sub-layers (connected or
convolutional) built for one time step of `batch` sequences, whose output / delta (and batch
norm x, and batch mean / variance) are views into buffers holding all `steps` time
steps. Darknet keeps one mean / variance per sub-layer, so its backward through batch norm uses
the last step's statistics at every step; per-step ones make the gradient exact. `at(t)` points the
views at step t (Darknet's increment_layer). Input and output are laid out [step][batch][...].
"""
from types import SimpleNamespace


from .memory import zeros


class StepBuffers:
    """Per-step views of a sub-layer's buffers."""

    def __init__(self, layer, steps):
        self.layer, self.steps = layer, steps
        self.n = layer.batch * layer.outputs
        self.output = zeros(steps * self.n)
        self.delta = zeros(steps * self.n)
        self.bn = bool(getattr(layer, "batch_normalize", False))
        if self.bn:
            self.x = zeros(steps * self.n)
            self.nc = layer.mean.size
            self.mean = zeros(steps * self.nc)
            self.variance = zeros(steps * self.nc)

    def at(self, t):
        l, n = self.layer, self.n
        l.output = self.output[t * n:(t + 1) * n]
        l.delta = self.delta[t * n:(t + 1) * n]
        if self.bn:
            l.x = self.x[t * n:(t + 1) * n]
            l.mean = self.mean[t * self.nc:(t + 1) * self.nc]
            l.variance = self.variance[t * self.nc:(t + 1) * self.nc]
        return l

    def out(self, t):
        return self.output[t * self.n:(t + 1) * self.n]

    def dlt(self, t):
        return self.delta[t * self.n:(t + 1) * self.n]


class SubLayers:
    """What a layer built of sub-layers does with them: `sublayers()` in .weights order, named
    by SUB_NAMES (the records are "name.biases", ...)."""
    SUB_NAMES: tuple = ()
    STATE_NAMES: tuple = ("state",)       # what carries over between calls, batch-major
    recurrent = True                        # Layer's capability: its state carries over

    def sublayers(self):
        return [getattr(self, name) for name in self.SUB_NAMES]

    def random_init(self, rng):
        for s in self.sublayers():
            s.random_init(rng)

    def update(self, a):
        for l in self.sublayers():
            l.update(a)

    def weight_records(self):
        return [(f"{name}.{k}", v) for name, l in zip(self.SUB_NAMES, self.sublayers())
                for k, v in l.weight_records()]

    def reset_state(self, b):
        """Sequence b's carried state back to zero (reset_network_state as Darknet's GPU build
        does it; its CPU build leaves the state as it is)."""
        for name in self.STATE_NAMES:
            s = getattr(self, name)
            n = s.size // self.batch
            s[b * n:(b + 1) * n] = 0.0

    @property
    def bflops(self):
        return sum(l.bflops for l in self.sublayers())


def step_net(net, input=None, delta=None):
    """The `network s = net` copy Darknet passes to a sub-layer: its own input and delta."""
    return SimpleNamespace(input=input, delta=delta, train=net.train, truth=None,
                           workspace=net.workspace, seen=getattr(net, "seen", 0),
                           quirks=net.quirks, index=getattr(net, "index", 0),
                           exact=getattr(net, "exact", False))

