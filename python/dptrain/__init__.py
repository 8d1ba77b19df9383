"""dptrain: data-parallel training on any GPU, from Python.

    import dptrain
    model = dptrain.train(dptrain.mlp(), dptrain.Dataset.load(), epochs=1)
    model.save("mlp.safetensors")

The training tier of the C library (dptrain/dptrain.h) through a cffi extension module: models
(mlp, cnn, resnet, model_file, from_json, load), data sets (Dataset), training (train, with
callbacks per step and per epoch; one replica per rank under mpirun), evaluation, prediction and
weights files. A failed call raises dptrain.Error with the library's message. docs/python.md.
"""

from dptrain._lib import Error, ffi, lib
from dptrain.data import FASHION_MNIST, Dataset
from dptrain.model import (Model, Spec, cnn, from_json, load, mlp, model_file, resnet,
                           spec_from_weights)
from dptrain.training import Report, mpi_launched, rank, train, world_size

__version__ = "0.1.0"

__all__ = ["Error", "Dataset", "FASHION_MNIST", "Model", "Report", "Spec", "cnn", "devices",
           "fingerprint", "from_json", "library_version", "load", "mlp", "model_file",
           "mpi_launched", "rank", "resnet", "spec_from_weights", "train", "world_size"]


def library_version():
    """The version of the C library actually loaded ("0.1.0")."""
    return ffi.string(lib.dpt_version()).decode()


def fingerprint(array):
    """dpt_fingerprint of an array's bytes: for a model's state, the reports' param_hash."""
    import numpy as np

    a = np.ascontiguousarray(array)
    return int(lib.dpt_fingerprint(ffi.from_buffer("char[]", a), a.nbytes))


def devices():
    """Every device found: a list of (backend, index, type, name) tuples."""
    out = []
    count = ffi.new("int *")
    info = ffi.new("dpt_device_info *")
    for kind in range(lib.DPT_BACKEND_KIND_COUNT):
        if not lib.dpt_backend_compiled(kind) or lib.dpt_device_count(kind, count) != lib.DPT_OK:
            continue
        for d in range(count[0]):
            if lib.dpt_device_get_info(kind, d, info) == lib.DPT_OK:
                out.append((ffi.string(lib.dpt_backend_kind_name(kind)).decode(), d,
                            ffi.string(lib.dpt_device_type_name(info.type)).decode(),
                            ffi.string(info.name).decode(errors="replace")))
    return out
