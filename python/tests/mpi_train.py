"""Under mpirun: every rank one replica of the same run as test_module.py's first; each rank
writes one line to OUT_DIR/rank-R.txt (a file: the launcher may interleave the ranks' output):
its rank, the world size, the report's param_hash and the state's (rank 0 only). Then one epoch
more from the trained model, which every rank must start from rank 0's weights.
Usage: mpirun -np N python3 mpi_train.py DATA_DIR OUT_DIR"""

import sys

import dptrain

data = dptrain.Dataset.load(sys.argv[1])
model = dptrain.train(dptrain.mlp(hidden=(64, 32)), data, backend="cpu", seed=3, global_batch=64,
                      epochs=2)
# Training on from there: rank 0's weights start every rank (the others hold none).
more = dptrain.train(model, data, backend="cpu", seed=3, global_batch=64, epochs=1)
assert (more.state is None) == (dptrain.rank() != 0) and more.report.steps == 9
state = "-" if model.state is None else f"{model.param_hash:016x}"
with open(f"{sys.argv[2]}/rank-{dptrain.rank()}.txt", "w") as f:
    print(f"rank {dptrain.rank()} of {dptrain.world_size()}: param_hash "
          f"{model.report.param_hash:016x} state {state}", file=f)
