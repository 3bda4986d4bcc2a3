#!/usr/bin/env python3
"""Goldens for `ruvllm quantize` from llama.cpp's llama_model_quantize.

    python3 tests/ref/gen_quantize_goldens.py            # rewrite tests/ref/quantize/
    python3 tests/ref/gen_quantize_goldens.py --check    # compare ruvllm with llama.cpp only

Versions: llama-cpp-python 0.3.36 (its bundled llama.cpp), gguf-py 0.19.0,
numpy. Needs build/ruvllm.

1. Mix rules (tests/test_quant_mix.c): synthetic llama models written here
   with gguf-py (random F16 weights; the rules depend on names and shapes
   only) are quantized by llama.cpp for every mix ruvllm supports; the type
   llama.cpp chose for every tensor goes to quantize/mix-<model>.tsv:
       # model facts (arch, n_layer, n_head, n_head_kv, n_expert, imatrix)
       T <tab> tensor <tab> type <tab> n_dims <tab> ne0 <tab> ne1 <tab> ne2   (input order)
       M <tab> MIX <tab> the output types, space-separated, in that order
   Models: "gqa" (16 layers 256 wide, GQA 4, separate output; with and
   without an importance matrix, which changes some rules), "tied" (8
   layers, no output.weight, no GQA, ffn width 320 so that ffn_down rows
   are not whole K-quant blocks: the fallbacks).
2. Bytes (tests/cli/t0061-quantize-llamacpp.sh): the default model
   (SmolLM2-135M-Instruct Q4_1) through `ruvllm dequant --type f16`, then
   llama.cpp's quantize to Q8_0, Q5_0, Q4_0 and Q4_K_M; for every tensor
   quantize/smollm2-<TYPE>.tsv holds name, type and the first 16 hex digits
   of the SHA-256 of its data.
With --check (and always, before writing) ruvllm quantize runs on the same
inputs and every tensor's type and bytes are compared with llama.cpp's,
also with an importance matrix (written as an imatrix GGUF for ruvllm,
passed as llama_model_imatrix_data to llama.cpp) and a --tensor-type
override. Exit status 1 on a difference.
"""
import argparse
import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf
import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUTDIR = os.path.join(ROOT, "tests/ref/quantize")
RUVLLM = os.path.join(ROOT, "build/ruvllm")
DEFAULT_MODEL = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                             "ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf")

# llama_ftype ids of the mixes ruvllm implements (llama.h)
FTYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9,
    "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15,
    "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "Q2_K_S": 21, "IQ4_NL": 25, "IQ4_XS": 30,
    "BF16": 32,
}
NEEDS_IMATRIX = {"Q2_K_S"}
BYTE_TYPES = ["Q8_0", "Q5_0", "Q4_0", "Q4_K_M"]


