"""train(): dpt_train with a Pythonic configuration, callbacks, and MPI ranks."""

import atexit
import signal
import threading

import numpy as np

from dptrain._lib import Error, check, cstr, ffi, lib, string
from dptrain.data import Dataset
from dptrain.model import Model, Spec

# ---- reports ------------------------------------------------------------------------------

_REPORT_FIELDS = (
    "final", "epoch", "steps", "skipped_steps", "train_loss", "test_loss", "test_accuracy",
    "test_perplexity", "test_auc", "test_logloss", "labels_per_sample", "samples_per_sec",
    "seconds", "ranks", "replicas", "param_hash", "compute_seconds", "allreduce_seconds",
    "optimizer_seconds", "exchange_seconds", "exposed_seconds", "imbalance_seconds",
    "rollbacks", "checkpoints", "checkpoint_seconds", "num_params", "activation_bytes")


class Report:
    """What dpt_train reports after an epoch, and at the end (final True): the fields of
    dpt_train_report (param_hash as an int; hex(report.param_hash) as `dptrain train` prints
    it), backend and checkpoint as str or None."""

    def __init__(self, rep):
        for name in _REPORT_FIELDS:
            setattr(self, name, getattr(rep, name))
        self.final = bool(self.final)
        self.param_hash = int(self.param_hash)
        self.backend = string(rep.backend)
        self.checkpoint = string(rep.checkpoint)

    def as_dict(self):
        return {k: getattr(self, k) for k in _REPORT_FIELDS + ("backend", "checkpoint")}

    def __repr__(self):
        what = "final" if self.final else f"epoch {self.epoch}"
        return (f"Report({what}, steps {self.steps}, test_accuracy {self.test_accuracy:.4f}, "
                f"param_hash {self.param_hash:016x})")


# ---- MPI ----------------------------------------------------------------------------------

_mpi = None  # this process's MPI communicator: MPI can be initialized only once per process


def _close_mpi():
    global _mpi
    if _mpi is not None:
        lib.dpt_comm_destroy(_mpi)
        _mpi = None


def mpi_launched():
    """True when an MPI launcher (mpirun, srun) started this process."""
    return bool(lib.dpt_comm_mpi_launched())


def _mpi_comm():
    global _mpi
    if _mpi is None:
        out = ffi.new("dpt_comm **")
        check(lib.dpt_comm_create_mpi(ffi.NULL, out))
        _mpi = out[0]
        atexit.register(_close_mpi)
        check(lib.dpt_comm_check_launch(_mpi))
    return _mpi


def rank():
    """This process's MPI rank (0 without mpirun)."""
    return int(lib.dpt_comm_rank(_mpi_comm())) if mpi_launched() else 0


def world_size():
    """The MPI ranks (1 without mpirun)."""
    return int(lib.dpt_comm_size(_mpi_comm())) if mpi_launched() else 1


# ---- the configuration --------------------------------------------------------------------


def _names(count, name_fn):
    return {ffi.string(name_fn(k)).decode(): k for k in range(count)}


def _choice(value, table, what):
    if value not in table:
        raise ValueError(f"{what} {value!r}: one of {', '.join(table)}")
    return table[value]


def _backend(name):
    if name != "auto":
        return _choice(name, _names(lib.DPT_BACKEND_KIND_COUNT, lib.dpt_backend_kind_name),
                       "backend")
    # As `dptrain train --backend auto`: the first GPU of OpenCL, then Vulkan; else the CPU.
    count = ffi.new("int *")
    info = ffi.new("dpt_device_info *")
    for kind in (lib.DPT_BACKEND_OPENCL, lib.DPT_BACKEND_VULKAN):
        if not lib.dpt_backend_compiled(kind) or lib.dpt_device_count(kind, count) != lib.DPT_OK:
            continue
        for d in range(count[0]):
            if lib.dpt_device_get_info(kind, d, info) == lib.DPT_OK and info.type not in (
                    lib.DPT_DEVICE_CPU, lib.DPT_DEVICE_OTHER):
                return kind
    return lib.DPT_BACKEND_CPU


