"""How far the default path (Winograd on the large 3x3 convolutions) is from the exact one
(im2col + GEMM, as Darknet), per network: the [yolo] heads' largest |difference| over the
head's largest value, on Darknet's sample photos letterboxed to --size, under the planner's
rules for CPUs without AVX-512 (13x13 maps on F(2x2)) and with it (13x13 maps on im2col).

    python bench/winograd_error.py --photos ../shared/data

Networks without weights in weights/ get seeded random ones (rolling variance 1, so the
outputs stay finite), the same in both paths.
"""
import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import benchlib  # noqa: E402

NETS = [("yolov3-tiny", "yolov3-tiny.weights"), ("yolov4-tiny", "yolov4-tiny.weights"),
        ("yolov3", "yolov3.weights")]


def heads(net, x):
    net.predict(x)
    return [l.output.copy() for l in net.layers if l.type == "yolo"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--photos", default=str(ROOT.parent / "shared" / "data"),
                    help="a folder of .jpg photos (Darknet's data/)")
    ap.add_argument("--size", type=int, default=416)
    ap.add_argument("--rules", default="avx2,avx512")
    args = ap.parse_args()
    import darknumba as dn
    from darknumba.layers import conv_plan
    from darknumba.train.timing import unit_rolling_variance
    from darknumba.vision.image import letterbox_image, load_image_color
    dn.configure()
    photos = sorted(Path(args.photos).glob("*.jpg"))
    if not photos:
        raise SystemExit(f"no .jpg photos in {args.photos}")
    inputs = [np.ascontiguousarray(letterbox_image(load_image_color(str(p)), args.size,
                                                   args.size), np.float32).ravel()
              for p in photos]
    benchlib.header("Winograd's outputs against the exact path's, per network",
                    extra={"photos": f"{len(photos)} from {args.photos} at {args.size}",
                           "avx512": str(conv_plan.wide_vectors())})
    with tempfile.TemporaryDirectory() as tmp:
        for rule in args.rules.split(","):
            conv_plan._WIDE_VECTORS = rule == "avx512"
            for name, wname in NETS:
                cfg, weights = ROOT / "cfg" / f"{name}.cfg", ROOT / "weights" / wname
                if not weights.exists():
                    np.random.seed(0)
                    net = dn.load_network(cfg, None, batch=1)
                    unit_rolling_variance(net)
                    weights = Path(tmp) / f"{name}-random.weights"
                    dn.save_weights(net, weights)
                exact, fast = (dn.load_network(cfg, weights, batch=1, exact=e) for e in (True, False))
                for net in (exact, fast):
                    if net.w != args.size or net.h != args.size:
                        net.resize(args.size, args.size)
                worst = max(float(np.abs(a - b).max() / np.abs(a).max())
                            for x in inputs for a, b in zip(heads(exact, x), heads(fast, x)))
                paths = sorted({str(l.forward_path(fast)) for l in fast.layers
                                if l.type == "convolutional"})
                print(f"{rule:7s} {name:12s} largest |winograd - exact| / head max: {worst:.2e}"
                      f"  (paths: {', '.join(paths)})")


if __name__ == "__main__":
    main()
