"""Data sets: IDX directories and files, safetensors files, NumPy arrays."""

import os

import numpy as np

from dptrain._lib import check, cstr, ffi, lib

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


class Dataset:
    """Labelled samples of shape (channels, rows, cols) in host memory, immutable once built
    (dpt_dataset). Build one with Dataset.load, Dataset.idx or Dataset.from_numpy."""

    def __init__(self, handle):
        self._ptr = handle

    @classmethod
    def _make(cls, fn, *args):
        out = ffi.new("dpt_dataset **")
        check(fn(*args, out))
        return cls(ffi.gc(out[0], lib.dpt_dataset_destroy))

    @classmethod
    def load(cls, path=FASHION_MNIST, split="train", num_classes=0):
        """A directory of IDX files (split "train": train-*, "test": t10k-*, plain or .gz;
        10 classes unless given) or a safetensors file of x [N,C,H,W] or [N,F] and y [N]
        (classes: the largest label + 1 unless given), as `dptrain train --data` reads them."""
        path = os.fspath(path)
        if os.path.isdir(path):
            return cls._make(lib.dpt_dataset_load_dir, cstr(path), cstr(split), num_classes or 10)
        return cls._make(lib.dpt_dataset_load_safetensors, cstr(path), num_classes)

    @classmethod
    def idx(cls, images, labels, num_classes=10):
        """A pair of IDX files (images, labels), each plain or gzip-compressed."""
        return cls._make(lib.dpt_dataset_load_idx, cstr(os.fspath(images)),
                         cstr(os.fspath(labels)), num_classes)

    @classmethod
    def from_numpy(cls, x, y, num_classes=None):
        """Samples x and labels y as a data set, x used in place (dpt_dataset_wrap): uint8
        pixels (gathered as pixel / 255) or float32 values, of shape [N, C, H, W], [N, H, W]
        (one channel) or [N, F] (F features); y of any integer type, [N], each in
        [0, num_classes) (default: the largest label + 1), copied. The data set holds x (a
        C-contiguous array is not copied; another is copied once), which must not change
        while the data set lives: the replicas compare a fingerprint taken here."""
        x = np.asarray(x)
        y = np.asarray(y)
        types = {np.dtype(np.uint8): lib.DPT_SAMPLES_U8, np.dtype(np.float32): lib.DPT_SAMPLES_F32}
        if x.dtype not in types:
            raise TypeError(f"from_numpy: x must be uint8 or float32, not {x.dtype}")
        shapes = {2: lambda s: (1, 1, s[1]), 3: lambda s: (1, s[1], s[2]), 4: lambda s: s[1:]}
        if x.ndim not in shapes:
            raise ValueError(f"from_numpy: x must be [N, C, H, W], [N, H, W] or [N, F], not "
                             f"shape {x.shape}")
        if y.ndim != 1 or y.shape[0] != x.shape[0]:
            raise ValueError(f"from_numpy: y must be [N] = [{x.shape[0]}], not shape {y.shape}")
        if not np.issubdtype(y.dtype, np.integer):
            raise TypeError(f"from_numpy: y must hold integer labels, not {y.dtype}")
        c, h, w = shapes[x.ndim](x.shape)
        x = np.ascontiguousarray(x)
        labels = np.ascontiguousarray(y, dtype=np.int32)
        if num_classes is None:
            num_classes = int(labels.max()) + 1 if labels.size else 1
        ds = cls._make(lib.dpt_dataset_wrap, ffi.from_buffer(x), types[x.dtype],
                       ffi.from_buffer("int32_t[]", labels), x.shape[0], c, h, w,
                       int(num_classes))
        ds._samples = x  # borrowed by the library for the data set's life
        return ds

    def __len__(self):
        return int(lib.dpt_dataset_count(self._ptr))

    @property
    def shape(self):
        """One sample's shape: (channels, rows, cols)."""
        return (int(lib.dpt_dataset_channels(self._ptr)), int(lib.dpt_dataset_rows(self._ptr)),
                int(lib.dpt_dataset_cols(self._ptr)))

    @property
    def num_classes(self):
        return int(lib.dpt_dataset_num_classes(self._ptr))

    def gather(self, indices=None):
        """Samples as the model sees them (uint8 pixels / 255) and their labels: x float32
        [n, channels, rows, cols] and y int32 [n], for `indices` (default: all, in order)."""
        if indices is None:
            indices = np.arange(len(self), dtype=np.uint64)
        idx = np.ascontiguousarray(indices, dtype=np.uint64)
        x = np.empty((idx.shape[0],) + self.shape, dtype=np.float32)
        y = np.empty(idx.shape[0], dtype=np.int32)
        check(lib.dpt_dataset_gather(self._ptr, ffi.from_buffer("uint64_t[]", idx), idx.shape[0],
                                     ffi.from_buffer("float[]", x, require_writable=True),
                                     ffi.from_buffer("int32_t[]", y, require_writable=True)))
        return x, y

    def __repr__(self):
        return f"Dataset({len(self)} samples of {self.shape}, {self.num_classes} classes)"