def _set_optim(o, kw):
    o.kind = _choice(kw.pop("optimizer"), _names(lib.DPT_OPTIM_KIND_COUNT, lib.dpt_optim_kind_name),
                     "optimizer")
    lib.dpt_optim_config_default(ffi.addressof(o), o.kind)
    if o.kind == lib.DPT_OPTIM_SGD:  # dptrain train's SGD: lr 0.05, momentum 0.9, no decay
        o.lr, o.momentum, o.weight_decay = 0.05, 0.9, 0.0
    o.schedule = _choice(kw.pop("schedule"),
                         _names(lib.DPT_SCHEDULE_KIND_COUNT, lib.dpt_schedule_kind_name),
                         "schedule")
    for key, field in (("lr", "lr"), ("momentum", "momentum"), ("nesterov", "nesterov"),
                       ("weight_decay", "weight_decay"), ("eps", "eps"),
                       ("warmup", "warmup_steps"), ("step_size", "step_size"),
                       ("gamma", "gamma"), ("min_lr", "min_lr"), ("clip_norm", "clip_norm"),
                       ("decay_weights_only", "decay_weights_only")):
        value = kw.pop(key)
        if value is not None:
            setattr(o, field, int(value) if isinstance(value, bool) else value)
    betas = kw.pop("betas")
    if betas is not None:
        o.beta1, o.beta2 = betas


_DEFAULTS = dict(
    # schedule
    global_batch=256, epochs=10, max_steps=0, seed=0, shuffle=True, keep_last=False, accumulate=0,
    # optimizer: dptrain train's defaults
    optimizer="sgd", lr=None, momentum=None, nesterov=None, weight_decay=None, betas=None,
    eps=None, schedule="cosine", warmup=None, step_size=None, gamma=None, total_steps=None,
    min_lr=None, clip_norm=None, decay_weights_only=None, no_decay=None,
    # devices
    backend="auto", device=-1, replicas=1, split="even", split_every=0,
    # data
    mean=None, std=None, random_crop=0, hflip=False,
    # exchange
    bucket_mb=0.0, bucket_whole_update=False, full_step=False, grad_dtype="f32",
    error_feedback=False, sync_bn=False,
    # checkpoints
    checkpoint_dir=None, checkpoint_every=0, checkpoint_minutes=None, keep_checkpoints=3,
    resume=False,
    # checks
    check_every=100, on_nonfinite="stop", max_skipped=10, max_rollbacks=3, rollback_lr_scale=1.0,
    # outputs
    trace=None, log_dir=None, init=None)


