"""Data-parallel training of an MLP on Fashion-MNIST, from Python:
    python3 train.py [--epochs E] [--max-steps S] [--seed S] [--backend B] [--save FILE]
    mpirun -np 2 python3 train.py ...      (one replica per rank)
The same settings as `dptrain train` give the same run: the last line's param_hash is the tool's
(`dptrain train --json`)."""

import argparse

import dptrain

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--data", default=dptrain.FASHION_MNIST)
p.add_argument("--epochs", type=int, default=10)
p.add_argument("--max-steps", type=int, default=0)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--backend", default="auto")
p.add_argument("--save", help="write the trained weights here (safetensors)")
args = p.parse_args()

train = dptrain.Dataset.load(args.data)
test = dptrain.Dataset.load(args.data, "test")


def epoch(report):
    print(f"epoch {report.epoch}: train loss {report.train_loss:.4f}, test accuracy "
          f"{report.test_accuracy:.4f}, {report.samples_per_sec:.0f} samples/s", flush=True)


model = dptrain.train(dptrain.mlp(), train, test, epochs=args.epochs, max_steps=args.max_steps,
                      seed=args.seed, backend=args.backend, on_epoch=epoch)
if dptrain.rank() == 0:
    r = model.report
    print(f"{r.ranks} rank(s), {r.replicas} replica(s) on {r.backend}: {r.steps} steps, test "
          f"accuracy {r.test_accuracy:.4f}, param_hash {r.param_hash:016x}")
    if args.save:
        model.save(args.save)
