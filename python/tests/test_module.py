"""The Python module against the dptrain command on the same small IDX data set: equal
param_hash for the same settings (1 replica, 2 thread replicas, normalization, a start from
saved weights, NumPy arrays), callbacks, evaluation against the report, weights files both
ways, and failures as dptrain.Error with the library's message.
Usage: test_module.py DATA_DIR DPTRAIN SCRATCH"""

import json
import os
import signal
import subprocess
import sys

import numpy as np

import dptrain

DATA, TOOL, SCRATCH = sys.argv[1:4]
failures = []


def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def tool(*args):
    """The tool's closing JSON report for `dptrain train` with these options."""
    cmd = [TOOL, "train", "--backend", "cpu", "--data", DATA, "--seed", "3", "--hidden",
           "64,32", "--global-batch", "64", "--json", *args]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(cmd)}: {out.stderr.strip()}")
    return [json.loads(line) for line in out.stdout.splitlines() if '"final": true' in line][0]


def hexhash(model):
    return f"{model.report.param_hash:016x}"


train = dptrain.Dataset.load(DATA)
test = dptrain.Dataset.load(DATA, "test")
expect(len(train) == 600 and train.shape == (1, 28, 28) and train.num_classes == 10,
       f"Dataset.load: {train}")
settings = dict(backend="cpu", seed=3, global_batch=64, epochs=2)

# 1 replica, with the callbacks.
steps, epochs = [], []
model = dptrain.train(dptrain.mlp(hidden=(64, 32)), train, test, **settings,
                      on_step=lambda *a: steps.append(a), on_epoch=epochs.append)
ref = tool("--epochs", "2")
expect(hexhash(model) == ref["param_hash"],
       f"1 replica: param_hash {hexhash(model)}, the tool's {ref['param_hash']}")
expect(model.param_hash == model.report.param_hash, "the state's fingerprint is the report's")
expect(model.report.steps == 18 and len(steps) == 18 and steps[-1][:3] == (2, 9, 9),
       f"on_step once per step: {len(steps)} calls, last {steps[-1][:3] if steps else None}")
expect([r.epoch for r in epochs] == [1, 2] and epochs == model.reports,
       f"on_epoch once per epoch: {[r.epoch for r in epochs]}")
ev = model.evaluate(test)
expect(abs(ev["accuracy"] - model.report.test_accuracy) < 1e-9 and
       abs(ev["loss"] - model.report.test_loss) < 1e-4,
       f"evaluate {ev} = the report's {model.report.test_accuracy}, {model.report.test_loss}")
expect(abs(model.report.test_accuracy - ref["test_accuracy"]) < 1e-4,
       f"test accuracy {model.report.test_accuracy:.4f}, the tool's {ref['test_accuracy']}")
logits = model.predict(test)
expect(logits.shape == (200, 10) and np.isfinite(logits).all(), "predict: [200, 10] logits")

# Two replicas as threads of this process.
two = dptrain.train(dptrain.mlp(hidden=(64, 32)), train, test, replicas=2, **settings)
ref2 = tool("--epochs", "2", "--replicas", "2")
expect(hexhash(two) == ref2["param_hash"],
       f"2 replicas: param_hash {hexhash(two)}, the tool's {ref2['param_hash']}")

# The same pixels as NumPy arrays give the same run.
x, y = train.gather()
pixels = np.rint(x * 255).astype(np.uint8).reshape(600, 28, 28)
arrays = dptrain.Dataset.from_numpy(pixels, y.astype(np.int64))
same = dptrain.train(dptrain.mlp(hidden=(64, 32)), arrays, test, **settings)
expect(same.report.param_hash == model.report.param_hash,
       "Dataset.from_numpy, uint8 [N, H, W]: the same run")
floats = dptrain.Dataset.from_numpy(x, y)  # float32 [N, 1, H, W]: pixel / 255 as gathered
expect(floats.shape == (1, 28, 28) and floats._samples is x, "from_numpy uses x in place")
same = dptrain.train(dptrain.mlp(hidden=(64, 32)), floats, test, **settings)
expect(same.report.param_hash == model.report.param_hash,
       "Dataset.from_numpy, float32 [N, C, H, W]: the same run")

