#!/usr/bin/env python3
"""Training throughput of dptrain next to PyTorch DistributedDataParallel on the same host.

Usage: python3 tools/ddp_compare.py --dptrain build/tools/dptrain [--model resnet|cnn|mlp]
                                    [--depth 20] [--ranks 2] [--global-batch 256]
                                    [--steps 5] [--repeat 3] [--threads 1]
Needs Debian's python3-torch (not a dependency of dptrain) and Open MPI's mpirun.

Each repeat runs both, taking turns: PyTorch DDP over gloo with --ranks processes, each with
--threads intra-op threads, SGD (lr 0.1, momentum 0.9, weight decay 5e-4) on random inputs of
the Fashion-MNIST shape, one warm-up step then --steps timed steps; and `mpirun -np RANKS
dptrain bench train --model M --steps S --repeat 1 --json` with OPENBLAS_NUM_THREADS and
OMP_NUM_THREADS set to --threads. The table gives the medians in samples/s and the ratios
(dptrain's full step, the one DDP runs: all-reduce, then every replica updates everything; and
its sharded step).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_model(a):
    import pytorch_reference as ref
    import torch.nn as nn
    if a.model == "resnet":
        return ref.ResNet(a.depth)
    if a.model == "mlp":
        return ref.mlp([512, 256])
    # dpt_model_spec_cnn: twice conv3x3 + relu + maxpool 2, flatten, linear
    return nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 10))


def ddp_worker(rank, a, port, out):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=a.ranks)
    torch.manual_seed(1)
    model = torch.nn.parallel.DistributedDataParallel(build_model(a))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    local = a.global_batch // a.ranks
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(local, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (local,), generator=gen)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    step()  # warm-up: allocations, DDP's buckets
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dist.barrier()
    seconds = time.perf_counter() - t0
    if rank == 0:
        with open(out, "w") as f:
            f.write(str(a.global_batch * a.steps / seconds))
    dist.destroy_process_group()


def run_ddp(a):
    import torch.multiprocessing as mp
    out = f"/tmp/ddp_compare.{os.getpid()}"
    mp.spawn(ddp_worker, args=(a, free_port(), out), nprocs=a.ranks, join=True)
    with open(out) as f:
        sps = float(f.read())
    os.unlink(out)
    return sps


def run_dptrain(a):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-np", str(a.ranks), "--oversubscribe", "-x", "OPENBLAS_NUM_THREADS", "-x",
           "OMP_NUM_THREADS", a.dptrain, "bench", "train", "--model", a.model, "--global-batch",
           str(a.global_batch), "--steps", str(a.steps), "--repeat", "1", "--json"]
    if a.model == "resnet":
        cmd += ["--depth", str(a.depth)]
    res = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    line = [l for l in res.stdout.splitlines() if l.startswith("{")][-1]
    j = json.loads(line)
    return j["full_step_samples_per_sec"], j["replicas_samples_per_sec"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dptrain", required=True)
    p.add_argument("--model", choices=["resnet", "cnn", "mlp"], default="resnet")
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    ddp, full, sharded = [], [], []
    for r in range(a.repeat):
        ddp.append(run_ddp(a))
        f, s = run_dptrain(a)
        full.append(f)
        sharded.append(s)
        print(f"repeat {r + 1}: pytorch ddp {ddp[-1]:.1f}, dptrain full step {f:.1f}, "
              f"sharded step {s:.1f} samples/s", file=sys.stderr)
    name = f"ResNet-{a.depth}" if a.model == "resnet" else a.model.upper()
    md, mf, ms = statistics.median(ddp), statistics.median(full), statistics.median(sharded)
    print(f"{name}, global batch {a.global_batch}, {a.ranks} ranks x {a.threads} thread(s), "
          f"{a.steps} steps, median of {a.repeat} (samples/s)")
    print(f"{'pytorch ddp (gloo)':>20} {'dptrain full step':>18} {'ratio':>6} "
          f"{'dptrain sharded':>16} {'ratio':>6}")
    print(f"{md:>20.1f} {mf:>18.1f} {mf / md:>6.2f} {ms:>16.1f} {ms / md:>6.2f}")


if __name__ == "__main__":
    main()
