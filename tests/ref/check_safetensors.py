#!/usr/bin/env python3
"""Cross-check libruvllm's safetensors reader and writer against the
reference implementation (Hugging Face safetensors, Python bindings).

  1. The reference writes files (every dtype, scalars, zero-size dims,
     8 dims, metadata, unicode names) with safetensors.serialize; our
     reader (rvl_st_open) dumps them: names, dtypes, shapes, bytes and
     metadata must match.
  2. Our writer copies each file (tensors in file order, same metadata);
     the copy must be byte-identical to the reference's file, and the
     reference (safetensors.deserialize, safetensors.numpy.load_file) must
     read it back identically.
  3. A sharded model as transformers writes it (two shards and
     model.safetensors.index.json) is opened through its directory.
  4. Files the reference refuses or accepts: our reader agrees on every
     file of the fuzz corpus, except where we are stricter on purpose
     (unsupported dtypes, more than 8 dims, duplicate metadata keys).

Not part of `make check` (it needs Python and `pip install safetensors`;
torch is not needed). It compiles a small driver against the library.

usage: python3 tests/ref/check_safetensors.py [BUILD_DIR]    (default: build)
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import safetensors
from safetensors import TensorSpec, deserialize, serialize
from safetensors.numpy import load_file

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

static void hex(const void *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        printf("%02x", ((const unsigned char *)p)[i]);
}

static int dump(const char *path)
{
    rvl_st *st;
    if (rvl_st_open(&st, path)) {
        printf("ERROR\t%s\n", rvl_errmsg());
        return 0;
    }
    for (uint64_t i = 0; i < st->n_kv; i++) {
        printf("M\t");
        hex(st->kv[i].key.ptr, st->kv[i].key.len);
        printf("\t");
        hex(st->kv[i].strs[0].ptr, st->kv[i].strs[0].len);
        printf("\n");
    }
    for (uint64_t i = 0; i < st->n_tensors; i++) {
        const rvl_tensor_info *t = &st->tensors[i];
        printf("T\t");
        hex(t->name.ptr, t->name.len);
        printf("\t%s\t", rvl_st_dtype_name(t->type, NULL));
        for (uint32_t d = 0; d < t->n_dims; d++)
            printf("%s%llu", d ? "," : "", (unsigned long long)t->ne[t->n_dims - 1 - d]);
        printf("\t%u\t", t->shard);
        hex(t->data, t->nbytes);
        printf("\n");
    }
    rvl_st_free(st);
    return 0;
}

static int copy(const char *in, const char *out)
{
    rvl_st *st;
    rvl_st_writer *w;
    if (rvl_st_open(&st, in) || rvl_st_writer_open(&w, out)) {
        fprintf(stderr, "%s\n", rvl_errmsg());
        return 1;
    }
    for (uint64_t i = 0; i < st->n_kv; i++)
        if (rvl_st_writer_meta(w, st->kv[i].key.ptr, st->kv[i].strs[0].ptr))
            goto fail;
    for (uint64_t i = 0; i < st->n_tensors; i++) {
        const rvl_tensor_info *t = &st->tensors[i];
        uint64_t shape[RVL_MAX_DIMS];
        for (uint32_t d = 0; d < t->n_dims; d++)
            shape[d] = t->ne[t->n_dims - 1 - d];
        if (rvl_st_writer_add(w, t->name.ptr, t->type, t->n_dims, shape, t->data))
            goto fail;
    }
    if (rvl_st_writer_finish(w)) {
        fprintf(stderr, "%s\n", rvl_errmsg());
        return 1;
    }
    rvl_st_free(st);
    return 0;
fail:
    fprintf(stderr, "%s\n", rvl_errmsg());
    rvl_st_writer_abort(w);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "dump"))
        return dump(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "copy"))
        return copy(argv[2], argv[3]);
    fprintf(stderr, "usage: driver dump PATH | copy IN OUT\n");
    return 2;
}
"""

