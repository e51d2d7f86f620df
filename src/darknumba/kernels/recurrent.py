"""Element-wise gate arithmetic of the [gru] and [lstm] layers (Darknet's `gru_layer.c`,
`lstm_layer.c`), forward and backward. All vectors hold batch x outputs values of one step.

GRU:  z = σ(uz + wz), r = σ(ur + wr), fs = r·h, hh = act(uh + wh(fs)), h' = z·h + (1-z)·hh
LSTM: f, i, o = σ(uf + wf), σ(ui + wi), σ(uo + wo); g = tanh(ug + wg);
      c' = f·c + i·g; h' = o·tanh(c')
act is tanh or logistic (Darknet's `tanh=1` option); sums and gates are computed in float64
and rounded once, like the activation kernels.
"""
import math

import numpy as np
from numba import njit, prange


@njit(cache=True, inline="always")
def _sig(x):
    return 1.0 / (1.0 + math.exp(-x))


@njit(cache=True, inline="always")
def _tanh(x):
    e = math.exp(2.0 * x)
    return (e - 1.0) / (e + 1.0)


@njit(parallel=True, cache=True)
def gru_gates_cpu(n, uz, wz, ur, wr, h, z, r, fs):
    """z = σ(uz + wz), r = σ(ur + wr), fs = r·h"""
    for i in prange(n):
        z[i] = np.float32(_sig(np.float64(uz[i]) + wz[i]))
        r[i] = np.float32(_sig(np.float64(ur[i]) + wr[i]))
        fs[i] = r[i] * h[i]


@njit(parallel=True, cache=True)
def gru_output_cpu(n, uh, wh, z, h, use_tanh, hh, out):
    """hh = act(uh + wh); out = z·h + (1-z)·hh"""
    for i in prange(n):
        s = np.float64(uh[i]) + wh[i]
        hh[i] = np.float32(_tanh(s) if use_tanh else _sig(s))
        out[i] = np.float32(z[i] * np.float64(h[i]) + (1.0 - z[i]) * np.float64(hh[i]))


@njit(parallel=True, cache=True)
def gru_backward_out_cpu(n, dout, z, h, hh, use_tanh, dz, dhh, dh_prev):
    """from d(out): dz (w.r.t. the gate's pre-activation), dhh (w.r.t. hh's pre-activation),
    dh_prev += dout·z"""
    for i in prange(n):
        d = np.float64(dout[i])
        zi = np.float64(z[i])
        dz[i] = np.float32(d * (h[i] - np.float64(hh[i])) * zi * (1.0 - zi))
        y = np.float64(hh[i])
        dact = (1.0 - y * y) if use_tanh else y * (1.0 - y)
        dhh[i] = np.float32(d * (1.0 - zi) * dact)
        dh_prev[i] += np.float32(d * zi)


@njit(parallel=True, cache=True)
def gru_backward_reset_cpu(n, dfs, r, h, dr, dh_prev):
    """from d(fs): dr (w.r.t. r's pre-activation), dh_prev += dfs·r"""
    for i in prange(n):
        ri = np.float64(r[i])
        dr[i] = np.float32(dfs[i] * np.float64(h[i]) * ri * (1.0 - ri))
        dh_prev[i] += np.float32(dfs[i] * ri)


@njit(parallel=True, cache=True)
def lstm_forward_cpu(n, uf, wf, ui, wi, ug, wg, uo, wo, c_prev, f, ig, g, o, c, h):
    for k in prange(n):
        f[k] = np.float32(_sig(np.float64(uf[k]) + wf[k]))
        ig[k] = np.float32(_sig(np.float64(ui[k]) + wi[k]))
        g[k] = np.float32(_tanh(np.float64(ug[k]) + wg[k]))
        o[k] = np.float32(_sig(np.float64(uo[k]) + wo[k]))
        c[k] = np.float32(np.float64(f[k]) * c_prev[k] + np.float64(ig[k]) * g[k])
        h[k] = np.float32(o[k] * _tanh(np.float64(c[k])))


@njit(parallel=True, cache=True)
def lstm_backward_cpu(n, dh, dc, c_prev, f, ig, g, o, c, df, di, dg, do, dc_prev):
    """dh = d(h'), dc = d(c') from the next step; gate deltas w.r.t. the pre-activations;
    dc_prev = dc_total·f."""
    for k in prange(n):
        tc = _tanh(np.float64(c[k]))
        ok, fk, ik, gk = np.float64(o[k]), np.float64(f[k]), np.float64(ig[k]), np.float64(g[k])
        dct = np.float64(dh[k]) * ok * (1.0 - tc * tc) + dc[k]
        do[k] = np.float32(dh[k] * tc * ok * (1.0 - ok))
        dg[k] = np.float32(dct * ik * (1.0 - gk * gk))
        di[k] = np.float32(dct * gk * ik * (1.0 - ik))
        df[k] = np.float32(dct * c_prev[k] * fk * (1.0 - fk))
        dc_prev[k] = np.float32(dct * fk)
