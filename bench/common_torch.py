#!/usr/bin/python3
"""Shared helpers for pfl's PyTorch reference benchmarks.

Run with Debian's interpreter (/usr/bin/python3, python3-torch 1.13); the
pyenv `python3` on PATH has no torch.

Everything here mirrors what PFLlib does for the same datasets/models:
  * datasets are the merged "train file samples, then test file samples"
    order that pfl's partition indices refer to;
  * pixels are normalized as transforms.Normalize(0.5, 0.5):
    (p/255 - 0.5)/0.5, per channel (CIFAR-10 uses the same 0.5/0.5 per channel);
  * models are PFLlib's FedAvgCNN / DNN (and a width-200 variant "mlp"),
    and torchvision's resnet18 (both stems) and the CIFAR AlexNet from
    scripts/torch_models.py, the modules the fixtures are made with.
"""

import gzip
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
import torch_models  # noqa: E402  (scripts/torch_models.py)

DATASETS = ("mnist", "fmnist", "cifar10")
MODELS = ("cnn", "dnn", "mlp", "resnet18", "resnet18-cifar", "alexnet")


# --------------------------------------------------------------------------
# data


def default_data_dir():
    return os.environ.get("PFL_DATA") or "./data"


def _open_maybe_gz(path):
    """Opens `path`, or `path`.gz when `path` does not exist; gzip is detected
    by the magic bytes 0x1f 0x8b, not by the name."""
    cands = [path, path + ".gz"] if not path.endswith(".gz") else [path, path[:-3]]
    for p in cands:
        if os.path.exists(p):
            with open(p, "rb") as f:
                head = f.read(2)
            return gzip.open(p, "rb") if head == b"\x1f\x8b" else open(p, "rb"), p
    raise FileNotFoundError("none of %s exists" % " / ".join(cands))


def read_idx(path):
    """Reads an IDX file (big-endian header): 2051 images -> uint8 [n, rows, cols],
    2049 labels -> uint8 [n]."""
    f, real = _open_maybe_gz(path)
    with f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    if magic == 2051:
        n, rows, cols = struct.unpack(">III", data[4:16])
        arr = np.frombuffer(data, dtype=np.uint8, count=n * rows * cols, offset=16)
        return arr.reshape(n, rows, cols)
    if magic == 2049:
        n = struct.unpack(">I", data[4:8])[0]
        return np.frombuffer(data, dtype=np.uint8, count=n, offset=8)
    raise ValueError("%s: bad IDX magic %d" % (real, magic))


def load_raw(dataset, data_dir):
    """Returns (uint8 images [n, C, H, W], int64 labels [n]) in merged order:
    all train-file samples, then all test-file samples."""
    if dataset in ("mnist", "fmnist"):
        d = os.path.join(data_dir, dataset)
        xs, ys = [], []
        for split in ("train", "t10k"):
            xs.append(read_idx(os.path.join(d, "%s-images-idx3-ubyte" % split)))
            ys.append(read_idx(os.path.join(d, "%s-labels-idx1-ubyte" % split)))
        x = np.concatenate(xs)[:, None, :, :]
        y = np.concatenate(ys)
    elif dataset == "cifar10":
        d = os.path.join(data_dir, "cifar10", "cifar-10-batches-bin")
        names = ["data_batch_%d.bin" % i for i in range(1, 6)] + ["test_batch.bin"]
        recs = []
        for name in names:
            f, _ = _open_maybe_gz(os.path.join(d, name))
            with f:
                buf = np.frombuffer(f.read(), dtype=np.uint8)
            recs.append(buf.reshape(-1, 1 + 3072))
        r = np.concatenate(recs)
        y = r[:, 0].copy()
        x = r[:, 1:].reshape(-1, 3, 32, 32)
    else:
        raise ValueError("unknown dataset %r (choose from %s)" % (dataset, ", ".join(DATASETS)))
    if len(x) != len(y):
        raise ValueError("%s: %d images but %d labels" % (dataset, len(x), len(y)))
    return x, y.astype(np.int64)


def normalize(x_uint8):
    """uint8 numpy [n, C, H, W] -> float32 torch tensor, (p/255 - 0.5)/0.5."""
    x = torch.from_numpy(np.ascontiguousarray(x_uint8)).to(torch.float32)
    x.div_(255.0).sub_(0.5).div_(0.5)
    return x


def load_dataset(dataset, data_dir, limit=None):
    """Whole (or first `limit` samples of the) merged dataset, preloaded as
    one normalized float32 tensor X [n, C, H, W] and int64 tensor Y [n]."""
    x, y = load_raw(dataset, data_dir)
    if limit is not None:
        x, y = x[:limit], y[:limit]
    return normalize(x), torch.from_numpy(np.ascontiguousarray(y))


def dataset_shape(dataset):
    """(in_channels, height, width, classes)"""
    return (3, 32, 32, 10) if dataset == "cifar10" else (1, 28, 28, 10)