# safetensors dtype -> (TensorSpec dtype name, numpy dtype or None)
DTYPES = {
    "F64": ("float64", np.float64), "F32": ("float32", np.float32),
    "F16": ("float16", np.float16), "BF16": ("bfloat16", None),
    "I64": ("int64", np.int64), "I32": ("int32", np.int32),
    "I16": ("int16", np.int16), "I8": ("int8", np.int8),
    "U8": ("uint8", np.uint8), "BOOL": ("bool", np.bool_),
}
ELEM = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
        "U8": 1, "BOOL": 1}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def build_driver(tmp):
    src = os.path.join(tmp, "st_driver.c")
    exe = os.path.join(tmp, "st_driver")
    with open(src, "w") as f:
        f.write(DRIVER)
    pkgs = "libzstd libxxhash readline libpcre2-8 libutf8proc libcjson"
    libs = subprocess.check_output(["pkg-config", "--libs"] + pkgs.split(), text=True).split()
    subprocess.check_call(["cc", "-std=gnu11", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "lib"),
                           src, os.path.join(BUILD, "libruvllm.a")] + libs +
                          ["-lm", "-pthread", "-o", exe])
    return exe


def tensor_bytes(dtype, shape, seed):
    n = ELEM[dtype]
    for d in shape:
        n *= d
    if dtype == "BOOL":
        return bytes((seed + i) % 2 for i in range(n))
    return bytes((seed * 37 + i * 11) & 0xFF for i in range(n))


def ref_file(tensors, metadata):
    """tensors: {name: (dtype, shape, bytes)} -> bytes written by the reference."""
    keep, specs = [], {}
    for name, (dtype, shape, data) in tensors.items():
        buf = np.frombuffer(data, dtype=np.uint8).copy() if data else np.zeros(1, np.uint8)
        keep.append(buf)
        specs[name] = TensorSpec(dtype=DTYPES[dtype][0], shape=list(shape),
                                 data_ptr=buf.ctypes.data, data_len=len(data))
    return bytes(serialize(specs, metadata=metadata))


def dump(driver, path):
    out = subprocess.check_output([driver, "dump", path], text=True)
    meta, tensors = {}, {}
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == "ERROR":
            return None, f[1]
        if f[0] == "M":
            meta[bytes.fromhex(f[1]).decode()] = bytes.fromhex(f[2]).decode()
        elif f[0] == "T":
            shape = [int(x) for x in f[3].split(",")] if f[3] else []
            tensors[bytes.fromhex(f[1]).decode()] = (f[2], shape, bytes.fromhex(f[5]), int(f[4]))
    return meta, tensors


CASES = {
    "every-dtype": ({"t_" + dt.lower(): (dt, [2, 3], None) for dt in DTYPES}, {"format": "pt"}),
    "shapes": ({"scalar": ("F32", [], None), "zero": ("F16", [0, 4], None),
                "zero2": ("I64", [3, 0], None), "eight": ("I8", [1, 2, 1, 2, 1, 2, 1, 2], None),
                "vec": ("BF16", [5], None)}, None),
    "unicode": ({"\u00fcber.\u6f22\u5b57.w \"q\"": ("U8", [3], None)},
                {"note": "line\nbreak \u00e9 \"quoted\""}),
    "no-metadata": ({"a": ("F32", [4, 4], None), "b": ("F32", [2], None)}, None),
}


