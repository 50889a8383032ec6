#!/usr/bin/env python3
"""numpy compatibility check for tinyrec.h's .npy reader and writer (python3 + numpy only).

  check_npy.py check DIR [DIR ...]   every <DIR>/{train,test} written by tinyrec: numpy.load reads each
                                     array, dtypes/shapes/values agree with dataset.json, and the bytes are
                                     exactly what numpy.save writes for the same array.
  check_npy.py write DIR             writes .npy files with numpy (format 1.0 and 2.0, uint8/int32/int64,
                                     several shapes) plus DIR/manifest.txt, one line per file:
                                     name dtype ndim d0 d1 ... sum first last   (expected: ok)
                                     name - error                               (expected: our reader refuses it)
Exit status 0 when everything agrees; 1 with a message otherwise.
"""
import io
import json
import os
import sys

import numpy as np

FIELDS = ["pad_id", "ignore_label_id", "blank_identifier_id", "vocab_size", "seq_len",
          "num_puzzle_identifiers", "total_groups", "mean_puzzle_examples", "total_puzzles", "sets"]


def fail(msg):
    print("check_npy: FAIL: " + msg)
    sys.exit(1)


def saved_bytes(arr):
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def check_split(d):
    with open(os.path.join(d, "dataset.json")) as f:
        text = f.read()
    meta = json.loads(text)
    keys = [k for k in FIELDS if k in meta]
    if list(meta.keys()) != keys:
        fail(f"{d}/dataset.json: field order {list(meta.keys())} differs from the reference's {keys}")
    L, V = meta["seq_len"], meta["vocab_size"]
    total_groups = total_puzzles = total_examples = 0
    for s in meta["sets"]:
        arrs = {}
        for name in ["inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices"]:
            p = os.path.join(d, f"{s}__{name}.npy")
            a = np.load(p, mmap_mode="r" if name in ("inputs", "labels") else None)
            with open(p, "rb") as f:
                raw = f.read()
            if raw != saved_bytes(np.asarray(a)):
                fail(f"{p}: bytes differ from numpy.save of the same array")
            arrs[name] = np.asarray(a)
        inp, lab = arrs["inputs"], arrs["labels"]
        pid, pix, gix = arrs["puzzle_identifiers"], arrs["puzzle_indices"], arrs["group_indices"]
        for nm, a in (("inputs", inp), ("labels", lab)):
            if a.dtype != np.uint8 or a.ndim != 2 or a.shape[1] != L:
                fail(f"{d}/{s}__{nm}.npy: dtype {a.dtype} shape {a.shape}, expected uint8 [N, {L}]")
        for nm, a in (("puzzle_identifiers", pid), ("puzzle_indices", pix), ("group_indices", gix)):
            if a.dtype != np.int32 or a.ndim != 1:
                fail(f"{d}/{s}__{nm}.npy: dtype {a.dtype} shape {a.shape}, expected int32 1-D")
        N, P, G = inp.shape[0], pid.shape[0], gix.shape[0] - 1
        if lab.shape != inp.shape:
            fail(f"{d}: labels {lab.shape} != inputs {inp.shape}")
        if pix.shape[0] != P + 1 or pix[0] != 0 or pix[-1] != N or np.any(np.diff(pix) < 0):
            fail(f"{d}: bad puzzle_indices")
        if gix[0] != 0 or gix[-1] != P or np.any(np.diff(gix) <= 0):
            fail(f"{d}: bad group_indices")
        if np.any(pid < 0) or np.any(pid >= meta["num_puzzle_identifiers"]):
            fail(f"{d}: puzzle identifier out of range")
        if inp.max(initial=0) >= V or lab.max(initial=0) >= V:
            fail(f"{d}: token outside the vocabulary")
        total_groups += G
        total_puzzles += P
        total_examples += N
    if meta["total_groups"] != total_groups:
        fail(f"{d}: total_groups {meta['total_groups']} != {total_groups}")
    if "total_puzzles" in meta and meta["total_puzzles"] not in (total_puzzles, total_groups):
        fail(f"{d}: total_puzzles {meta['total_puzzles']} is neither {total_puzzles} nor {total_groups}")
    if total_puzzles and abs(meta["mean_puzzle_examples"] - total_examples / total_puzzles) > 1e-9:
        fail(f"{d}: mean_puzzle_examples {meta['mean_puzzle_examples']} != {total_examples / total_puzzles}")
    expect = json.dumps(meta)
    if text != expect:
        fail(f"{d}/dataset.json: text differs from json.dump of the same dict:\n  {text}\n  {expect}")
    return total_examples


def check(dirs):
    n = 0
    for root in dirs:
        found = False
        for split in ("train", "test"):
            d = os.path.join(root, split)
            if os.path.isfile(os.path.join(d, "dataset.json")):
                n += check_split(d)
                found = True
        if not found:
            fail(f"{root}: no train/ or test/ dataset")
        ip = os.path.join(root, "identifiers.json")
        if os.path.isfile(ip):
            with open(ip) as f:
                text = f.read()
            ids = json.loads(text)
            if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids) or json.dumps(ids) != text:
                fail(f"{ip}: not a JSON list of names as json.dump writes it")
    print(f"check_npy: ok ({len(dirs)} dataset(s), {n} examples)")


def write(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(1234)
    lines = []

    def put(name, arr, version):
        p = os.path.join(out, name)
        with open(p, "wb") as f:
            np.lib.format.write_array(f, arr, version=version)
        flat = arr.reshape(-1).astype(np.int64)
        first = int(flat[0]) if flat.size else 0
        last = int(flat[-1]) if flat.size else 0
        dt = {np.dtype(np.uint8): "u8", np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}[arr.dtype]
        lines.append(" ".join([name, dt, str(arr.ndim)] + [str(x) for x in arr.shape] + [str(int(flat.sum())), str(first), str(last)]))

    for version in ((1, 0), (2, 0)):
        v = version[0]
        put(f"u8_2d_v{v}.npy", rng.integers(0, 256, size=(37, 81), dtype=np.uint8), version)
        put(f"i32_1d_v{v}.npy", rng.integers(-2**31, 2**31 - 1, size=(1001,), dtype=np.int32), version)
        put(f"i64_3d_v{v}.npy", rng.integers(-2**62, 2**62, size=(2, 3, 5), dtype=np.int64), version)
        put(f"i32_empty_v{v}.npy", np.zeros((0,), dtype=np.int32), version)
        put(f"u8_scalar_v{v}.npy", np.array(7, dtype=np.uint8), version)
    # files our reader must refuse
    bad = {
        "bad_f32.npy": np.zeros((3, 3), dtype=np.float32),
        "bad_bigendian.npy": np.zeros((4,), dtype=">i4"),
        "bad_fortran.npy": np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)),
        "bad_i16.npy": np.zeros((4,), dtype=np.int16),
    }
    for name, arr in bad.items():
        np.save(os.path.join(out, name), arr)
        lines.append(f"{name} - error")
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"check_npy: wrote {len(lines)} files to {out}")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "check":
        check(sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)
