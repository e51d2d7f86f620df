"""[rnn] (Darknet's `rnn_layer.c`): a vanilla recurrent layer of three [connected] layers.

Per step t (x_t: batch x inputs; h: batch x outputs):
    h_t = (shortcut ? h_{t-1} : 0) + input_layer(x_t) + self_layer(h_{t-1});  y_t = output_layer(h_t)
each sub-layer with the cfg's activation (and batch norm). net.batch = batch · time_steps; the
layer's input and output are [step][batch][...]. Training starts each sequence from h = 0; in
test mode the state carries over between calls. .weights: the input, self and output layers'
connected records in that order.

Darknet's CPU backward hands the input layer (and, with shortcut, the previous step) the self
layer's delta *after* backward_connected_layer has multiplied it by act' and batch-norm
backward, so it is exact only for linear activations without batch norm. We hand them dL/dh_t
as the chain rule needs; compat="darknet-cpu" reproduces Darknet's order. (Its CPU forward also
writes past the end of a one-step state buffer in training; we keep all steps' states.)
"""
from ..kernels.blas import axpy_cpu, copy_cpu, fill_cpu
from .base import DEFAULT_QUIRKS, Layer
from .activate import get_activation
from .memory import zeros
from .connected import ConnectedLayer
from .steps import StepBuffers, SubLayers, step_net


class RNNLayer(SubLayers, Layer):
    ab_train_unset = True        # AlexeyAB never updates it (base.skips_update)
    type = "rnn"
    SUB_NAMES = ("input", "self", "output")

    def __init__(self, batch, inputs, outputs, steps, activation, batch_normalize=False,
                 quirks=DEFAULT_QUIRKS):
        if batch % steps:
            raise ValueError(f"batch {batch} is not a multiple of time_steps {steps}")
        self.steps, self.batch = steps, batch // steps
        self.inputs, self.outputs = inputs, outputs
        self.h = self.w = 1
        self.c, self.out_h, self.out_w, self.out_c = inputs, 1, 1, outputs
        self.activation, self.quirks, self.shortcut = activation, quirks, 0
        self.batch_normalize = bool(batch_normalize)
        self.hidden = outputs
        self.input_layer = ConnectedLayer(self.batch, inputs, outputs, activation, batch_normalize)
        self.self_layer = ConnectedLayer(self.batch, outputs, outputs, activation, batch_normalize)
        self.output_layer = ConnectedLayer(self.batch, outputs, outputs, activation, batch_normalize)
        self._init_steps()

    def _init_steps(self):
        steps, quirks = self.steps, self.quirks
        self.sub = [StepBuffers(l, steps) for l in (self.input_layer, self.self_layer,
                                                     self.output_layer)]
        for l in self.sublayers():
            l.quirks = quirks
        self.state = zeros(self.batch * self.hidden)                    # carried over in test mode
        self.states = zeros((steps + 1) * self.batch * self.hidden)     # h_{-1}, h_0, ...
        self.workspace_size = max(l.workspace_size for l in self.sublayers())
        self.output, self.delta = self.sub[2].output, self.sub[2].delta

    def sublayers(self):
        return [self.input_layer, self.self_layer, self.output_layer]

    @classmethod
    def from_cfg(cls, s, params):
        outputs = s.find_int("output", 1, at_least=1)
        act = get_activation(s)
        bn = s.find_int("batch_normalize", 0)
        steps = params.net.time_steps
        if params.batch % steps:
            raise s.error(None, f"batch {params.batch} is not a multiple of time_steps {steps}")
        l = cls(params.batch, params.inputs, outputs, steps, act, bn, params.net.quirks)
        l.shortcut = s.find_int("shortcut", 0)
        return l

    def _h(self, t):
        """h_{t-1} is states slot t (slot 0 is the initial state)."""
        n = self.batch * self.hidden
        return self.states[t * n:(t + 1) * n]

    def forward(self, net):
        """forward_rnn_layer"""
        n = self.batch * self.hidden
        inp, slf, out = self.sub
        for b in self.sub:
            fill_cpu(b.delta.size, 0.0, b.delta)
        if net.train:
            fill_cpu(n, 0.0, self.states[:n])
        else:
            copy_cpu(n, self.state, self.states[:n])
        for t in range(self.steps):
            x = net.input[t * self.batch * self.inputs:(t + 1) * self.batch * self.inputs]
            inp.at(t).forward(step_net(net, x))
            slf.at(t).forward(step_net(net, self._h(t)))
            h = self._h(t + 1)
            if self.shortcut:
                copy_cpu(n, self._h(t), h)
            else:
                fill_cpu(n, 0.0, h)
            axpy_cpu(n, 1.0, inp.out(t), h)
            axpy_cpu(n, 1.0, slf.out(t), h)
            out.at(t).forward(step_net(net, h))
        if not net.train:
            copy_cpu(n, self._h(self.steps), self.state)

    def backward(self, net):
        """backward_rnn_layer"""
        n = self.batch * self.hidden
        inp, slf, out = self.sub
        darknet = self.quirks.rnn_late_delta
        for t in range(self.steps - 1, -1, -1):
            out.at(t).backward(step_net(net, self._h(t + 1), slf.dlt(t)))
            if not darknet:
                copy_cpu(n, slf.dlt(t), inp.dlt(t))
                if t > 0 and self.shortcut:
                    axpy_cpu(n, 1.0, slf.dlt(t), slf.dlt(t - 1))
            slf.at(t).backward(step_net(net, self._h(t), slf.dlt(t - 1) if t > 0 else None))
            if darknet:
                copy_cpu(n, slf.dlt(t), inp.dlt(t))
                if t > 0 and self.shortcut:
                    axpy_cpu(n, 1.0, slf.dlt(t), slf.dlt(t - 1))
            x = net.input[t * self.batch * self.inputs:(t + 1) * self.batch * self.inputs]
            d = None if net.delta is None else \
                net.delta[t * self.batch * self.inputs:(t + 1) * self.batch * self.inputs]
            inp.at(t).backward(step_net(net, x, d))

    def describe(self):
        return f"RNN Layer: {self.inputs} inputs, {self.outputs} outputs"