def main():
    print("safetensors", safetensors.__version__, "numpy", np.__version__)
    with tempfile.TemporaryDirectory() as tmp:
        driver = build_driver(tmp)

        for case, (spec, meta) in CASES.items():
            tensors = {n: (dt, sh, tensor_bytes(dt, sh, i))
                       for i, (n, (dt, sh, _)) in enumerate(spec.items())}
            ref = ref_file(tensors, meta)
            rp = os.path.join(tmp, case + ".ref.safetensors")
            with open(rp, "wb") as f:
                f.write(ref)

            # 1. our reader on the reference's file
            m, ts = dump(driver, rp)
            check(m is not None, "%s: our reader refused the reference file: %s" % (case, ts))
            if m is None:
                continue
            check(m == (meta or {}), "%s: metadata %r != %r" % (case, m, meta))
            check(set(ts) == set(tensors), "%s: tensor names differ" % case)
            for n, (dt, sh, data) in tensors.items():
                got = ts.get(n)
                check(got is not None and got[:3] == (dt, sh, data),
                      "%s: tensor %r differs: %r" % (case, n, got and got[:2]))

            # 2. our writer: byte-identical copy, readable by the reference
            op = os.path.join(tmp, case + ".ours.safetensors")
            subprocess.check_call([driver, "copy", rp, op])
            with open(op, "rb") as f:
                ours = f.read()
            check(ours == ref, "%s: our copy is not byte-identical to the reference file" % case)
            back = dict(deserialize(ours))
            for n, (dt, sh, data) in tensors.items():
                b = back.get(n)
                check(b is not None and b["dtype"] == dt and list(b["shape"]) == sh and
                      bytes(b["data"]) == data, "%s: reference reads our %r wrongly" % (case, n))
            if all(DTYPES[dt][1] is not None for dt, _, _ in tensors.values()):
                arrs = load_file(op)
                for n, (dt, sh, data) in tensors.items():
                    a = arrs[n]
                    check(a.dtype == DTYPES[dt][1] and list(a.shape) == sh and
                          a.tobytes() == data, "%s: numpy load_file of %r differs" % (case, n))
            print("ok", case)

        # 3. a sharded model directory
        sd = os.path.join(tmp, "sharded")
        os.mkdir(sd)
        shards = {"model-00001-of-00002.safetensors": {"a": ("F32", [2, 2]), "b": ("I8", [3])},
                  "model-00002-of-00002.safetensors": {"c": ("BF16", [4])}}
        weight_map, expect = {}, {}
        for s, (fname, spec) in enumerate(sorted(shards.items())):
            tensors = {n: (dt, sh, tensor_bytes(dt, sh, len(expect) + k))
                       for k, (n, (dt, sh)) in enumerate(spec.items())}
            with open(os.path.join(sd, fname), "wb") as f:
                f.write(ref_file(tensors, {"format": "pt"}))
            for n, t in tensors.items():
                weight_map[n] = fname
                expect[n] = t + (s,)
        with open(os.path.join(sd, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 23}, "weight_map": weight_map}, f, indent=2)
        m, ts = dump(driver, sd)
        check(m == {"format": "pt"}, "sharded: metadata %r" % (m,))
        check(ts == expect, "sharded: tensors differ: %r" % (ts,))
        print("ok sharded")

        # 4. accept/refuse agreement on the fuzz corpus
        corpus = os.path.join(ROOT, "tests", "fuzz", "corpus", "safetensors")
        stricter = {"gen-bad-dtype-f8.safetensors", "gen-bad-dtype-u32.safetensors",
                    "gen-bad-nine-dims.safetensors", "gen-bad-dup-metadata-key.safetensors"}
        n = 0
        for fn in sorted(os.listdir(corpus)) if os.path.isdir(corpus) else []:
            with open(os.path.join(corpus, fn), "rb") as f:
                data = f.read()
            try:
                deserialize(data)
                ref_ok = True
            except Exception:
                ref_ok = False
            m, _ = dump(driver, os.path.join(corpus, fn))
            ours_ok = m is not None
            if fn in stricter:
                check(ref_ok and not ours_ok, "corpus %s: expected only us to refuse" % fn)
            else:
                check(ref_ok == ours_ok, "corpus %s: reference %s, ours %s" %
                      (fn, "accepts" if ref_ok else "refuses", "accepts" if ours_ok else "refuses"))
            n += 1
        print("ok corpus agreement (%d files)" % n)

    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
