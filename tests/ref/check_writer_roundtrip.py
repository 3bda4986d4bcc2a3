#!/usr/bin/env python3
"""GGUF files written by ruvllm's writer read back identically in gguf-py.

    python3 tests/ref/check_writer_roundtrip.py [--update] | tee tests/ref/writer_roundtrip.log

1. Writes the synthetic files with gguf-py's GGUFWriter (synthetic() below,
   mirrored by write_synthetic() in tests/test_gguf_writer_ref.c) and checks
   they equal the committed tests/ref/writer/*.gguf (--update rewrites
   those instead), which the C test compares our writer's output with.
2. Builds and runs build/tests/test_gguf_writer_ref with
   RVL_WRITER_REF_OUT=DIR: our writer writes the synthetic files (twice:
   data given up front, and streamed), a copy of the default model and a
   copy of each tokenizer GGUF into DIR (every pair through kv_copy, every
   tensor with its data).
3. Reads every such file and its original with gguf.GGUFReader and
   compares: header fields, metadata keys in order, their types (element
   types of arrays), their values (the raw bytes of every part gguf-py
   splits them into), tensor names, types, shapes, element and byte counts,
   data offsets relative to the data section, and the data bytes. The
   synthetic files are also checked against the values synthetic() meant.
   Then compares the bytes of the two files and says where they differ.

Needs numpy and gguf (gguf-py), make and a C compiler; run from anywhere.
Exits 1 when anything differs.
"""
import argparse
import filecmp
import glob
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

failures = 0
passes = 0


def report(ok, what):
    global failures, passes
    if ok:
        passes += 1
    else:
        failures += 1
    print("%s  %s" % ("ok  " if ok else "FAIL", what))
    return ok


# ----------------------------------------------------------------------
# The synthetic content (mirrored in tests/test_gguf_writer_ref.c)
# ----------------------------------------------------------------------

SCALARS = [
    ("synth.u8", V.UINT8, 255),
    ("synth.i8", V.INT8, -128),
    ("synth.u16", V.UINT16, 65535),
    ("synth.i16", V.INT16, -32768),
    ("synth.u32", V.UINT32, 2**32 - 1),
    ("synth.i32", V.INT32, -2**31),
    ("synth.f32", V.FLOAT32, 0.1),
    ("synth.bool", V.BOOL, True),
    ("synth.string", V.STRING, "h\u00e9llo, w\u00f6rld\n\t\"quoted\" \\ \u2603"),
    ("synth.string_empty", V.STRING, ""),
    ("synth.u64", V.UINT64, 2**64 - 1),
    ("synth.i64", V.INT64, -2**63),
    ("synth.f64", V.FLOAT64, 2.718281828459045),
]
ALIGNMENT = 64   # add_custom_alignment after the scalars
ARRAYS = [
    ("synth.arr.u8", V.UINT8, [0, 1, 127, 128, 255]),
    ("synth.arr.i8", V.INT8, [-128, -1, 0, 1, 127]),
    ("synth.arr.u16", V.UINT16, [0, 1, 65535]),
    ("synth.arr.i16", V.INT16, [-32768, 0, 32767]),
    ("synth.arr.u32", V.UINT32, [0, 1, 2**32 - 1]),
    ("synth.arr.i32", V.INT32, [-2**31, -1, 2**31 - 1]),
    ("synth.arr.f32", V.FLOAT32, [0.0, -1.5, 1e-45, 3.4028234663852886e38, 0.1]),
    ("synth.arr.bool", V.BOOL, [True, False, True]),
    ("synth.arr.string", V.STRING, ["a", "", "\u00df\u2202", "tab\there", "emoji \U0001F600"]),
    ("synth.arr.u64", V.UINT64, [0, 2**64 - 1]),
    ("synth.arr.i64", V.INT64, [-2**63, 2**63 - 1, 0]),
    ("synth.arr.f64", V.FLOAT64, [0.5, -0.0, 1e308, 5e-324]),
    ("synth.arr.long", V.INT32, [i * 7 - 3000 for i in range(1000)]),
]
TENSORS = [   # name, type, ne (GGUF order)
    ("t.f32", Q.F32, [5, 3]),
    ("t.f16", Q.F16, [7]),
    ("t.bf16", Q.BF16, [4, 2, 3]),
    ("t.q4_1", Q.Q4_1, [64, 3]),
    ("t.q8_0", Q.Q8_0, [32, 2, 1, 2]),
    ("t.q4_k", Q.Q4_K, [256, 2]),
    ("t.q6_k", Q.Q6_K, [256]),
    ("t.i8", Q.I8, [3]),
    ("t.i16", Q.I16, [2, 2]),
    ("t.i32", Q.I32, [5]),
    ("t.i64", Q.I64, [1]),
    ("t.f64", Q.F64, [3]),
    ("t." + "x" * 61, Q.Q5_K, [256]),   # 63 bytes, llama.cpp's longest name
]
PACK = {V.UINT8: "<B", V.INT8: "<b", V.UINT16: "<H", V.INT16: "<h", V.UINT32: "<I",
        V.INT32: "<i", V.FLOAT32: "<f", V.BOOL: "<?", V.UINT64: "<Q", V.INT64: "<q",
        V.FLOAT64: "<d"}


