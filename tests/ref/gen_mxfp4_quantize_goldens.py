#!/usr/bin/env python3
"""Golden for `ruvllm quantize ... MXFP4_MOE` from llama.cpp's llama_model_quantize.

    /tmp/h22venv/bin/python tests/ref/gen_mxfp4_quantize_goldens.py          # rewrite
    /tmp/h22venv/bin/python tests/ref/gen_mxfp4_quantize_goldens.py --check  # compare only

Input: tests/data/tiny/mixtral.gguf (the tiny Mixtral of gen_tiny_hf.py, F32
weights, 4 experts per layer as 3-D ffn_{gate,up,down}_exps tensors).
llama.cpp quantizes it with LLAMA_FTYPE_MOSTLY_MXFP4_MOE (38): the 3-D expert
tensors MXFP4, every other matrix (output.weight included) Q8_0, 1-D tensors
and the router (ffn_gate_inp) kept. tests/ref/quantize/mxfp4-mixtral.tsv holds,
for every tensor, name, type and the first 16 hex digits of the SHA-256 of its
data; tests/cli/t0064-mxfp4.sh checks `ruvllm quantize` against it.
tests/ref/quantize/mxfp4-mixtral-f32.tsv: the same for gguf-py's dequantize of
llama.cpp's file to float32 (what `ruvllm dequant --type f32` must write).

Before writing (and with --check) ruvllm quantize runs on the same input and
every tensor's type and bytes are compared with llama.cpp's; exit status 1 on
a difference. Versions: llama-cpp-python 0.3.36 (its bundled llama.cpp),
gguf-py 0.19.0. Needs build/ruvllm.
"""
import argparse
import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile

import gguf
import llama_cpp
import numpy as np
from gguf import quants

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "tests/data/tiny/mixtral.gguf")
OUT = os.path.join(ROOT, "tests/ref/quantize/mxfp4-mixtral.tsv")
OUT_F32 = os.path.join(ROOT, "tests/ref/quantize/mxfp4-mixtral-f32.tsv")
RUVLLM = os.path.join(ROOT, "build/ruvllm")
FTYPE_MXFP4_MOE = 38


def table(path):
    rows = []
    for t in gguf.GGUFReader(path).tensors:
        rows.append((t.name, t.tensor_type.name, hashlib.sha256(bytes(t.data)).hexdigest()[:16]))
    return rows


def table_f32(path):
    rows = []
    for t in gguf.GGUFReader(path).tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.F32:
            y = np.asarray(t.data, np.float32)
        else:
            y = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        rows.append((t.name, "F32", hashlib.sha256(y.tobytes()).hexdigest()[:16]))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ref = os.path.join(tmp, "llama.gguf")
        ours = os.path.join(tmp, "ruvllm.gguf")
        p = llama_cpp.llama_model_quantize_default_params()
        p.nthread = 2
        p.ftype = FTYPE_MXFP4_MOE
        if llama_cpp.llama_model_quantize(SRC.encode(), ref.encode(), ctypes.byref(p)) != 0:
            sys.exit("llama_model_quantize failed")
        subprocess.run([RUVLLM, "quantize", "-q", "-t", "2", SRC, ours, "MXFP4_MOE"], check=True)
        want, got = table(ref), table(ours)
        want_f32 = table_f32(ref)
    bad = 0
    if [r[0] for r in want] != [r[0] for r in got]:
        print("tensor names or order differ")
        bad += 1
    g = {r[0]: r for r in got}
    for name, ty, h in want:
        if name in g and g[name][1:] != (ty, h):
            print("%s: ruvllm %s %s, llama.cpp %s %s" % (name, g[name][1], g[name][2], ty, h))
            bad += 1
    n_mx = sum(r[1] == "MXFP4" for r in want)
    print("%d tensors (%d MXFP4), %d differ" % (len(want), n_mx, bad))
    if bad:
        sys.exit(1)
    if not a.check:
        with open(OUT, "w") as f:
            f.write("# llama.cpp (llama-cpp-python 0.3.36) quantize of tests/data/tiny/mixtral.gguf "
                    "to MXFP4_MOE\n# name\ttype\tsha256[:16] of the data\n")
            for r in want:
                f.write("\t".join(r) + "\n")
        with open(OUT_F32, "w") as f:
            f.write("# gguf-py 0.19.0 dequantize to float32 of that file\n"
                    "# name\ttype\tsha256[:16] of the data\n")
            for r in want_f32:
                f.write("\t".join(r) + "\n")
        print("wrote", OUT, OUT_F32)


if __name__ == "__main__":
    main()
