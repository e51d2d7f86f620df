"""[lstm] (Darknet's `lstm_layer.c`): a long short-term memory layer of eight linear
[connected] layers, uf, ui, ug, uo on the input and wf, wi, wg, wo on the state (gates in
kernels/recurrent.py). h and c carry over between calls, in training too; gradients stop at
the first step of a call. .weights: wi, wf, wo, wg, ui, uf, uo, ug (connected records).

Darknet's CPU backward is the same chain rule with two quirks we do not copy: the cell
gradient `dc` is never cleared, so the last one of the previous call leaks into the last step,
and the forget-gate gradient of step 0 uses a stale `prev_cell` buffer instead of the carried-in
cell. Ours is the exact back-propagation through the steps of one call.
"""
from ..kernels.blas import copy_cpu, fill_cpu
from ..kernels.recurrent import lstm_backward_cpu, lstm_forward_cpu
from .base import DEFAULT_QUIRKS, Layer
from .memory import zeros
from .connected import ConnectedLayer
from .steps import StepBuffers, SubLayers, step_net

NAMES = ("wi", "wf", "wo", "wg", "ui", "uf", "uo", "ug")       # .weights order
GATES = ("f", "i", "g", "o")


class LSTMLayer(SubLayers, Layer):
    ab_train_unset = True        # AlexeyAB never updates it (base.skips_update)
    type = "lstm"
    SUB_NAMES = NAMES
    STATE_NAMES = ("h_state", "c_state")

    def __init__(self, batch, inputs, outputs, steps, batch_normalize=False, quirks=DEFAULT_QUIRKS):
        if batch % steps:
            raise ValueError(f"batch {batch} is not a multiple of time_steps {steps}")
        self.steps, self.batch = steps, batch // steps
        self.inputs, self.outputs = inputs, outputs
        self.h = self.w = 1
        self.c, self.out_h, self.out_w, self.out_c = inputs, 1, 1, outputs
        self.quirks = quirks
        self.batch_normalize = bool(batch_normalize)
        for name in NAMES:
            nin = inputs if name[0] == "u" else outputs
            l = ConnectedLayer(self.batch, nin, outputs, "linear", batch_normalize)
            l.quirks = quirks
            setattr(self, name, l)
        self.sub = {name: StepBuffers(getattr(self, name), steps) for name in NAMES}
        n = self.batch * outputs
        self.h_state, self.c_state = zeros(n), zeros(n)
        self.hs, self.cs = zeros((steps + 1) * n), zeros((steps + 1) * n)
        self.gate = {g: zeros(steps * n) for g in GATES}
        self.dgate = {g: zeros(n) for g in GATES}
        self.dc, self.dc_prev = zeros(n), zeros(n)
        self.output, self.delta = zeros(steps * n), zeros(steps * n)

    @classmethod
    def from_cfg(cls, s, params):
        outputs = s.find_int("output", 1, at_least=1)
        bn = s.find_int("batch_normalize", 0)
        steps = params.net.time_steps
        if params.batch % steps:
            raise s.error(None, f"batch {params.batch} is not a multiple of time_steps {steps}")
        return cls(params.batch, params.inputs, outputs, steps, bn, params.net.quirks)

    def _v(self, buf, t):
        n = self.batch * self.outputs
        return buf[t * n:(t + 1) * n]

    def forward(self, net):
        """forward_lstm_layer"""
        n = self.batch * self.outputs
        S = self.sub
        for b in S.values():
            fill_cpu(b.delta.size, 0.0, b.delta)
        copy_cpu(n, self.h_state, self.hs[:n])
        copy_cpu(n, self.c_state, self.cs[:n])
        for t in range(self.steps):
            h = self._v(self.hs, t)
            x = net.input[t * self.batch * self.inputs:(t + 1) * self.batch * self.inputs]
            for g in GATES:
                S["w" + g].at(t).forward(step_net(net, h))
                S["u" + g].at(t).forward(step_net(net, x))
            G = {g: self._v(self.gate[g], t) for g in GATES}
            lstm_forward_cpu(n, S["uf"].out(t), S["wf"].out(t), S["ui"].out(t), S["wi"].out(t),
                             S["ug"].out(t), S["wg"].out(t), S["uo"].out(t), S["wo"].out(t),
                             self._v(self.cs, t), G["f"], G["i"], G["g"], G["o"],
                             self._v(self.cs, t + 1), self._v(self.hs, t + 1))
            copy_cpu(n, self._v(self.hs, t + 1), self._v(self.output, t))
        copy_cpu(n, self._v(self.hs, self.steps), self.h_state)
        copy_cpu(n, self._v(self.cs, self.steps), self.c_state)

    def backward(self, net):
        """backward_lstm_layer (exact; see the module docstring)"""
        n = self.batch * self.outputs
        S = self.sub
        fill_cpu(n, 0.0, self.dc)
        for t in range(self.steps - 1, -1, -1):
            h = self._v(self.hs, t)
            x = net.input[t * self.batch * self.inputs:(t + 1) * self.batch * self.inputs]
            dx = None if net.delta is None else \
                net.delta[t * self.batch * self.inputs:(t + 1) * self.batch * self.inputs]
            dh_prev = self._v(self.delta, t - 1) if t > 0 else None
            G = {g: self._v(self.gate[g], t) for g in GATES}
            D = self.dgate
            lstm_backward_cpu(n, self._v(self.delta, t), self.dc, self._v(self.cs, t), G["f"],
                              G["i"], G["g"], G["o"], self._v(self.cs, t + 1), D["f"], D["i"],
                              D["g"], D["o"], self.dc_prev)
            for g in GATES:
                copy_cpu(n, D[g], S["w" + g].dlt(t))
                S["w" + g].at(t).backward(step_net(net, h, dh_prev))
                copy_cpu(n, D[g], S["u" + g].dlt(t))
                S["u" + g].at(t).backward(step_net(net, x, dx))
            copy_cpu(n, self.dc_prev, self.dc)

    def describe(self):
        return f"LSTM Layer: {self.inputs} inputs, {self.outputs} outputs"