class _Run:
    """One dpt_train call's configuration and everything it points to, alive for the call."""

    def __init__(self, spec, train, test, kw):
        self.keep = []  # the C strings and arrays the configuration borrows
        self.mem = ffi.new("dpt_py_run *")
        cfg = self.cfg = ffi.addressof(self.mem, "cfg")
        check(lib.dpt_train_config_default(cfg))
        cfg.model = spec[0]
        cfg.data.train = train._ptr
        cfg.data.test = test._ptr if test is not None else ffi.NULL
        self._schedule(kw)
        _set_optim(cfg.optim, kw)
        self._devices(kw)
        self._transform(kw)
        self._exchange(kw)
        self._checkpoints(kw)
        self._checks(kw)
        cfg.trace = self._str(kw.pop("trace"))
        cfg.log_dir = self._str(kw.pop("log_dir"))
        cfg.optim.no_decay = self._str(kw.pop("no_decay"))
        self._plan(len(train), kw.pop("total_steps"))

    def _str(self, value):
        if value is None:
            return ffi.NULL
        self.keep.append(cstr(str(value)))
        return self.keep[-1]

    def _schedule(self, kw):
        s = self.cfg.schedule
        s.global_batch, s.epochs = kw.pop("global_batch"), kw.pop("epochs")
        s.max_steps = kw.pop("max_steps")
        s.seed, s.shuffle, s.keep_last = kw.pop("seed"), kw.pop("shuffle"), kw.pop("keep_last")
        s.accumulate = kw.pop("accumulate")

    def _devices(self, kw):
        d = self.cfg.devices
        d.backend = _backend(kw.pop("backend"))
        d.device, d.replicas = kw.pop("device"), kw.pop("replicas")
        d.split_every = kw.pop("split_every")
        d.split = _choice(kw.pop("split"), {"even": lib.DPT_SPLIT_EVEN,
                                            "proportional": lib.DPT_SPLIT_PROPORTIONAL}, "split")

    def _transform(self, kw):
        t = self.cfg.data.transform
        mean, std = kw.pop("mean"), kw.pop("std")
        if (mean is None) != (std is None):
            raise ValueError("mean and std go together")
        if mean is not None:
            m = np.atleast_1d(np.asarray(mean, dtype=np.float32))
            sd = np.atleast_1d(np.asarray(std, dtype=np.float32))
            if m.shape != sd.shape:
                raise ValueError(f"mean and std differ in length ({m.size} and {sd.size})")
            self.keep += [ffi.new("float[]", list(m)), ffi.new("float[]", list(sd))]
            t.channels, t.mean, t.std = m.size, self.keep[-2], self.keep[-1]
            self.mean, self.std = [float(v) for v in m], [float(v) for v in sd]
        else:
            self.mean = self.std = None
        t.crop_pad, t.hflip = kw.pop("random_crop"), kw.pop("hflip")
        t.seed = self.cfg.schedule.seed

    def _exchange(self, kw):
        e = self.cfg.exchange
        mb = kw.pop("bucket_mb")
        e.bucket_bytes = lib.DPT_BUCKET_AUTO if mb == "auto" else int(mb * (1 << 20))
        e.bucket_whole_update = kw.pop("bucket_whole_update")
        e.full_optimizer_step, e.sync_bn = kw.pop("full_step"), kw.pop("sync_bn")
        dtypes = {"f32": lib.DPT_COMM_F32, "f16": lib.DPT_COMM_F16, "bf16": lib.DPT_COMM_BF16}
        e.grad_dtype = _choice(kw.pop("grad_dtype"), dtypes, "grad_dtype")
        e.grad_error_feedback = kw.pop("error_feedback")

    def _checkpoints(self, kw):
        c = self.cfg.checkpoints
        c.checkpoint_dir = self._str(kw.pop("checkpoint_dir"))
        c.checkpoint_every = kw.pop("checkpoint_every")
        minutes = kw.pop("checkpoint_minutes")
        # As dptrain train: with a directory, one every 10 minutes unless said otherwise.
        c.checkpoint_minutes = minutes if minutes is not None else (10 if c.checkpoint_dir else 0)
        c.keep_checkpoints, c.resume = kw.pop("keep_checkpoints"), kw.pop("resume")

    def _checks(self, kw):
        c = self.cfg.checks
        c.check_every, c.max_skipped = kw.pop("check_every"), kw.pop("max_skipped")
        c.max_rollbacks, c.rollback_lr_scale = kw.pop("max_rollbacks"), kw.pop("rollback_lr_scale")
        c.on_nonfinite = _choice(kw.pop("on_nonfinite"), {
            "stop": lib.DPT_NONFINITE_STOP, "skip": lib.DPT_NONFINITE_SKIP,
            "rollback": lib.DPT_NONFINITE_ROLLBACK}, "on_nonfinite")

    def _plan(self, n, total_steps):
        """A cosine or linear schedule anneals over the whole run after the warmup, as
        `dptrain train` plans it, unless total_steps is given."""
        o, s = self.cfg.optim, self.cfg.schedule
        per_epoch = int(lib.dpt_sampler_num_batches(n, s.global_batch, s.keep_last))
        ck = self.cfg.checkpoints
        if ck.checkpoint_dir != ffi.NULL and ck.checkpoint_every == 0:
            ck.checkpoint_every = per_epoch  # as dptrain train: one per epoch
        if total_steps is not None:
            o.total_steps = total_steps
            return
        if o.schedule not in (lib.DPT_SCHEDULE_COSINE, lib.DPT_SCHEDULE_LINEAR):
            return
        total = per_epoch * s.epochs
        if s.max_steps > 0:
            total = min(total, s.max_steps)
        o.total_steps = max(total - o.warmup_steps, 1)


def _as_spec(model):
    if isinstance(model, Spec):
        return model
    if isinstance(model, Model):
        return model.spec
    raise TypeError(f"model must be a dptrain.Spec (mlp(), cnn(), ...) or a Model, not "
                    f"{type(model).__name__}")


class _Callbacks:
    """The Python callbacks of one run, called from the library's replica 0 thread. The first
    exception a callback raises stops the run after its step; train() raises it."""

    def __init__(self, on_step, on_epoch, on_log):
        self.on_step, self.on_epoch, self.on_log = on_step, on_epoch, on_log
        self.reports = []
        self.error = None
        self.run = None

    def call(self, fn, *args):
        if self.error is not None:
            return
        try:
            fn(*args)
        except BaseException as e:  # noqa: B036 - re-raised by train()
            self.error = e
            lib.dpt_py_request_stop(self.run)


@ffi.def_extern()
def dpt_py_on_report(rep, user):
    cb = ffi.from_handle(user)
    report = Report(rep)
    if not report.final:
        cb.reports.append(report)
        if cb.on_epoch is not None:
            cb.call(cb.on_epoch, report)


@ffi.def_extern()
def dpt_py_on_progress(epoch, batch, batches, loss, user):
    cb = ffi.from_handle(user)
    if cb.on_step is not None:
        cb.call(cb.on_step, int(epoch), int(batch), int(batches), float(loss))


@ffi.def_extern()
def dpt_py_on_log(line, user):
    cb = ffi.from_handle(user)
    if cb.on_log is not None:
        cb.call(cb.on_log, string(line))