def synth_model(path, n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab, tied, seed):
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(512)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_vocab_size(n_vocab)
    w.add_file_type(1)
    hd = n_embd // n_head
    mats = [("token_embd.weight", (n_vocab, n_embd))]
    vecs = [("output_norm.weight", n_embd)]
    if not tied:
        mats.append(("output.weight", (n_vocab, n_embd)))
    for i in range(n_layer):
        p = f"blk.{i}."
        vecs += [(p + "attn_norm.weight", n_embd), (p + "ffn_norm.weight", n_embd)]
        mats += [(p + "attn_q.weight", (n_embd, n_embd)), (p + "attn_k.weight", (n_head_kv * hd, n_embd)),
                 (p + "attn_v.weight", (n_head_kv * hd, n_embd)), (p + "attn_output.weight", (n_embd, n_embd)),
                 (p + "ffn_gate.weight", (n_ff, n_embd)), (p + "ffn_up.weight", (n_ff, n_embd)),
                 (p + "ffn_down.weight", (n_embd, n_ff))]
    for name, shape in mats:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float16))
    for name, n in vecs:
        w.add_tensor(name, np.ones(n, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"arch": "llama", "n_layer": n_layer, "n_head": n_head, "n_head_kv": n_head_kv, "n_expert": 0}


def imatrix_for(model_path, seed):
    """Random positive importance values for every 2-D weight: {name: float32[ne0]}."""
    rng = np.random.default_rng(seed)
    r = gguf.GGUFReader(model_path)
    return {t.name: (rng.random(int(t.shape[0])) * 2 + 0.05).astype(np.float32)
            for t in r.tensors if len(t.shape) >= 2}


def write_imatrix_gguf(path, im):
    w = gguf.GGUFWriter(path, "llama")
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["synthetic"])
    w.add_uint32("imatrix.chunk_count", 1)
    w.add_uint32("imatrix.chunk_size", 512)
    for name, v in im.items():
        w.add_tensor(name + ".in_sum2", v.reshape(1, -1))     # count 1: values exactly
        w.add_tensor(name + ".counts", np.ones((1, 1), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_quantize(inp, out, ftype, im=None, overrides=None):
    p = llama_cpp.llama_model_quantize_default_params()
    p.nthread = 2
    p.ftype = ftype
    keep = []
    if im:
        arr = (llama_cpp.llama_model_imatrix_data * (len(im) + 1))()
        for i, (name, v) in enumerate(im.items()):
            buf = np.ascontiguousarray(v, np.float32)
            keep.append(buf)
            arr[i].name = name.encode()
            arr[i].data = buf.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            arr[i].size = buf.size
        arr[len(im)].name = None
        p.imatrix = arr
        keep.append(arr)
    if overrides:
        arr = (llama_cpp.llama_model_tensor_override * (len(overrides) + 1))()
        for i, (pat, ty) in enumerate(overrides):
            arr[i].pattern = pat.encode()
            arr[i].type = int(ty)
        arr[len(overrides)].pattern = None
        p.tt_overrides = arr
        keep.append(arr)
    rc = llama_cpp.llama_model_quantize(inp.encode(), out.encode(), ctypes.byref(p))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize failed for ftype {ftype}")


def ruvllm_quantize(inp, out, mix, imatrix=None, extra=()):
    cmd = [RUVLLM, "quantize", "-q", "-t", "2", *extra]
    if imatrix:
        cmd += ["--imatrix", imatrix]
    subprocess.run(cmd + [inp, out, mix], check=True)


def tensors(path):
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def compare(label, ours, ref):
    a, b = tensors(ours), tensors(ref)
    bad = 0
    if list(a) != list(b):
        print(f"{label}: tensor names or order differ"); bad += 1
    same = 0
    for n, tb in b.items():
        ta = a.get(n)
        if ta is None:
            continue
        if ta.tensor_type != tb.tensor_type:
            print(f"{label}: {n}: type {ta.tensor_type.name}, llama.cpp {tb.tensor_type.name}"); bad += 1
        elif bytes(ta.data) != bytes(tb.data):
            print(f"{label}: {n}: {ta.tensor_type.name} bytes differ"); bad += 1
        else:
            same += 1
    print(f"{label}: {same}/{len(b)} tensors identical to llama.cpp's")
    return bad


def main():
    global RUVLLM
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="compare only, write nothing")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--ruvllm", default=RUVLLM, help="the binary (default build/ruvllm)")
    a = ap.parse_args()
    RUVLLM = a.ruvllm
    bad = 0
    mix_out, byte_out = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        # ---- 1. mix rules on synthetic models
        models = {
            "gqa": dict(n_layer=16, n_embd=256, n_ff=512, n_head=8, n_head_kv=2, n_vocab=512, tied=False, seed=1),
            "tied": dict(n_layer=8, n_embd=256, n_ff=320, n_head=4, n_head_kv=4, n_vocab=384, tied=True, seed=2),
        }
        for mname, spec in models.items():
            src = os.path.join(tmp, mname + ".gguf")
            facts = synth_model(src, **spec)
            variants = [(mname, None)]
            if mname == "gqa":
                variants.append((mname + "-imatrix", imatrix_for(src, 3)))
            for label, im in variants:
                imf = None
                if im:
                    imf = os.path.join(tmp, label + ".imatrix.gguf")
                    write_imatrix_gguf(imf, im)
                lines = [f"# {k} {v}" for k, v in facts.items()] + [f"# imatrix {1 if im else 0}"]
                for t in gguf.GGUFReader(src).tensors:
                    ne = [int(x) for x in t.shape] + [1] * (3 - len(t.shape))
                    lines.append(f"T\t{t.name}\t{t.tensor_type.name}\t{len(t.shape)}\t{ne[0]}\t{ne[1]}\t{ne[2]}")
                for mix, ft in FTYPES.items():
                    if mix in NEEDS_IMATRIX and not im:
                        continue
                    ref = os.path.join(tmp, f"ref-{label}-{mix}.gguf")
                    ours = os.path.join(tmp, f"ours-{label}-{mix}.gguf")
                    llama_quantize(src, ref, ft, im)
                    ruvllm_quantize(src, ours, mix, imf)
                    bad += compare(f"{label} {mix}", ours, ref)
                    got = {t.name: t.tensor_type.name for t in gguf.GGUFReader(ref).tensors}
                    lines.append(f"M\t{mix}\t" + " ".join(got[t.name] for t in gguf.GGUFReader(src).tensors))
                    os.unlink(ref)
                    os.unlink(ours)
                mix_out[label] = lines
            # a --tensor-type override
            if mname == "gqa":
                ref, ours = os.path.join(tmp, "ref-ovr.gguf"), os.path.join(tmp, "ours-ovr.gguf")
                llama_quantize(src, ref, FTYPES["Q4_K_M"],
                               overrides=[("attn_(q|k)", gguf.GGMLQuantizationType.Q8_0),
                                          ("ffn_down", gguf.GGMLQuantizationType.Q5_1)])
                ruvllm_quantize(src, ours, "Q4_K_M",
                                extra=["--tensor-type", "attn_(q|k)=q8_0", "--tensor-type", "ffn_down=Q5_1"])
                bad += compare("gqa Q4_K_M --tensor-type", ours, ref)

        # ---- 2. bytes on the default model
        f16 = os.path.join(tmp, "smollm2-f16.gguf")
        subprocess.run([RUVLLM, "dequant", "-q", "--type", "f16", a.model, f16], check=True)
        for mix in BYTE_TYPES:
            ref, ours = os.path.join(tmp, f"ref-{mix}.gguf"), os.path.join(tmp, f"ours-{mix}.gguf")
            llama_quantize(f16, ref, FTYPES[mix])
            ruvllm_quantize(f16, ours, mix)
            bad += compare(f"smollm2 {mix}", ours, ref)
            byte_out[mix] = [f"{t.name}\t{t.tensor_type.name}\t{hashlib.sha256(bytes(t.data)).hexdigest()[:16]}"
                             for t in gguf.GGUFReader(ref).tensors]
            os.unlink(ref)
            os.unlink(ours)

    if not a.check:
        os.makedirs(OUTDIR, exist_ok=True)
        for label, lines in mix_out.items():
            with open(os.path.join(OUTDIR, f"mix-{label}.tsv"), "w") as f:
                f.write("\n".join(lines) + "\n")
        for mix, lines in byte_out.items():
            with open(os.path.join(OUTDIR, f"smollm2-{mix}.tsv"), "w") as f:
                f.write("\n".join(lines) + "\n")
        print(f"wrote {OUTDIR}")
    print("OK" if not bad else f"{bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
