#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/ that need no dtrain writer: configs, experiment
files, IDX, CIFAR and downsampled-ImageNet pickles, each valid example next to malformed ones.
(Images, checkpoints and TensorBoard files come from dtrain's own writers: make_corpus.cpp.)
Deterministic: run it again and git shows no change.  Usage: tests/fuzz/make_corpus.py"""
import gzip
import os
import pickle
import shutil
import struct
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def copy(target, name, path):
    with open(os.path.join(ROOT, path), "rb") as f:
        put(target, name, f.read())


# ---- run configurations (and overrides after "# --set") ----
copy("config", "quickstart.yaml", "configs/quickstart.yaml")
copy("config", "fmnist_mlp.yaml", "configs/bench/fmnist_mlp.yaml")
copy("config", "fmnist_cycle10.yaml", "configs/decentralized/fmnist_cycle10.yaml")
copy("config", "example.yaml", "tests/config/example.yaml")
put("config", "overrides.yaml", "data:\n  dataset: synthetic\ntrain:\n  max_steps: 2\n# --set\n"
    "optim.lr=0.05\ndata.synthetic_shape=[3,8,8]\nmodel.hidden=[16, 8]\noptim.scheduler={name: cosine}\n")
put("config", "bad-override.yaml", "train:\n  epochs: 1\n# --set\noptim.lr\n=1\na..b=2\ntrain.epochs=[1\n")
put("config", "empty.yaml", "")
put("config", "two-documents.yaml", "train:\n  epochs: 1\n---\ntrain:\n  epochs: 2\n")
put("config", "unterminated-quote.yaml", "model:\n  name: \"mlp\n")
put("config", "invalid-utf8.yaml", b"model:\n  name: ml\xff\xfep\n")
put("config", "unknown-key.yaml", "optim:\n  lrr: 0.1\n")
put("config", "wrong-type.yaml", "optim:\n  lr: fast\ntrain:\n  epochs: -3\n")
put("config", "anchors.yaml", "a: &x {lr: 0.1}\noptim: *x\ntrain: {epochs: 1e400, seed: 0x10}\n")
put("config", "deep.yaml", "a: " + "[" * 64 + "]" * 64 + "\n")

# ---- experiment files ----
copy("experiment", "dad.yaml", "configs/experiments/dad.yaml")
copy("experiment", "optimizer_study.yaml", "configs/experiments/optimizer_study.yaml")
copy("experiment", "dinno_template.yaml", "configs/experiments/dinno_template.yaml")
put("experiment", "sweep.yaml", "name: s\nbase: quickstart.yaml\nsweep:\n  optim.lr: [0.1, 0.01]\n"
    "  model.hidden: [[8], [16, 8]]\nruns:\n  - {name: a, overrides: [train.epochs=1]}\n  - {name: b}\n")
put("experiment", "escape.yaml", "name: ../../etc\nout_dir: /tmp\nbase: ../x.yaml\nruns:\n  - {name: ..}\n")
put("experiment", "empty-runs.yaml", "base: quickstart.yaml\nruns: []\n")
put("experiment", "duplicate-runs.yaml", "base: q.yaml\nruns:\n  - {name: a}\n  - {name: a}\n")
put("experiment", "sweep-slash.yaml", "base: q.yaml\nsweep:\n  data.root: [/a/b, ../c]\n")

# ---- IDX (MNIST's format) ----
def idx(dims, payload, type_byte=0x08):
    header = bytes([0, 0, type_byte, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims)
    return header + payload

labels = idx([6], bytes([0, 1, 2, 3, 4, 9]))
images = idx([2, 28, 28], bytes((i * 7) % 256 for i in range(2 * 28 * 28)))
put("idx", "labels-idx1-ubyte", labels)
put("idx", "images-idx3-ubyte", images)
put("idx", "labels-idx1-ubyte.gz", gzip.compress(labels, mtime=0))
put("idx", "images-idx3-ubyte.gz", gzip.compress(images, mtime=0))
put("idx", "truncated", images[:300])
put("idx", "truncated.gz", gzip.compress(images, mtime=0)[:200])
put("idx", "too-long", labels + b"\x00")
put("idx", "wrong-type", idx([2], b"\x00" * 8, 0x0D))
put("idx", "huge-header", idx([0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF], b"\x01\x02"))
put("idx", "zero-dims", idx([0, 28, 28], b""))

# ---- CIFAR binary ----
def cifar_record(labels_, seed):
    return bytes(labels_) + bytes((seed + i) % 256 for i in range(3072))

put("cifar", "cifar10-two", cifar_record([3], 1) + cifar_record([9], 2))
put("cifar", "cifar100-one", cifar_record([1, 77], 3))
put("cifar", "label-out-of-range", cifar_record([200], 4))
put("cifar", "truncated", cifar_record([1], 5)[:1000])
put("cifar", "empty", b"")

# ---- downsampled ImageNet: genuine Python pickles of numpy arrays, without numpy ----
# Stand-ins registered under numpy's module names, whose __reduce__ says what numpy's does, so
# that pickle writes the same opcodes and globals as for real arrays (Note [Downsampled ImageNet
# pickles] in src/dtrain/data/Imagenet.cpp).
numpy = types.ModuleType("numpy")
core = types.ModuleType("numpy.core")
multiarray = types.ModuleType("numpy.core.multiarray")


def _reconstruct(*args):
    raise AssertionError("never called")


class ndarray:
    def __init__(self, dtype, shape, raw):
        self.dtype, self.shape, self.raw = dtype, shape, raw

    def __reduce__(self):
        return (_reconstruct, (ndarray, (0,), b"b"), (1, self.shape, self.dtype, False, self.raw))


class dtype:
    def __init__(self, code, order):
        self.code, self.order = code, order

    def __reduce__(self):
        return (dtype, (self.code, False, True), (3, self.order, None, None, None, -1, -1, 0))


for obj, module in ((_reconstruct, multiarray), (ndarray, numpy), (dtype, numpy)):
    obj.__module__ = module.__name__
    obj.__qualname__ = obj.__name__
    setattr(module, obj.__name__, obj)
sys.modules.update({"numpy": numpy, "numpy.core": core, "numpy.core.multiarray": multiarray})


def batch(count, size, labels_, protocol, mean=False):
    row = 3 * size * size
    d = {"data": ndarray(dtype("u1", "|"), (count, row), bytes((i * 13) % 256 for i in range(count * row))),
         "labels": labels_}
    if mean:
        d["mean"] = ndarray(dtype("f4", "<"), (row,), struct.pack("<%df" % row, *([0.5] * row)))
    return pickle.dumps(d, protocol)

put("imagenet", "batch32-p2", batch(1, 32, [1], 2))
put("imagenet", "batch32-p3-two", batch(2, 32, [5, 1000], 3))
put("imagenet", "batch32-p4", batch(1, 32, [7], 4))
put("imagenet", "batch32-mean", batch(1, 32, [3], 3, mean=True))
put("imagenet", "batch64-p3", batch(1, 64, [42], 3)[:16384])
put("imagenet", "label-zero", batch(1, 32, [0], 3))
put("imagenet", "truncated", batch(1, 32, [1], 3)[:500])
put("imagenet", "calls-os-system", b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03.")
put("imagenet", "not-a-dict", pickle.dumps([1, 2, "three", (4, 5.0)], 2))
put("imagenet", "clsloc", "".join("n%08d %d name_%d\n" % (k, k, k) for k in range(1, 40)))
put("imagenet", "clsidx", "{" + ",\n ".join("%d: 'name %d'" % (j, j) for j in range(40)) + "}")
put("imagenet", "clsidx-bad", "{0: 'tench', 1: \"jack-o'-lantern\", 2: 'unterminated}")
# ---- safetensors (model.safetensors): a valid file, then each malformation the reader refuses ----
def safetensors(header, data):
    text = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(text)) + text + data


W = '"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'
put("safetensors", "valid", safetensors('{"__metadata__":{"format":"pt"},' + W +
                                        ',"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]}}  ',
                                        struct.pack("<2f", 1.5, -2.0) + b"\x80\x3f\x00\x40"))
put("safetensors", "empty-tensor", safetensors('{"e":{"dtype":"I64","shape":[0,3],"data_offsets":[0,0]}}', b""))
put("safetensors", "past-the-end", safetensors("{" + W + "}", b"\0" * 4))
put("safetensors", "overlap", safetensors("{" + W + ',"v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}',
                                          b"\0" * 12))
put("safetensors", "byte-count", safetensors('{"w":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}}', b"\0" * 8))
put("safetensors", "huge-header", struct.pack("<Q", 1 << 40) + b"{}")
put("safetensors", "huge-shape",
    safetensors('{"w":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}}', b"\0" * 8))
put("safetensors", "not-json", safetensors('{"w": [', b""))
print("wrote", sum(len(files) for _, _, files in os.walk(CORPUS)), "files under", CORPUS)
