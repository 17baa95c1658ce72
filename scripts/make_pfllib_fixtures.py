#!/usr/bin/python3
"""Writes the PFLlib-format files that pfl's reader is tested and fuzzed on,
made by numpy itself, as PFLlib's generators make them.

Run from anywhere:  scripts/make_pfllib_fixtures.py   (needs Debian's
python3-numpy, hence /usr/bin/python3). The output is deterministic: the
values are formulas, and numpy's zip members carry a fixed date, so running
it again rewrites identical files.

PFLlib's dataset/utils/dataset_utils.py saves each client's split as
    np.savez_compressed(f, data={'x': X, 'y': Y})
which is what these files are (np.savez for the stored one). Written:

  tests/fixtures/pfllib/img-deflated.npz  x float32 6x1x3x3, y int64    (savez_compressed)
  tests/fixtures/pfllib/img-stored.npz    x float64 4x1x3x3, y int32    (savez: stored, not deflated)
  tests/fixtures/pfllib/text.npz          x object 5x2 rows (token list, length), y int64,
                                          as generate_AGNews.py builds them
  tests/fixtures/pfllib/img-protocol4.npz x float32 3x1x3x3, y uint8: the dict pickled with
                                          protocol 4 (frames, STACK_GLOBAL, MEMOIZE), as NumPy 2 may
  tests/fixtures/pfllib/hostile-*.npz     files pfl must refuse, each made by numpy as a user's mistake
                                          or an attack would make it: x complex64 (complex), x big-endian
                                          float32 (bigendian), x in Fortran order (fortran), y float32
                                          (float-labels), a list where the dict should be (no-dict), and a
                                          pickle that would call os.system (global; never loaded here)
  fuzz/corpus/npz/<same names>            the same files: seeds of the npz harness
  fuzz/corpus/npy/<same names>.npy        each file's data.npy: seeds of the npy harness

tests/test_pfllib.c recomputes the values below; keep the formulas in step:
  image sample i, value k (of the 9 of a 1x3x3 sample):  ((7 * i + 3 * k) % 17) / 8 - 1   (exact in float32)
  image labels: i % 3, train files; (i + 1) % 3, the stored file; (2 * i) % 3, protocol 4
  text row r: [1, 4 + (5 * r + j) % 40 for j < 2 + r % 3] then 0 up to 8 tokens; length 2 + r % 3 + 1; label r % 4
"""
import io
import os
import pickle
import zipfile

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def image_x(n, dtype):
    i = np.arange(n).reshape(n, 1)
    k = np.arange(9).reshape(1, 9)
    return (((7 * i + 3 * k) % 17) / 8.0 - 1.0).astype(dtype).reshape(n, 1, 3, 3)


def text_rows(n, max_len=8):
    rows = []
    for r in range(n):
        tokens = [1] + [4 + (5 * r + j) % 40 for j in range(2 + r % 3)]
        length = len(tokens)
        tokens += [0] * (max_len - len(tokens))
        rows.append((tokens[:max_len], length))
    return np.array(rows, dtype=object)


def protocol4_npz(data):
    """np.savez as NumPy 2 would write it: the same zip and header, the
    pickle at protocol 4 instead of numpy 1's 3."""
    payload = pickle.dumps(np.array(data, dtype=object), protocol=4)
    header = "{'descr': '|O', 'fortran_order': False, 'shape': (), }"
    pad = (64 - (10 + len(header) + 1) % 64) % 64
    npy = b"\x93NUMPY\x01\x00" + (len(header) + pad + 1).to_bytes(2, "little") + (header + " " * pad + "\n").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        info = zipfile.ZipInfo("data.npy", date_time=(1980, 1, 1, 0, 0, 0))
        z.writestr(info, npy + payload)
    return out.getvalue()


class RunsACommand:
    """What an attacker pickles: unpickling it would call os.system."""
    def __reduce__(self):
        return (os.system, ("echo pfl must never run this",))


def hostile_files():
    x = image_x(2, np.float32)
    y = np.arange(2, dtype=np.int64)
    return {
        "hostile-complex.npz": npz_bytes(np.savez_compressed, {"x": x.astype(np.complex64), "y": y}),
        "hostile-bigendian.npz": npz_bytes(np.savez_compressed, {"x": x.astype(">f4"), "y": y}),
        "hostile-fortran.npz": npz_bytes(np.savez_compressed, {"x": np.asfortranarray(image_x(2, np.float32).reshape(2, 9)), "y": y}),
        "hostile-float-labels.npz": npz_bytes(np.savez_compressed, {"x": x, "y": y.astype(np.float32)}),
        "hostile-no-dict.npz": npz_bytes(np.savez_compressed, np.array([x, y, None], dtype=object)),
        "hostile-global.npz": npz_bytes(np.savez_compressed, RunsACommand()),
    }


def npz_bytes(save, data):
    out = io.BytesIO()
    save(out, data=data)
    return out.getvalue()


def data_npy(npz):
    with zipfile.ZipFile(io.BytesIO(npz)) as z:
        return z.read("data.npy")


def main():
    files = {
        "img-deflated.npz": npz_bytes(np.savez_compressed,
                                      {"x": image_x(6, np.float32), "y": np.arange(6, dtype=np.int64) % 3}),
        "img-stored.npz": npz_bytes(np.savez,
                                    {"x": image_x(4, np.float64), "y": (np.arange(4, dtype=np.int32) + 1) % 3}),
        "text.npz": npz_bytes(np.savez_compressed, {"x": text_rows(5), "y": np.arange(5, dtype=np.int64) % 4}),
        "img-protocol4.npz": protocol4_npz({"x": image_x(3, np.float32),
                                            "y": (2 * np.arange(3, dtype=np.uint8)) % 3}),
    }
    files.update(hostile_files())
    dirs = [os.path.join(ROOT, d) for d in ("tests/fixtures/pfllib", "fuzz/corpus/npz", "fuzz/corpus/npy")]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    for name, blob in files.items():
        for d in dirs[:2]:
            with open(os.path.join(d, name), "wb") as f:
                f.write(blob)
        with open(os.path.join(dirs[2], name[:-4] + ".npy"), "wb") as f:
            f.write(data_npy(blob))
        if name.startswith("hostile"):
            print(name, len(blob), "bytes")
            continue
        loaded = np.load(io.BytesIO(blob), allow_pickle=True)["data"].tolist()  # as PFLlib's read_data
        print(name, len(blob), "bytes:", {k: (v.dtype, v.shape) for k, v in loaded.items()})


if __name__ == "__main__":
    main()
