"""Models: specs (the builders, model files, JSON, weights files) and trained weights."""

import os

import numpy as np

from dptrain._lib import check, cstr, ffi, lib, string
from dptrain.data import Dataset


class Spec:
    """A model description (dpt_model_spec). The builders leave the sample shape and the classes
    to the data (train() takes them from its training set); a spec read from JSON text or a
    weights file states its own."""

    def __init__(self, build, text):
        self._build = build  # (c, h, w, classes) -> dpt_model_spec *
        self._text = text

    def build(self, shape, num_classes):
        """The C spec for samples of `shape` (channels, rows, cols) and `num_classes`."""
        c, h, w = (int(v) for v in shape)
        return self._build(c, h, w, int(num_classes))

    def to_json(self, shape=None, num_classes=None):
        """The model file text (docs/layers.md) for that shape and classes."""
        spec = self.build(shape or (0, 0, 0), num_classes or 0)
        out = ffi.new("char **")
        check(lib.dpt_model_spec_to_json(spec, out))
        try:
            return ffi.string(out[0]).decode()
        finally:
            lib.free(out[0])

    def __repr__(self):
        return f"dptrain.{self._text}"


def _builder(fn, *args):
    def build(c, h, w, classes):
        spec = ffi.new("dpt_model_spec *")
        check(fn(spec, c, h, w, *args, classes))
        return spec

    return build


def mlp(hidden=(512, 256)):
    """flatten, then linear + relu per hidden size, then linear to the classes."""
    sizes = [int(v) for v in hidden]
    arr = ffi.new("size_t[]", sizes or [0])
    return Spec(_builder(lambda s, c, h, w, cl: lib.dpt_model_spec_mlp(s, c, h, w, arr,
                                                                       len(sizes), cl)),
                f"mlp(hidden={tuple(sizes)})")


def cnn(channels=(32, 64)):
    """Two blocks conv3x3-relu-maxpool2 with these channels, then linear to the classes."""
    c1, c2 = (int(v) for v in channels)
    return Spec(_builder(lib.dpt_model_spec_cnn, c1, c2), f"cnn(channels=({c1}, {c2}))")


def resnet(depth=20):
    """A CIFAR-style ResNet of depth 6n+2 (20, 32, 44, 56, 110)."""
    return Spec(_builder(lib.dpt_model_spec_resnet, int(depth)), f"resnet(depth={int(depth)})")


def model_file(path):
    """A JSON model file (docs/layers.md); its "input" and "classes", when given, must agree
    with the data."""
    p = os.fspath(path)

    def build(c, h, w, classes):
        spec = ffi.new("dpt_model_spec *")
        check(lib.dpt_model_spec_load_json(cstr(p), c, h, w, classes, spec))
        return spec

    return Spec(build, f"model_file({p!r})")


def _fixed(spec, text):
    def build(c, h, w, classes):
        # The values per sample must agree (an MLP takes 1 x 28 x 28 or 1 x 1 x 784 alike);
        # the library checks the rest.
        if (c or h or w or classes) and (c * h * w, classes) != (
                spec.in_c * spec.in_h * spec.in_w, spec.num_classes):
            raise ValueError(f"{text} is for samples {(spec.in_c, spec.in_h, spec.in_w)} and "
                             f"{spec.num_classes} classes, not {(c, h, w)} and {classes}")
        return spec

    return Spec(build, text)


def from_json(text):
    """A model from model-file text that states "input" and "classes"."""
    spec = ffi.new("dpt_model_spec *")
    check(lib.dpt_model_spec_parse_json(cstr(text), cstr("<json>"), spec))
    return _fixed(spec, "from_json(...)")


def spec_from_weights(path):
    """The model whose weights a file written by dptrain holds (its metadata)."""
    spec = ffi.new("dpt_model_spec *")
    check(lib.dpt_model_spec_from_weights(cstr(os.fspath(path)), spec))
    return _fixed(spec, f"spec_from_weights({os.fspath(path)!r})")


