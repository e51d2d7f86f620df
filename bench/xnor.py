"""An xnor=1 convolution by bits against the float convolution of the same shape (issue 32,
Must 1: the binary layer at least 3x faster).

For each shape (3x3, c -> n filters on an s x s map, pad 1, batch norm, leaky; AlexeyAB's
dialect, batch 1), one network of that single layer, inference (Network.forward, train=False):

* float:       the float layer as darknumba plans it (Winograd where it pays: conv_plan.py);
* float exact: the float layer on Darknet's im2col + GEMM (one BLAS sgemm);
* xnor bits:   the xnor layer after calculate_binary_weights (AlexeyAB's inference): the
               input's signs packed 64 channels to a word, the columns of packed taps, the
               XNOR-popcount GEMM (kernels/xnor.py), batch norm and leaky;
* xnor float:  the xnor layer's float way (binarised copies + the float layer: training, or
               AlexeyAB's inference before calculate_binary_weights), for reference.

Median and minimum wall time of --runs forwards each, the four interleaved run by run so that
a busy machine slows them alike; after --warmup forwards (the compile, numba's cache). Prints
milliseconds and float / bits (on a shared machine the minimum is the steadier figure). Run it with darknumba's thread policy (dn.configure(), as the
`detect` command runs): `python bench/xnor.py`.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import header  # noqa: E402

SHAPES = ((256, 256, 13), (256, 256, 26), (128, 256, 26), (512, 1024, 13))
WAYS = ("float", "float exact", "xnor bits", "xnor float")


def build(folder, c, n, s, xnor):
    import numpy as np

    from darknumba.parser import parse_network_cfg
    cfg = Path(folder) / f"x{c}-{n}-{s}-{xnor}.cfg"
    cfg.write_text(f"[net]\nbatch=1\nwidth={s}\nheight={s}\nchannels={c}\n\n"
                   f"[convolutional]\nxnor={xnor}\nbatch_normalize=1\nfilters={n}\nsize=3\n"
                   f"stride=1\npad=1\nactivation=leaky\n")
    net = parse_network_cfg(cfg, dialect="alexeyab")
    l = net.layers[0]
    rng = np.random.default_rng(0)
    l.weights[:] = rng.normal(0, 1, l.weights.size)
    l.rolling_variance[:] = 1
    l.weights_changed()
    return net


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21, help="timed forwards of each way")
    ap.add_argument("--warmup", type=int, default=3, help="untimed forwards first")
    ap.add_argument("--shapes", default=",".join(f"{c}x{n}x{s}" for c, n, s in SHAPES),
                    help="c x filters x map size, comma separated")
    a = ap.parse_args(argv)
    import numpy as np

    import darknumba as dn
    from darknumba.layers.xnor import calculate_binary_weights
    dn.configure()
    header("xnor=1 convolution by bits vs the float convolution, inference, batch 1",
           extra={"runs": f"median of {a.runs} after {a.warmup} warm-up forwards"})
    print()
    print(f"{'shape':<22}" + "".join(f"{w + ' ms':>15}" for w in WAYS)
          + f"{'float/bits':>12}{'exact/bits':>12}")
    shapes = [tuple(int(v) for v in t.split("x")) for t in a.shapes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for c, n, s in shapes:
            nets = {"float": build(tmp, c, n, s, 0), "float exact": build(tmp, c, n, s, 0),
                    "xnor bits": build(tmp, c, n, s, 1), "xnor float": build(tmp, c, n, s, 1)}
            nets["float"].exact = False
            nets["float exact"].exact = True
            calculate_binary_weights(nets["xnor bits"])
            x = np.random.default_rng(1).normal(0, 1, c * s * s).astype(np.float32)
            times = {w: [] for w in WAYS}
            for i in range(a.warmup + a.runs):
                for w in WAYS:
                    t0 = time.perf_counter()
                    nets[w].forward(x)
                    if i >= a.warmup:
                        times[w].append(time.perf_counter() - t0)
            path = nets["float"].layers[0].forward_path(nets["float"])
            for stat, f in (("median", statistics.median), ("min", min)):
                v = {w: f(t) * 1e3 for w, t in times.items()}
                print(f"{f'{c}->{n} {s}x{s} {stat}':<22}"
                      + "".join(f"{v[w]:>15.3f}" for w in WAYS)
                      + f"{v['float'] / v['xnor bits']:>11.1f}x"
                      + f"{v['float exact'] / v['xnor bits']:>11.1f}x")
            print(f"{'':<22}(float: {path})")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