def train(model, data, test=None, *, on_step=None, on_epoch=None, on_log=None, mpi=None,
          **config):
    """Trains `model` (a Spec: mlp(), cnn(), resnet(), model_file(), ...; or a Model, whose
    state is the starting point) on the Dataset `data`, testing on `test` after every epoch,
    and returns the trained Model with its closing Report in .report and the per-epoch ones in
    .reports.

    Under mpirun (or with mpi=True) every rank is one replica (dpt_comm_create_mpi); the
    returned model holds the weights on rank 0 (the other ranks' .state is None), the report on
    every rank. Otherwise `replicas` replicas run as threads of this process.

    on_step(epoch, batch, batches, loss) after every step and on_epoch(report) after every
    epoch run on rank 0; on_log(line) gets the library's news (checkpoints, resumes). An
    exception in a callback stops the run after its step, and train() raises it; so does
    SIGINT (KeyboardInterrupt) while train() runs on the main thread.

    config: keyword arguments for dpt_train_config, with `dptrain train`'s defaults (see
    docs/python.md; each named as the option of `dptrain train`): global_batch, epochs,
    max_steps, seed, shuffle, keep_last, accumulate; optimizer, lr, momentum, nesterov,
    weight_decay, betas, eps, schedule, warmup, step_size, gamma, total_steps, min_lr,
    clip_norm, decay_weights_only, no_decay; backend, device, replicas, split, split_every;
    mean, std, random_crop, hflip; bucket_mb, bucket_whole_update, full_step, grad_dtype,
    error_feedback, sync_bn; checkpoint_dir, checkpoint_every, checkpoint_minutes,
    keep_checkpoints, resume; check_every, on_nonfinite, max_skipped, max_rollbacks,
    rollback_lr_scale; trace, log_dir; init (a Model to start from).
    """
    unknown = sorted(set(config) - set(_DEFAULTS))
    if unknown:
        raise TypeError(f"train() got unknown settings: {', '.join(unknown)}")
    if not isinstance(data, Dataset) or (test is not None and not isinstance(test, Dataset)):
        raise TypeError("data and test must be dptrain.Dataset")
    kw = dict(_DEFAULTS, **config)
    init = kw.pop("init")
    start = model if isinstance(model, Model) else init
    spec = _as_spec(model).build(data.shape, data.num_classes)
    run = _Run(spec, data, test, kw)
    assert not kw, f"settings left unused: {sorted(kw)}"
    comm = _mpi_comm() if (mpi if mpi is not None else mpi_launched()) else ffi.NULL

    final_model = Model(spec, mean=run.mean, std=run.std)
    final_model.state.fill(np.nan)  # rank 0 gets the weights; other ranks see None
    cfg = run.cfg
    # A model from an earlier run under MPI holds its state on rank 0 only; dpt_train broadcasts
    # rank 0's parameters and buffers at the start, so the other ranks need none.
    if start is not None and start.state is not None:
        init = np.ascontiguousarray(start.state, dtype=np.float32)
        if init.shape != final_model.state.shape:
            raise ValueError(f"init has {init.size} values, the model {final_model.state.size}")
        run.keep.append(init)
        cfg.init_params = ffi.from_buffer("float[]", init)
    cfg.final_params = ffi.from_buffer("float[]", final_model.state, require_writable=True)

    cb = _Callbacks(on_step, on_epoch, on_log)
    handle = ffi.new_handle(cb)
    cb.run = run.mem
    cfg.callbacks.on_report = lib.dpt_py_on_report
    cfg.callbacks.on_progress = lib.dpt_py_on_progress
    cfg.callbacks.on_log = lib.dpt_py_on_log
    cfg.callbacks.user = handle
    lib.dpt_py_arm_stop(run.mem)

    rep = ffi.new("dpt_train_report *")
    main = threading.current_thread() is threading.main_thread()
    if main:
        lib.dpt_py_catch_signals(run.mem)
    try:
        st = lib.dpt_train(cfg, comm, rep)
    finally:
        sig = lib.dpt_py_release_signals(run.mem) if main else 0
    if cb.error is not None:
        raise cb.error
    if sig == signal.SIGINT and st == lib.DPT_ERR_INTERRUPTED:
        raise KeyboardInterrupt(string(lib.dpt_last_error()))
    if st != lib.DPT_OK:
        raise Error(st, string(lib.dpt_last_error()))
    if comm != ffi.NULL and lib.dpt_comm_rank(comm) != 0:
        final_model.state = None
    final_model.report = Report(rep)
    final_model.reports = cb.reports
    return final_model
