#!/usr/bin/env python3
"""Training throughput of dptrain next to PyTorch DistributedDataParallel on the same host.

Usage: python3 tools/ddp_compare.py --dptrain build/tools/dptrain
                                    [--model resnet|cnn|mlp|bert] [--depth 20] [--ranks 2]
                                    [--global-batch 256] [--steps 5] [--repeat 3] [--threads 1]
Needs Debian's python3-torch (not a dependency of dptrain) and Open MPI's mpirun.

Each repeat runs both, taking turns: PyTorch DDP over gloo with --ranks processes, each with
--threads intra-op threads, SGD (lr 0.1, momentum 0.9, weight decay 5e-4) on random inputs of
the Fashion-MNIST shape, one warm-up step then --steps timed steps; and `mpirun -np RANKS
dptrain bench train --model M --steps S --repeat 1 --json` with OPENBLAS_NUM_THREADS and
OMP_NUM_THREADS set to --threads. The table gives the medians in samples/s and the ratios
(dptrain's full step, the one DDP runs: all-reduce, then every replica updates everything; and
its sharded step).

--model bert: pytorch_reference.py's BertMLM with the sizes of `bench train --model bert` (4
layers, hidden 256, 4 heads, FFN 1024, dropout 0.1, a 4096-token vocabulary, sequences of
--seq-len 128), AdamW (lr 1e-3, weight decay 0.01 on the matrices) on random token batches
masked as BERT's MLM does; global batch 32 unless given; the table is in tokens/s (every
position). At --ranks 1 PyTorch runs plainly, without DDP or a process group.
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


BERT_VOCAB = 4096  # bench train's vocabulary learned from the fortunes text


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
    if a.model == "bert":
        return ref.BertMLM(BERT_VOCAB, a.seq_len)
    # dpt_model_spec_cnn: twice conv3x3 + relu + maxpool 2, flatten, linear
    return nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 10))


def batch_and_loss(a, rank, local):
    """One rank's fixed batch and its loss function: images or masked token sequences."""
    import torch
    import pytorch_reference as ref
    gen = torch.Generator().manual_seed(rank)
    if a.model != "bert":
        x = torch.randn(local, 1, 28, 28, generator=gen)
        y = torch.randint(0, 10, (local,), generator=gen)
        return x, y, torch.nn.CrossEntropyLoss()
    ids = torch.randint(ref.FIRST_TOKEN, BERT_VOCAB, (local, a.seq_len), generator=gen)
    x, y = ref.mlm_mask(ids, BERT_VOCAB, gen)

    def mlm_loss(logits, labels):
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(),
                                                 ignore_index=ref.IGNORE)
    return x, y, mlm_loss


def make_optimizer(a, model):
    import torch
    if a.model != "bert":
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                              {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)


def ddp_worker(rank, a, port, out):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(a.threads)
    ddp = a.ranks > 1
    if ddp:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=a.ranks)
    torch.manual_seed(1)
    model = build_model(a)
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    model.train()
    opt = make_optimizer(a, model)
    local = a.global_batch // a.ranks
    x, y, loss_fn = batch_and_loss(a, rank, local)

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    step()  # warm-up: allocations, DDP's buckets
    if ddp:
        dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    if ddp:
        dist.barrier()
    seconds = time.perf_counter() - t0
    if rank == 0:
        with open(out, "w") as f:
            f.write(str(a.global_batch * a.steps / seconds))
    if ddp:
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
    if a.model == "bert":
        cmd += ["--seq-len", str(a.seq_len)]
    res = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    line = [l for l in res.stdout.splitlines() if l.startswith("{")][-1]
    j = json.loads(line)
    return j["full_step_samples_per_sec"], j["replicas_samples_per_sec"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dptrain", required=True)
    p.add_argument("--model", choices=["resnet", "cnn", "mlp", "bert"], default="resnet")
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--global-batch", type=int, default=None, help="default 256 (bert 32)")
    p.add_argument("--seq-len", type=int, default=128, help="bert: tokens per sequence")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    if a.global_batch is None:
        a.global_batch = 32 if a.model == "bert" else 256
    per = a.seq_len if a.model == "bert" else 1  # tokens per sample, or samples
    unit = "tokens/s" if a.model == "bert" else "samples/s"
    torch_name = "pytorch ddp (gloo)" if a.ranks > 1 else "pytorch"
    ddp, full, sharded = [], [], []
    for r in range(a.repeat):
        ddp.append(run_ddp(a) * per)
        f, s = run_dptrain(a)
        full.append(f * per)
        sharded.append(s * per)
        print(f"repeat {r + 1}: {torch_name} {ddp[-1]:.1f}, dptrain full step {full[-1]:.1f}, "
              f"sharded step {sharded[-1]:.1f} {unit}", file=sys.stderr)
    name = f"ResNet-{a.depth}" if a.model == "resnet" else a.model.upper()
    if a.model == "bert":
        name = f"BERT 4x256 seq {a.seq_len}"
    md, mf, ms = statistics.median(ddp), statistics.median(full), statistics.median(sharded)
    print(f"{name}, global batch {a.global_batch}, {a.ranks} ranks x {a.threads} thread(s), "
          f"{a.steps} steps, median of {a.repeat} ({unit})")
    print(f"{torch_name:>20} {'dptrain full step':>18} {'ratio':>6} "
          f"{'dptrain sharded':>16} {'ratio':>6}")
    print(f"{md:>20.1f} {mf:>18.1f} {mf / md:>6.2f} {ms:>16.1f} {ms / md:>6.2f}")


if __name__ == "__main__":
    main()
