"""Writes a small IDX data set (train-* and t10k-* files, 10 classes of 28x28 images whose
classes differ in where they are bright) into DIR, for the Python module's tests."""

import struct
import sys

import numpy as np


def write(path, magic, dims, data):
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims))
        f.write(data.tobytes())


def make(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n).astype(np.uint8)
    x = rng.integers(0, 96, (n, 28, 28)).astype(np.uint8)
    for i, c in enumerate(y):
        x[i, 2 * c:2 * c + 6, :] += 150
    return x, y


def main(out):
    for prefix, n, seed in (("train", 600, 1), ("t10k", 200, 2)):
        x, y = make(n, seed)
        write(f"{out}/{prefix}-images-idx3-ubyte", 0x803, x.shape, x)
        write(f"{out}/{prefix}-labels-idx1-ubyte", 0x801, y.shape, y)


if __name__ == "__main__":
    main(sys.argv[1])
