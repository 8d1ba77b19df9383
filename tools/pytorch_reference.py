#!/usr/bin/env python3
"""The MLP recipe of `dptrain train` in PyTorch, for comparing accuracies.

Usage: python3 tools/pytorch_reference.py [--seed S] [--schedule constant|cosine] [--data DIR]
Needs Debian's python3-torch and python3-numpy (not dependencies of dptrain). Trains
784-512-256-10 (Linear/ReLU, PyTorch's default initialization) with SGD lr 0.05 momentum 0.9,
batches of 256 from a fresh permutation each epoch (last partial batch dropped), inputs x/255,
10 epochs, and prints the test accuracy after each epoch. One thread, like a dptrain rank.
"""
import argparse
import gzip
import os

import numpy as np
import torch


def idx(directory, name):
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        path += ".gz"
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--schedule", choices=["constant", "cosine"], default="cosine")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=10)
    a = p.parse_args()
    torch.set_num_threads(1)
    xtr = torch.tensor(idx(a.data, "train-images-idx3-ubyte").reshape(-1, 784), dtype=torch.float32) / 255
    ytr = torch.tensor(idx(a.data, "train-labels-idx1-ubyte").astype(np.int64))
    xte = torch.tensor(idx(a.data, "t10k-images-idx3-ubyte").reshape(-1, 784), dtype=torch.float32) / 255
    yte = torch.tensor(idx(a.data, "t10k-labels-idx1-ubyte").astype(np.int64))
    torch.manual_seed(a.seed)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch, steps = 256, len(xtr) // 256
    sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, a.epochs * steps)
             if a.schedule == "cosine" else None)
    gen = torch.Generator().manual_seed(a.seed)
    for epoch in range(a.epochs):
        perm = torch.randperm(len(xtr), generator=gen)
        for k in range(steps):
            i = perm[k * batch:(k + 1) * batch]
            loss = torch.nn.functional.cross_entropy(model(xtr[i]), ytr[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched:
                sched.step()
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        print(f"epoch {epoch + 1} test accuracy {acc:.4f}", flush=True)


if __name__ == "__main__":
    main()
