#!/usr/bin/env python3
"""Writes the fuzzing seed corpus (tests/fuzz/corpus_safetensors/): small valid and invalid safetensors files.
Run from anywhere: python3 tests/fuzz/make_corpus.py"""
import os, struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus_safetensors")


def st(header, data=b"", hlen=None, pad=True):
    h = header.encode("utf-8") if isinstance(header, str) else header
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h) if hlen is None else hlen) + h + data


def ent(dtype, shape, b, e):
    return '{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}' % (dtype, ",".join(map(str, shape)), b, e)


f32 = struct.pack("<4f", 1.0, -2.5, float("inf"), float("nan"))
seeds = {
    # valid
    "valid_f32.st": st('{"w":%s}' % ent("F32", [2, 2], 0, 16), f32),
    "valid_meta.st": st('{"__metadata__":{"format":"tinyrec","model":"trm","config":"{\\"hidden_size\\":8}"},"a":%s,"b":%s}'
                        % (ent("BF16", [3], 0, 6), ent("F16", [1, 1], 6, 8)), b"\x80\x3f\x00\xc0\x80\x7f\x00\x3c"),
    "valid_all_dtypes.st": st('{"f":%s,"b":%s,"h":%s,"i":%s,"l":%s,"u":%s,"o":%s}' % (
        ent("F32", [1], 0, 4), ent("BF16", [1], 4, 6), ent("F16", [1], 6, 8), ent("I32", [1], 8, 12),
        ent("I64", [1], 12, 20), ent("U8", [2], 20, 22), ent("BOOL", [2], 22, 24)), bytes(range(24))),
    "valid_scalar_empty.st": st('{"s":%s,"e":%s,"z":%s}' % (ent("F32", [], 0, 4), ent("F32", [0, 5], 4, 4), ent("U8", [0], 4, 4)), f32[:4]),
    "valid_empty.st": st("{}"),
    "valid_unicode.st": st('{"caf\\u00e9 \\ud83d\\ude00 \u4e2d":%s}' % ent("U8", [1], 0, 1), b"\x01"),
    "valid_unordered.st": st('{"b":%s,"a":%s}' % (ent("F32", [1], 4, 8), ent("F32", [1], 0, 4)), f32[:8]),
    # invalid
    "bad_len_past_eof.st": st('{"w":%s}' % ent("F32", [1], 0, 4), f32[:4], hlen=1 << 20),
    "bad_huge_len.st": st("{}", hlen=(1 << 63) + 5),
    "bad_overlap.st": st('{"a":%s,"b":%s}' % (ent("F32", [2], 0, 8), ent("F32", [2], 4, 12)), f32[:12]),
    "bad_gap.st": st('{"a":%s,"b":%s}' % (ent("F32", [1], 0, 4), ent("F32", [1], 8, 12)), f32[:12]),
    "bad_mismatch.st": st('{"a":%s}' % ent("F16", [3], 0, 4), f32[:4]),
    "bad_dtype.st": st('{"a":%s}' % ent("F64", [1], 0, 8), f32[:8]),
    "bad_dup.st": st('{"a":%s,"a":%s}' % (ent("U8", [1], 0, 1), ent("U8", [1], 1, 2)), b"ab"),
    "bad_meta.st": st('{"__metadata__":{"format":["pt"]}}'),
    "bad_json.st": st('{"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,4]}}', f32[:4]),
    "bad_trailing.st": st('{"a":%s}' % ent("U8", [1], 0, 1), b"\x01\x02"),
    "bad_short.st": b"\x08\x00\x00",
    "bad_not_object.st": st("[1,2,3]"),
}

os.makedirs(OUT, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(OUT, name), "wb") as fh:
        fh.write(data)
print("wrote %d seeds to %s" % (len(seeds), OUT))