# Normalization, and weights files both ways.
norm = dptrain.train(dptrain.mlp(hidden=(64, 32)), train, test, mean=0.25, std=0.3, **settings)
refn = tool("--epochs", "2", "--mean", "0.25", "--std", "0.3")
expect(hexhash(norm) == refn["param_hash"],
       f"mean/std: param_hash {hexhash(norm)}, the tool's {refn['param_hash']}")
path = os.path.join(SCRATCH, "norm.safetensors")
norm.save(path)
back = dptrain.load(path)
expect(np.array_equal(back.state, norm.state) and back.mean == norm.mean and back.std == norm.std,
       "save, load: the same state and normalization")
expect(np.array_equal(back.predict(test), norm.predict(test)), "load: the same logits")
expect(sorted(back.tensors()) == ["1.bias", "1.weight", "3.bias", "3.weight", "5.bias",
                                  "5.weight"] and back.tensors()["1.weight"].shape == (64, 784),
       f"tensors: the state_dict {sorted((k, v.shape) for k, v in back.tensors().items())}")
more = dptrain.train(back, train, test, **dict(settings, epochs=1), mean=0.25, std=0.3)
refi = tool("--epochs", "1", "--mean", "0.25", "--std", "0.3", "--init-weights", path)
expect(hexhash(more) == refi["param_hash"],
       f"from saved weights: param_hash {hexhash(more)}, the tool's {refi['param_hash']}")
tool_path = os.path.join(SCRATCH, "tool.safetensors")
tool("--epochs", "2", "--save-weights", tool_path)
expect(dptrain.load(tool_path).param_hash == model.report.param_hash,
       "load: the tool's weights file holds the module's state")


# Failures: the library's message in dptrain.Error; Python's own for Python's mistakes.
def raises(fn, kind, text):
    try:
        fn()
    except kind as e:
        return text in str(e)
    return False


missing = os.path.join(SCRATCH, "no-such-dir", "x.safetensors")
expect(raises(lambda: dptrain.Dataset.load(missing), dptrain.Error, missing),
       "a missing file: dptrain.Error naming it")
try:
    dptrain.train(dptrain.mlp(), train, global_batch=0, backend="cpu")
except dptrain.Error as e:
    expect(e.name == "DPT_ERR_INVALID_ARG" and "batch" in e.message,
           f"global_batch=0: {e.name}: {e.message}")
else:
    expect(False, "global_batch=0 refused")
expect(raises(lambda: dptrain.train(dptrain.mlp(), train, batchsize=8), TypeError, "batchsize"),
       "an unknown setting: TypeError naming it")
expect(raises(lambda: dptrain.train(dptrain.mlp(), train, optimizer="adam"), ValueError,
              "adamw"), "an unknown optimizer: ValueError listing the valid ones")


seen = []


def stop(epoch, batch, batches, loss):
    seen.append(epoch)
    if epoch == 2:
        raise KeyError("stop here")


expect(raises(lambda: dptrain.train(dptrain.mlp(), train, backend="cpu", on_step=stop),
              KeyError, "stop here") and seen == [1, 1, 2],
       f"a callback's exception ends the run after its step and is raised: steps {seen}")
interrupted = []


def ctrl_c(epoch, batch, batches, loss):
    interrupted.append(epoch)
    if len(interrupted) == 1:
        os.kill(os.getpid(), signal.SIGINT)


expect(raises(lambda: dptrain.train(dptrain.mlp(), train, backend="cpu", epochs=3,
                                    on_step=ctrl_c), KeyboardInterrupt, "after step 2") and
       interrupted == [1, 1] and signal.getsignal(signal.SIGINT) is signal.default_int_handler,
       f"SIGINT stops the run at the next step's exchange (2 of 6): KeyboardInterrupt, "
       f"steps {interrupted}")
expect(raises(lambda: dptrain.Dataset.from_numpy(x.astype(np.float64), y), TypeError, "float32"),
       "from_numpy: float64 samples refused")
bad = x.copy()
bad[5, 0, 3, 4] = np.inf
expect(raises(lambda: dptrain.Dataset.from_numpy(bad, y), dptrain.Error, "sample 5"),
       "from_numpy: a non-finite value named by its sample")
expect(raises(lambda: dptrain.from_json('{"layers": []}'), dptrain.Error, "input"),
       "bad model JSON: dptrain.Error")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