# --------------------------------------------------------------------------
# models


class FedAvgCNN(nn.Module):
    """PFLlib's FedAvgCNN, verbatim (dim 1024 for 28x28, 1600 for 32x32)."""

    def __init__(self, in_features=1, num_classes=10, dim=1024):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(in_features, 32, kernel_size=5, padding=0, stride=1, bias=True),
                                   nn.ReLU(inplace=True), nn.MaxPool2d(kernel_size=(2, 2)))
        self.conv2 = nn.Sequential(nn.Conv2d(32, 64, kernel_size=5, padding=0, stride=1, bias=True),
                                   nn.ReLU(inplace=True), nn.MaxPool2d(kernel_size=(2, 2)))
        self.fc1 = nn.Sequential(nn.Linear(dim, 512), nn.ReLU(inplace=True))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        out = self.conv1(x)
        out = self.conv2(out)
        out = torch.flatten(out, 1)
        out = self.fc1(out)
        out = self.fc(out)
        return out


class DNN(nn.Module):
    """PFLlib's DNN (Linear(in, mid) ReLU Linear(mid, classes)). PFLlib ends
    with log_softmax before CrossEntropyLoss; log_softmax is idempotent, so
    returning plain logits gives the same loss, gradients and predictions."""

    def __init__(self, input_dim=784, mid_dim=100, num_classes=10):
        super().__init__()
        self.fc1 = nn.Linear(input_dim, mid_dim)
        self.fc = nn.Linear(mid_dim, num_classes)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        return self.fc(x)


def build_model(name, dataset):
    c, h, w, classes = dataset_shape(dataset)
    if name == "cnn":
        dim = 64 * (((h - 4) // 2 - 4) // 2) * (((w - 4) // 2 - 4) // 2)  # 1024 for 28x28, 1600 for 32x32
        return FedAvgCNN(in_features=c, num_classes=classes, dim=dim)
    if name == "dnn":
        return DNN(c * h * w, 100, classes)
    if name == "mlp":  # FedAvg paper's 2NN width, one hidden layer of 200 (as pfl's "mlp")
        return DNN(c * h * w, 200, classes)
    if name in ("resnet18", "resnet18-cifar"):
        return torch_models.ResNet18(c, classes, cifar_stem=name == "resnet18-cifar")
    if name == "alexnet":
        return torch_models.CifarAlexNet(c, classes, h)
    raise ValueError("unknown model %r (choose from %s)" % (name, ", ".join(MODELS)))


def forward_macs_per_sample(model, sample_shape):
    """Multiply-accumulates of one forward pass of one sample, counting only
    Conv2d and Linear layers (weights only; bias adds, ReLU, pooling and the
    loss are not counted)."""
    macs = [0]

    def conv_hook(mod, inp, out):
        k = mod.kernel_size[0] * mod.kernel_size[1] * (mod.in_channels // mod.groups)
        macs[0] += out[0].numel() * k

    def lin_hook(mod, inp, out):
        macs[0] += mod.in_features * mod.out_features

    hooks = []
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, nn.Linear):
            hooks.append(m.register_forward_hook(lin_hook))
    was_training = model.training
    model.eval()  # one sample: BatchNorm needs evaluation mode (and its running statistics stay as they are)
    with torch.no_grad():
        model(torch.zeros((1,) + tuple(sample_shape)))
    model.train(was_training)
    for hk in hooks:
        hk.remove()
    return macs[0]


# --------------------------------------------------------------------------
# threads


def _loaded_openblas():
    """ctypes handle of the OpenBLAS that torch loaded (Debian's python3-torch
    links libblas.so.3, which is OpenBLAS when that alternative is selected),
    or None."""
    try:
        import ctypes
        with open("/proc/self/maps") as f:
            paths = sorted({ln.split()[-1] for ln in f if "openblas" in ln and ln.split()[-1].startswith("/")})
    except OSError:
        return None
    for p in sorted(paths, key=lambda s: "libopenblas" not in s):
        try:
            lib = ctypes.CDLL(p)
            lib.openblas_set_num_threads
            lib.openblas_get_num_threads
            return lib
        except (OSError, AttributeError):
            continue
    return None


def set_threads(torch_threads, blas_threads=1):
    """torch.set_num_threads(torch_threads) and, since torch 1.13 does not
    forward that to OpenBLAS (whose pthread build otherwise runs one thread per
    core and fights torch's OpenMP threads on this 2-core machine), OpenBLAS's
    own thread count. blas_threads "match" = torch_threads. Returns the
    OpenBLAS thread count now in effect, or None when no OpenBLAS is loaded."""
    torch.set_num_threads(torch_threads)
    lib = _loaded_openblas()
    if lib is None:
        return None
    n = torch_threads if blas_threads == "match" else int(blas_threads)
    lib.openblas_set_num_threads(n)
    return int(lib.openblas_get_num_threads())