def pattern(n, k):
    j = np.arange(n, dtype=np.int64)
    return ((j * 31 + k * 17 + (j >> 9)) & 0xff).astype(np.uint8)


def tensor_bytes(t, ne):
    bs, ts = gguf.GGML_QUANT_SIZES[t]
    return int(np.prod(ne)) // bs * ts


def write_py(path, content):
    w = gguf.GGUFWriter(path, "synthetic" if content == "synthetic" else "notensors")
    if content == "synthetic":
        for key, vt, v in SCALARS:
            w.add_key_value(key, v, vt)   # not add_string: it drops ""
        w.add_custom_alignment(ALIGNMENT)
        for key, vt, v in ARRAYS:
            w.add_key_value(key, v, V.ARRAY, sub_type=vt)
        for k, (name, t, ne) in enumerate(TENSORS):
            bs, ts = gguf.GGML_QUANT_SIZES[t]
            byte_shape = tuple(reversed(ne[1:])) + (ne[0] // bs * ts,)
            data = pattern(tensor_bytes(t, ne), k).reshape(byte_shape)
            w.add_tensor(name, data, raw_dtype=t)
    else:
        w.add_uint32("a.u32", 7)
        w.add_string("a.string", "x")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def same_value(vt, got, want):
    if vt in (V.FLOAT32, V.FLOAT64):   # compare the stored bits (-0.0, rounding)
        return struct.pack(PACK[vt], got) == struct.pack(PACK[vt], want)
    return got == want


def check_synthetic_values(r):
    """The values gguf-py decodes are the ones synthetic() meant."""
    bad = []
    want = [("general.architecture", V.STRING, "synthetic", None)]
    want += [(k, vt, v, None) for k, vt, v in SCALARS]
    want += [("general.alignment", V.UINT32, ALIGNMENT, None)]
    want += [(k, V.ARRAY, v, vt) for k, vt, v in ARRAYS]
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    if keys != [w[0] for w in want]:
        bad.append("keys %r" % keys)
    for key, vt, v, et in want:
        f = r.fields.get(key)
        if f is None:
            continue
        got = f.contents()
        if et is None:
            ok = f.types == [vt] and same_value(vt, got, v)
        else:
            ok = f.types == [V.ARRAY, et] and len(got) == len(v) and \
                all(same_value(et, a, b) for a, b in zip(got, v))
        if not ok:
            bad.append("%s: %r" % (key, got if et is None else got[:5]))
    for k, (name, t, ne) in enumerate(TENSORS):
        ts = [x for x in r.tensors if x.name == name]
        if len(ts) != 1:
            bad.append("tensor %s missing" % name)
            continue
        x = ts[0]
        raw = np.asarray(x.data).view(np.uint8).reshape(-1)
        if x.tensor_type != t or list(map(int, x.shape)) != ne or \
                not np.array_equal(raw, pattern(tensor_bytes(t, ne), k)):
            bad.append("tensor %s" % name)
    return bad


# ----------------------------------------------------------------------
# Reading two files with gguf-py and comparing them
# ----------------------------------------------------------------------

def compare_readers(ours, orig):
    """Differences between two files as gguf-py reads them (list of str)."""
    a, b = gguf.GGUFReader(ours), gguf.GGUFReader(orig)
    diffs = []
    if list(a.fields) != list(b.fields):
        diffs.append("metadata keys differ")
    for name in a.fields:
        fa, fb = a.fields[name], b.fields.get(name)
        if fb is None:
            continue
        if fa.types != fb.types:
            diffs.append("%s: types %s vs %s" % (name, fa.types, fb.types))
            continue
        if len(fa.parts) != len(fb.parts) or fa.data != fb.data or any(
                pa.dtype != pb.dtype or pa.tobytes() != pb.tobytes()
                for pa, pb in zip(fa.parts, fb.parts)):
            diffs.append("%s: value differs" % name)
    if a.alignment != b.alignment:
        diffs.append("alignment %d vs %d" % (a.alignment, b.alignment))
    if a.data_offset != b.data_offset:
        diffs.append("data offset %d vs %d" % (a.data_offset, b.data_offset))
    if len(a.tensors) != len(b.tensors):
        diffs.append("%d vs %d tensors" % (len(a.tensors), len(b.tensors)))
    for ta, tb in zip(a.tensors, b.tensors):
        what = []
        if ta.name != tb.name:
            what.append("name")
        if ta.tensor_type != tb.tensor_type:
            what.append("type")
        if list(ta.shape) != list(tb.shape):
            what.append("shape")
        if (ta.n_elements, ta.n_bytes) != (tb.n_elements, tb.n_bytes):
            what.append("size")
        if ta.data_offset - a.data_offset != tb.data_offset - b.data_offset:
            what.append("offset")
        if np.asarray(ta.data).tobytes() != np.asarray(tb.data).tobytes():
            what.append("data")
        if what:
            diffs.append("tensor %s: %s differ" % (tb.name, ", ".join(what)))
    n_values = sum(len(f.data) for k, f in b.fields.items() if not k.startswith("GGUF."))
    summary = "%d keys (%d values), %d tensors (%d bytes of data)" % (
        len(b.fields) - 3, n_values, len(b.tensors), sum(t.n_bytes for t in b.tensors))
    return diffs, summary


def byte_story(ours, orig):
    """How the bytes of the two files compare, in words."""
    if filecmp.cmp(ours, orig, shallow=False):
        return True, "byte-identical (%d bytes)" % os.path.getsize(orig)
    x, y = Path(ours).read_bytes(), Path(orig).read_bytes()
    n = min(len(x), len(y))
    first = next((i for i in range(n) if x[i] != y[i]), n)
    if first == len(y) and not any(x[len(y):]):
        return False, ("the original plus %d zero bytes of end padding (%d -> %d bytes, "
                       "a multiple of the alignment); identical before that"
                       % (len(x) - len(y), len(y), len(x)))
    return False, "differs from byte %d (%d vs %d bytes)" % (first, len(x), len(y))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--update", action="store_true",
                    help="rewrite tests/ref/writer/*.gguf from gguf-py")
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    model = args.model or os.path.join(cache, "ruvllm", "models", MODEL_FILE)
    shared = os.environ.get("RVL_SHARED_DATA") or str(REPO / ".." / "shared" / "data")

    import importlib.metadata as md
    print("# check_writer_roundtrip: python %s, numpy %s, gguf %s"
          % (sys.version.split()[0], np.__version__, md.version("gguf")))
    tmp = Path(tempfile.mkdtemp(prefix="rvl-writer-rt."))
    try:
        # 1. gguf-py's own files
        print("\n## gguf-py's GGUFWriter, synthetic content")
        refdir = HERE / "writer"
        refdir.mkdir(exist_ok=True)
        for name, content in (("synthetic.gguf", "synthetic"), ("synthetic-notensors.gguf", "notensors")):
            p = tmp / ("py-" + name)
            write_py(p, content)
            if args.update:
                shutil.copyfile(p, refdir / name)
            report(filecmp.cmp(p, refdir / name, shallow=False),
                   "tests/ref/writer/%s is what gguf-py writes (%d bytes)" % (name, p.stat().st_size))
        bad = check_synthetic_values(gguf.GGUFReader(refdir / "synthetic.gguf"))
        report(not bad, "gguf-py reads back every value and tensor of synthetic.gguf as meant"
               + ("" if not bad else ": " + "; ".join(bad)))

        # 2. ours
        print("\n## rvl_gguf_writer (build/tests/test_gguf_writer_ref)")
        subprocess.run(["make", "-s", "build/tests/test_gguf_writer_ref"], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL)
        out = tmp / "ours"
        env = dict(os.environ, RVL_WRITER_REF_OUT=str(out), RVL_SHARED_DATA=shared)
        r = subprocess.run([str(REPO / "build/tests/test_gguf_writer_ref")], cwd=REPO, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        report(r.returncode == 0, "test_gguf_writer_ref wrote its files (exit %d)" % r.returncode)
        if r.returncode:
            print(r.stdout)

        # 3. read back with gguf-py
        print("\n## read back with gguf-py's GGUFReader, compared with the originals")
        pairs = [("synthetic.gguf", refdir / "synthetic.gguf"),
                 ("synthetic-stream.gguf", refdir / "synthetic.gguf"),
                 ("synthetic-notensors.gguf", refdir / "synthetic-notensors.gguf"),
                 (MODEL_FILE, Path(model))]
        pairs += [(os.path.basename(p), Path(p))
                  for p in sorted(glob.glob(os.path.join(shared, "tokenizers", "*.gguf")))]
        for name, orig in pairs:
            ours = out / name
            if not ours.exists():
                report(False, "%s: not written" % name)
                continue
            diffs, summary = compare_readers(ours, orig)
            origname = "tests/ref/writer/" + orig.name if orig.parent == refdir else \
                "default model" if name == MODEL_FILE else "tokenizers/" + orig.name
            report(not diffs, "%s vs %s: %s%s" % (name, origname, summary,
                                                  " identical in gguf-py" if not diffs else
                                                  ": " + "; ".join(diffs[:10])))
            if name.startswith("synthetic.") or name.startswith("synthetic-stream"):
                bad = check_synthetic_values(gguf.GGUFReader(ours))
                report(not bad, "%s: values and tensors as meant" % name
                       + ("" if not bad else ": " + "; ".join(bad)))
            same, story = byte_story(ours, orig)
            print("      bytes: %s" % story)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print("\ncheck_writer_roundtrip: %d passed, %d failed" % (passes, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
