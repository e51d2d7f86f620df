"""[gru] (Darknet's `gru_layer.c`): a gated recurrent unit of six linear [connected] layers,
uz, ur, uh on the input and wz, wr, wh on the state (see kernels/recurrent.py for the gates;
`tanh=1` uses tanh for the candidate state, else logistic). The state carries over between
calls, in training too (Darknet's char-rnn style); gradients stop at the first step of a call.
.weights: wz, wr, wh, uz, ur, uh (connected records).

Darknet's CPU backward_gru_layer is empty (only its GPU build trains a GRU); ours is the
exact back-propagation through the steps of one call.
"""
from ..kernels.blas import copy_cpu, fill_cpu
from ..kernels.recurrent import (gru_backward_out_cpu, gru_backward_reset_cpu, gru_gates_cpu,
                                 gru_output_cpu)
from .base import DEFAULT_QUIRKS, Layer
from .memory import zeros
from .connected import ConnectedLayer
from .steps import StepBuffers, SubLayers, step_net

NAMES = ("wz", "wr", "wh", "uz", "ur", "uh")


class GRULayer(SubLayers, Layer):
    ab_train_unset = True        # AlexeyAB never updates it (base.skips_update)
    type = "gru"
    SUB_NAMES = NAMES

    def __init__(self, batch, inputs, outputs, steps, batch_normalize=False, quirks=DEFAULT_QUIRKS):
        if batch % steps:
            raise ValueError(f"batch {batch} is not a multiple of time_steps {steps}")
        self.steps, self.batch = steps, batch // steps
        self.inputs, self.outputs = inputs, outputs
        self.h = self.w = 1
        self.c, self.out_h, self.out_w, self.out_c = inputs, 1, 1, outputs
        self.tanh, self.quirks = 0, quirks
        self.batch_normalize = bool(batch_normalize)
        for name in NAMES:
            nin = inputs if name[0] == "u" else outputs
            l = ConnectedLayer(self.batch, nin, outputs, "linear", batch_normalize)
            l.quirks = quirks
            setattr(self, name, l)
        self.sub = {name: StepBuffers(getattr(self, name), steps) for name in NAMES}
        n = self.batch * outputs
        self.state = zeros(n)
        self.states = zeros((steps + 1) * n)
        self.z, self.r = zeros(steps * n), zeros(steps * n)
        self.fs, self.hh = zeros(steps * n), zeros(steps * n)
        self.dz, self.dr, self.dhh, self.dfs = zeros(n), zeros(n), zeros(n), zeros(n)
        self.dh0 = zeros(n)                   # gradient w.r.t. the carried-in state (dropped)
        self.output, self.delta = zeros(steps * n), zeros(steps * n)

    @classmethod
    def from_cfg(cls, s, params):
        outputs = s.find_int("output", 1, at_least=1)
        bn = s.find_int("batch_normalize", 0)
        steps = params.net.time_steps
        if params.batch % steps:
            raise s.error(None, f"batch {params.batch} is not a multiple of time_steps {steps}")
        l = cls(params.batch, params.inputs, outputs, steps, bn, params.net.quirks)
        l.tanh = s.find_int("tanh", 0)
        return l

    def _v(self, buf, t):
        n = self.batch * self.outputs
        return buf[t * n:(t + 1) * n]

    def forward(self, net):
        """forward_gru_layer"""
        n = self.batch * self.outputs
        for b in self.sub.values():
            fill_cpu(b.delta.size, 0.0, b.delta)
        copy_cpu(n, self.state, self.states[:n])
        S = self.sub
        for t in range(self.steps):
            h = self._v(self.states, t)
            x = net.input[t * self.batch * self.inputs:(t + 1) * self.batch * self.inputs]
            for name in ("wz", "wr"):
                S[name].at(t).forward(step_net(net, h))
            for name in ("uz", "ur", "uh"):
                S[name].at(t).forward(step_net(net, x))
            z, r, fs = self._v(self.z, t), self._v(self.r, t), self._v(self.fs, t)
            gru_gates_cpu(n, S["uz"].out(t), S["wz"].out(t), S["ur"].out(t), S["wr"].out(t), h,
                          z, r, fs)
            S["wh"].at(t).forward(step_net(net, fs))
            out = self._v(self.output, t)
            gru_output_cpu(n, S["uh"].out(t), S["wh"].out(t), z, h, bool(self.tanh),
                           self._v(self.hh, t), out)
            copy_cpu(n, out, self._v(self.states, t + 1))
        copy_cpu(n, self._v(self.states, self.steps), self.state)

    def backward(self, net):
        """Back-propagation through the steps of the last forward (see the module docstring)."""
        n = self.batch * self.outputs
        S = self.sub
        for t in range(self.steps - 1, -1, -1):
            h = self._v(self.states, t)
            x = net.input[t * self.batch * self.inputs:(t + 1) * self.batch * self.inputs]
            dx = None if net.delta is None else \
                net.delta[t * self.batch * self.inputs:(t + 1) * self.batch * self.inputs]
            dh_prev = self._v(self.delta, t - 1) if t > 0 else self.dh0
            gru_backward_out_cpu(n, self._v(self.delta, t), self._v(self.z, t), h,
                                 self._v(self.hh, t), bool(self.tanh), self.dz, self.dhh, dh_prev)
            fill_cpu(n, 0.0, self.dfs)
            copy_cpu(n, self.dhh, S["wh"].dlt(t))
            S["wh"].at(t).backward(step_net(net, self._v(self.fs, t), self.dfs))
            copy_cpu(n, self.dhh, S["uh"].dlt(t))
            S["uh"].at(t).backward(step_net(net, x, dx))
            gru_backward_reset_cpu(n, self.dfs, self._v(self.r, t), h, self.dr, dh_prev)
            for name, d in (("wz", self.dz), ("wr", self.dr)):
                copy_cpu(n, d, S[name].dlt(t))
                S[name].at(t).backward(step_net(net, h, dh_prev if t > 0 else None))
            for name, d in (("uz", self.dz), ("ur", self.dr)):
                copy_cpu(n, d, S[name].dlt(t))
                S[name].at(t).backward(step_net(net, x, dx))

    def describe(self):
        return f"GRU Layer: {self.inputs} inputs, {self.outputs} outputs"
