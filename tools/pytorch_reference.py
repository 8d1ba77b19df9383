#!/usr/bin/env python3
"""The recipes of `dptrain train` in PyTorch, for comparing accuracies, and a reader of
dptrain's weights files.

Usage: python3 tools/pytorch_reference.py [--model mlp|resnet] [--depth 20] [--hidden 512,256]
                                          [--seed S] [--schedule constant|cosine] [--data DIR]
       python3 tools/pytorch_reference.py --model resnet --depth 20 --load-weights FILE
                                          [--limit N] [--json] [--logits out.csv]
Needs Debian's python3-torch and python3-numpy (not dependencies of dptrain).

Training: the model (mlp: Flatten-Linear/ReLU...-Linear, 784-512-256-10 by default; resnet: the
CIFAR-style ResNet of dpt_model_spec_resnet, depth 6n+2) with PyTorch's default initialization,
SGD lr 0.05 momentum 0.9, batches of 256 from a fresh permutation each epoch (last partial batch
dropped), inputs x/255, 10 epochs; prints the test accuracy after each epoch. One thread, like a
dptrain rank.

--load-weights: no training; reads a safetensors file written by dptrain (`dptrain train
--save-weights`) into the same model with load_state_dict(strict=True) (every tensor and
buffer, batch norm's running statistics and counters included) and prints the eval-mode test
accuracy over the first --limit test images; --json prints {"samples", "correct", "loss",
"accuracy"} instead, --logits FILE writes the logits as `dptrain predict --logits` does.
The safetensors package is used when present, else a reader of the format's three parts
(8-byte little-endian header length, JSON header, raw little-endian data).
"""
import argparse
import gzip
import json
import os
import struct

import numpy as np
import torch
from torch import nn


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


class BasicBlock(nn.Module):
    """conv3x3-bn-relu-conv3x3-bn, plus the input or its projection (1x1 strided conv + bn where
    the shape changes), then relu; names as dptrain gives them."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """dpt_model_spec_resnet: conv3x3(16)-bn-relu, three stages of n basic blocks (16, 32, 64
    channels; the first block of stages 2 and 3 has stride 2), global average pool, fc."""

    def __init__(self, depth, channels=1, classes=10):
        super().__init__()
        assert depth >= 8 and (depth - 2) % 6 == 0, "depth must be 6n+2"
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(channels, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        width = 16
        for stage in (1, 2, 3):
            out = 16 << (stage - 1)
            blocks = []
            for b in range(n):
                blocks.append(BasicBlock(width, out, 2 if stage > 1 and b == 0 else 1))
                width = out
            setattr(self, f"layer{stage}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def mlp(hidden, features=784, classes=10):
    """dpt_model_spec_mlp: flatten (layer 0), then Linear/ReLU per hidden size, then Linear."""
    layers, width = [nn.Flatten()], features
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, classes))


def read_safetensors(path):
    """The tensors of a safetensors file, by name."""
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except ImportError:
        pass
    dtypes = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
              "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8}
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtypes[info["dtype"]])
        tensors[name] = t.reshape(info["shape"]).clone()
    return tensors


def build(a, shape):
    if a.model == "resnet":
        return ResNet(a.depth, channels=1)
    return mlp(a.hidden, features=shape[0] * shape[1])


def evaluate_weights(a, model, xte, yte):
    model.load_state_dict(read_safetensors(a.load_weights), strict=True)
    model.eval()
    n = min(a.limit, len(xte)) if a.limit else len(xte)
    with torch.no_grad():
        logits = torch.cat([model(xte[i:i + 256]) for i in range(0, n, 256)])[:n]
    labels = yte[:n]
    loss = nn.functional.cross_entropy(logits.double(), labels, reduction="mean").item()
    correct = int((logits.argmax(1) == labels).sum().item())
    if a.logits:
        with open(a.logits, "w") as f:
            f.write("index," + ",".join(f"logit{j}" for j in range(logits.shape[1])) + "\n")
            for i, row in enumerate(logits.tolist()):
                f.write(f"{i}," + ",".join(f"{v:.9g}" for v in row) + "\n")
    if a.json:
        print(json.dumps({"samples": n, "correct": correct, "loss": loss, "accuracy": correct / n}))
    else:
        print(f"{a.load_weights}: {n} test images, loss {loss:.4f}, test accuracy {correct / n:.4f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "resnet"], default="mlp")
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--hidden", default="512,256")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--schedule", choices=["constant", "cosine"], default="cosine")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--load-weights", metavar="FILE")
    p.add_argument("--limit", type=int, default=0, help="only the first N test images")
    p.add_argument("--json", action="store_true")
    p.add_argument("--logits", metavar="FILE")
    a = p.parse_args()
    a.hidden = [int(h) for h in a.hidden.split(",") if h]
    torch.set_num_threads(1)
    images = idx(a.data, "t10k-images-idx3-ubyte")
    shape = images.shape[1:]
    xte = torch.tensor(images.reshape(-1, 1, *shape), dtype=torch.float32) / 255
    yte = torch.tensor(idx(a.data, "t10k-labels-idx1-ubyte").astype(np.int64))
    torch.manual_seed(a.seed)
    model = build(a, shape)
    if a.load_weights:
        evaluate_weights(a, model, xte, yte)
        return
    xtr = torch.tensor(idx(a.data, "train-images-idx3-ubyte").reshape(-1, 1, *shape),
                       dtype=torch.float32) / 255
    ytr = torch.tensor(idx(a.data, "train-labels-idx1-ubyte").astype(np.int64))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch, steps = 256, len(xtr) // 256
    sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, a.epochs * steps)
             if a.schedule == "cosine" else None)
    gen = torch.Generator().manual_seed(a.seed)
    for epoch in range(a.epochs):
        model.train()
        perm = torch.randperm(len(xtr), generator=gen)
        for k in range(steps):
            i = perm[k * batch:(k + 1) * batch]
            loss = nn.functional.cross_entropy(model(xtr[i]), ytr[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched:
                sched.step()
        model.eval()
        with torch.no_grad():
            acc = torch.cat([model(xte[j:j + 1000]).argmax(1) for j in range(0, len(xte), 1000)])
            acc = (acc == yte).float().mean().item()
        print(f"epoch {epoch + 1} test accuracy {acc:.4f}", flush=True)


if __name__ == "__main__":
    main()
