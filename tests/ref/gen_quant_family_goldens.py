#!/usr/bin/env python3
"""Goldens for `ruvllm quantize` on the families of issue 18, from llama.cpp's
llama_model_quantize.

    python3 tests/ref/gen_quant_family_goldens.py            # rewrite tests/ref/quantize/family-*.tsv
    python3 tests/ref/gen_quant_family_goldens.py --check    # compare ruvllm with llama.cpp only

The F32 tiny models of tests/data/tiny/ (tests/ref/gen_tiny_hf.py: qwen3
as gguf-py wrote it, the others as llama.cpp's convert_hf_to_gguf.py wrote
them) are quantized by llama.cpp (llama_model_quantize with
llama_model_quantize_default_params(), ftype set, 2 threads, no importance
matrix) to each mix of MIXES, and by `ruvllm quantize` to the same; every
tensor's type and bytes must agree. The models are 64 wide, so the rows of
most matrices are not whole 256-element K-quant blocks and llama.cpp falls
back (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0):
those fallbacks are part of what is compared; the per-family rules (Gemma's
and Phi-3's fused or post-norm tensors, GQA's attn_v, the tied output) are
the rest.

tests/ref/quantize/family-<model>.tsv, one line per mix and tensor of
llama.cpp's output, in its order:
    MIX <tab> tensor <tab> type <tab> first 16 hex digits of SHA-256 of its data
which tests/cli/t0061-quantize.sh compares with ruvllm's (tensor_hashes of
tests/cli/lib.sh gives the same three columns).

Uses gen_quantize_goldens.py's llama.cpp and ruvllm drivers. Versions of the
committed files: llama-cpp-python 0.3.36 (its bundled llama.cpp), gguf-py
0.19.0, numpy 2.4.6, Python 3.11. Needs build/ruvllm. Exit status 1 on a
difference.
"""
import argparse
import hashlib
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_quantize_goldens as gq  # noqa: E402
import gguf  # noqa: E402
import llama_cpp  # noqa: E402
import numpy as np  # noqa: E402

TINY = os.path.join(gq.ROOT, "tests/data/tiny")
# the families' F32 files (mistral is arch llama, ministral3 mistral3)
MODELS = ["qwen3", "qwen3-hf", "gemma2", "gemma3", "mistral", "ministral3", "phi3", "phi3-partial"]
MIXES = ["Q4_0", "Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "Q2_K"]
VERSIONS = {"llama_cpp": "0.3.36", "gguf": "0.19.0", "numpy": "2.4.6"}


def hashes(path):
    return [(t.name, t.tensor_type.name, hashlib.sha256(bytes(t.data)).hexdigest()[:16])
            for t in gguf.GGUFReader(path).tensors]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="compare only, write nothing")
    ap.add_argument("--ruvllm", default=gq.RUVLLM, help="the binary (default build/ruvllm)")
    ap.add_argument("models", nargs="*", default=MODELS)
    a = ap.parse_args()
    gq.RUVLLM = a.ruvllm
    from importlib.metadata import version
    got = {"llama_cpp": llama_cpp.__version__, "gguf": version("gguf"), "numpy": np.__version__}
    for k, want in VERSIONS.items():
        if got[k] != want:
            print(f"warning: {k} {got[k]} differs from the {want} that made the committed files",
                  file=sys.stderr)
    bad = 0
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models:
            src = os.path.join(TINY, name + ".gguf")
            lines = []
            for mix in MIXES:
                ref, ours = os.path.join(tmp, "ref.gguf"), os.path.join(tmp, "ours.gguf")
                gq.llama_quantize(src, ref, gq.FTYPES[mix])
                gq.ruvllm_quantize(src, ours, mix)
                bad += gq.compare(f"{name} {mix}", ours, ref)
                h = hashes(ref)
                types = sorted({t for _, t, _ in h})
                print(f"  llama.cpp's types: {' '.join(types)}")
                lines += [f"{mix}\t{n}\t{t}\t{d}" for n, t, d in h]
                os.unlink(ref)
                os.unlink(ours)
            out[name] = lines
    if not a.check:
        os.makedirs(gq.OUTDIR, exist_ok=True)
        for name, lines in out.items():
            with open(os.path.join(gq.OUTDIR, f"family-{name}.tsv"), "w") as f:
                f.write("\n".join(lines) + "\n")
        print(f"wrote {gq.OUTDIR}/family-*.tsv")
    print("OK" if not bad else f"{bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
