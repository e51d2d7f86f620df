"""Child process for test_multistep (its DARKNET_DIR run, and the recording of
tests/fixtures/multistep): trains a pjreddie C darknet build (its libdarknet.so, through
ctypes) on one datum repeated N times with `train_network`, writes the weights with
`save_weights`, prints the per-datum costs as JSON.

usage: python c_train.py LIBDARKNET CFG WEIGHTS INPUT.f32 TRUTH.f32 BATCH N OUT.weights
"""
import ctypes as C
import json
import sys

import numpy as np

FloatP = C.POINTER(C.c_float)


class Matrix(C.Structure):
    _fields_ = [("rows", C.c_int), ("cols", C.c_int), ("vals", C.POINTER(FloatP))]


class Data(C.Structure):
    _fields_ = [("w", C.c_int), ("h", C.c_int), ("X", Matrix), ("y", Matrix),
                ("shallow", C.c_int), ("num_boxes", C.c_void_p), ("boxes", C.c_void_p)]


def matrix(a):
    rows = (FloatP * a.shape[0])(*[a[i].ctypes.data_as(FloatP) for i in range(a.shape[0])])
    return Matrix(a.shape[0], a.shape[1], C.cast(rows, C.POINTER(FloatP))), rows


def main(lib_path, cfg, weights, xfile, tfile, batch, n, out):
    lib = C.CDLL(lib_path)
    lib.load_network.restype = C.c_void_p
    lib.load_network.argtypes = [C.c_char_p, C.c_char_p, C.c_int]
    lib.train_network.restype = C.c_float
    lib.train_network.argtypes = [C.c_void_p, Data]
    lib.save_weights.argtypes = [C.c_void_p, C.c_char_p]
    net = lib.load_network(cfg.encode(), weights.encode(), 0)
    batch = int(batch)
    x = np.fromfile(xfile, "<f4").reshape(batch, -1).copy()
    t = np.fromfile(tfile, "<f4").reshape(batch, -1).copy()
    (mx, _x_rows), (my, _t_rows) = matrix(x), matrix(t)   # keep the row arrays alive
    d = Data(0, 0, mx, my, 1, None, None)
    # train_network returns the datum's cost / batch
    costs = [float(lib.train_network(net, d)) * batch for _ in range(int(n))]
    lib.save_weights(net, out.encode())
    sys.stderr.write(json.dumps(costs) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:9])