class _Host:
    """A model on the CPU backend for host-side work (init, predict, files)."""

    def __init__(self, spec, max_batch):
        be = ffi.new("dpt_backend **")
        check(lib.dpt_backend_create(lib.DPT_BACKEND_CPU, 0, be))
        self.backend = be[0]
        m = ffi.new("dpt_model **")
        st = lib.dpt_model_create(self.backend, spec, max_batch, m)
        if st != lib.DPT_OK:
            msg = string(lib.dpt_last_error())
            lib.dpt_backend_destroy(self.backend)
            check(st, msg)
        self.model = m[0]
        self.max_batch = max_batch

    def __del__(self):
        if getattr(self, "model", None) is not None:
            lib.dpt_model_destroy(self.model)
        if getattr(self, "backend", None) is not None:
            lib.dpt_backend_destroy(self.backend)


class Model:
    """A model's description and its state (parameters, then buffers such as batch norm's
    running statistics) in host memory, as float32 [state_size]: what train() returns, what
    load() reads. `mean` and `std`, when set, normalize inputs in predict and evaluate as the
    training did, and travel in the weights file's metadata as `dptrain train` writes them."""

    def __init__(self, spec, state=None, mean=None, std=None):
        self._spec = spec  # dpt_model_spec *, owned
        self._host = _Host(spec, 1)
        n = int(lib.dpt_model_state_size(self._host.model))
        self.state = np.zeros(n, dtype=np.float32) if state is None else state
        if self.state.shape != (n,) or self.state.dtype != np.float32:
            raise ValueError(f"state must be float32 [{n}]")
        # float32 values, as the library normalizes with
        self.mean = None if mean is None else [float(np.float32(v)) for v in mean]
        self.std = None if std is None else [float(np.float32(v)) for v in std]
        self.report = None  # train(): the closing report
        self.reports = []  # train(): the per-epoch reports (rank 0)

    @classmethod
    def init(cls, spec, shape, num_classes, seed=0):
        """A model with PyTorch's default initialization from `seed`, as train() starts."""
        model = cls(spec.build(shape, num_classes))
        check(lib.dpt_model_init(model._host.model, seed))
        model._pull()
        return model

    def _pull(self):
        out = ffi.from_buffer("float[]", self.state, require_writable=True)
        check(lib.dpt_model_get_state(self._host.model, out))

    def _push(self, host):
        check(lib.dpt_model_set_state(host.model, ffi.from_buffer("float[]", self.state)))

    @property
    def spec(self):
        s = self._spec
        return _fixed(s, "Model.spec")

    @property
    def input_shape(self):
        return (int(self._spec.in_c), int(self._spec.in_h), int(self._spec.in_w))

    @property
    def num_classes(self):
        return int(self._spec.num_classes)

    @property
    def num_params(self):
        return int(lib.dpt_model_num_params(self._host.model))

    @property
    def param_hash(self):
        """The fingerprint of the state (dpt_fingerprint), as the training reports give it."""
        return int(lib.dpt_fingerprint(ffi.from_buffer("float[]", self.state),
                                       self.state.nbytes))

    def to_json(self):
        return self.spec.to_json()

    def tensors(self):
        """The state_dict: name -> a view of the state, shaped as PyTorch's."""
        out = {}
        info = ffi.new("dpt_tensor_info *")
        m = self._host.model
        base = self.num_params
        for count, get, off in ((lib.dpt_model_num_tensors(m), lib.dpt_model_tensor, 0),
                                (lib.dpt_model_num_buffers(m), lib.dpt_model_buffer_info, base)):
            for i in range(count):
                check(get(m, i, info))
                shape = tuple(int(info.shape[d]) for d in range(info.ndim))
                start = off + int(info.offset)
                out[string(info.name)] = self.state[start:start + int(info.count)].reshape(shape)
        return out

    def _inputs(self, x):
        """x as float32 [n, input_size], normalized as in training."""
        if isinstance(x, Dataset):
            x = x.gather()[0]
        x = np.asarray(x)
        x = x.astype(np.float32) / np.float32(255.0) if x.dtype == np.uint8 else x.astype(
            np.float32, copy=False)
        size = int(np.prod(self.input_shape))
        if x.size % size != 0:
            raise ValueError(f"inputs of {x.shape} do not divide into samples of "
                             f"{self.input_shape}")
        x = x.reshape(-1, *self.input_shape)
        if self.mean is not None:
            c = self.input_shape[0]
            mean = np.resize(np.asarray(self.mean, np.float32), c).reshape(1, c, 1, 1)
            std = np.resize(np.asarray(self.std, np.float32), c).reshape(1, c, 1, 1)
            x = (x - mean) / std
        return np.ascontiguousarray(x.reshape(-1, size), dtype=np.float32)

    def predict(self, x, batch_size=256):
        """The logits [n, classes] for samples x: a Dataset, or an array of n samples (uint8
        pixels, divided by 255 as the data sets do, or float32 values), in evaluation mode."""
        x = self._inputs(x)
        if self._host.max_batch < min(batch_size, len(x)):
            self._host = _Host(self._spec, min(batch_size, len(x)))
        self._push(self._host)
        logits = np.empty((len(x), self.num_classes), dtype=np.float32)
        step = self._host.max_batch
        for i in range(0, len(x), step):
            check(lib.dpt_model_predict(self._host.model, ffi.from_buffer("float[]", x[i:i + step]),
                                        len(x[i:i + step]),
                                        ffi.from_buffer("float[]", logits[i:i + step],
                                                        require_writable=True)))
        return logits

    def evaluate(self, x, y=None, batch_size=256):
        """{"loss": mean cross-entropy, "accuracy": fraction correct} on a Dataset, or on
        samples x with labels y."""
        if isinstance(x, Dataset):
            x, y = x.gather()
        logits = self.predict(x, batch_size).astype(np.float64)
        y = np.asarray(y).astype(np.int64).reshape(-1)
        if self.num_classes == 1:  # binary cross-entropy with logits
            z = logits[:, 0]
            loss = np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))
            return {"loss": float(loss.mean()), "accuracy": float(((z > 0) == (y == 1)).mean())}
        shifted = logits - logits.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        loss = -logp[np.arange(len(y)), y]
        return {"loss": float(loss.mean()), "accuracy": float((logits.argmax(1) == y).mean())}

    def save(self, path):
        """Writes the weights as safetensors (PyTorch's state_dict names and shapes; the model's
        description and normalization in the metadata)."""
        keep = [cstr(os.fspath(path))]
        extra = ffi.NULL
        if self.mean is not None:
            vals = [",".join(f"{v:.9g}" for v in self.mean), ",".join(f"{v:.9g}" for v in self.std)]
            keep += [cstr(t) for t in ("dptrain.mean", vals[0], "dptrain.std", vals[1])]
            extra = ffi.new("char *[]", keep[1:] + [ffi.NULL])
        state = ffi.from_buffer("float[]", self.state)
        check(lib.dpt_model_save_params_meta(self._host.model, state, keep[0], extra))

    def __repr__(self):
        return (f"Model({self.num_params} parameters, input {self.input_shape}, "
                f"{self.num_classes} classes)")


def _metadata_floats(path, key):
    st = ffi.new("dpt_safetensors **")
    check(lib.dpt_safetensors_open(cstr(path), st))
    try:
        text = string(lib.dpt_safetensors_metadata(st[0], cstr(key)))
    finally:
        lib.dpt_safetensors_close(st[0])
    return None if not text else [float(np.float32(v)) for v in text.split(",")]


def load(path):
    """A model from a weights file that dptrain wrote (train()'s save, `dptrain train
    --save-weights`): its description from the metadata, checked like PyTorch's strict
    load_state_dict."""
    p = os.fspath(path)
    spec = ffi.new("dpt_model_spec *")
    check(lib.dpt_model_spec_from_weights(cstr(p), spec))
    model = Model(spec, mean=_metadata_floats(p, "dptrain.mean"),
                  std=_metadata_floats(p, "dptrain.std"))
    check(lib.dpt_model_load_params(model._host.model, cstr(p),
                                    ffi.from_buffer("float[]", model.state, require_writable=True)))
    return model
