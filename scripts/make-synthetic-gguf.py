#!/usr/bin/env python3
"""Write a GGUF model of a real architecture's shape with random weights, so
that ruvllm and llama.cpp can be timed on the same 7B-class file without a
multi-gigabyte download (README, Performance). Speed does not depend on the
weights' values; the text it generates is noise.

    scripts/make-synthetic-gguf.py OUT.gguf [--shape llama-7b] [--type Q4_0]
        [--vocab-from MODEL.gguf]

Shapes are Llama 2 7B's (32 layers, 4096 wide, 32 heads, FFN 11008),
Llama 3.2 1B's, and qwen3moe-a3b: 6 layers of Qwen3-30B-A3B (2048 wide, 32
heads of 128, 4 kv heads, QK-norm, 128 experts of width 768, 8 per token),
a mixture of experts of 2 GB whose per-token work is the real model's per
layer (the router's weights are random, so its choices are spread); and
gpt-oss-20b: 4 of its 24 layers (2880 wide, 64 heads of 64, 8 kv heads,
sinks, biases, a 128-token window on every other layer, 32 experts of
2880, 4 per token, YaRN), experts in MXFP4 as OpenAI ships them, the rest
in --type. The tokenizer (and so the vocabulary size) is copied from
--vocab-from (default: the default model, SmolLM2's 49152 tokens), so
prompts tokenize. Every matrix is Q4_0 (or Q8_0, Q4_K) with random quants and
small random scales; norms are ones. Made with gguf-py 0.19.0, numpy.
"""
import argparse
import os
import sys

import numpy as np
import gguf

SHAPES = {
    "llama-7b": dict(n_layer=32, n_embd=4096, n_head=32, n_head_kv=32, n_ff=11008, ctx=4096, base=10000.0),
    "llama-1b": dict(n_layer=16, n_embd=2048, n_head=32, n_head_kv=8, n_ff=8192, ctx=8192, base=500000.0),
    "qwen3moe-a3b": dict(n_layer=6, n_embd=2048, n_head=32, n_head_kv=4, n_ff=6144, ctx=40960,
                         base=1000000.0, arch="qwen3moe", head_dim=128, n_expert=128,
                         n_expert_used=8, n_ff_exp=768),
    "gpt-oss-20b": dict(n_layer=4, n_embd=2880, n_head=64, n_head_kv=8, n_ff=2880, ctx=131072,
                        base=150000.0, arch="gpt-oss", head_dim=64, n_expert=32, n_expert_used=4,
                        n_ff_exp=2880),
}


def rand_mxfp4(rng, rows, cols):
    """MXFP4 blocks of 32: an e8m0 scale byte (2^-7 .. 2^-5) and 16 bytes of nibbles."""
    nb = cols // 32
    blk = np.empty((rows, nb, 17), dtype=np.uint8)
    blk[:, :, 0] = rng.integers(120, 123, (rows, nb), dtype=np.uint8)
    blk[:, :, 1:] = rng.integers(0, 256, (rows, nb, 16), dtype=np.uint8)
    return blk.reshape(rows, nb * 17), gguf.GGMLQuantizationType.MXFP4


def rand_quant(rng, rows, cols, qtype):
    if qtype == "Q4_K":  # super-blocks of 256: d, dmin (f16), 12 bytes of scales, 128 of nibbles
        nb = cols // 256
        blk = np.empty((rows, nb, 144), dtype=np.uint8)
        d = (rng.standard_normal((rows, nb, 2)) * 0.0005).astype(np.float16)
        blk[:, :, 0:4] = d.view(np.uint8).reshape(rows, nb, 4)
        blk[:, :, 4:] = rng.integers(0, 256, (rows, nb, 140), dtype=np.uint8)
        return blk.reshape(rows, nb * 144), gguf.GGMLQuantizationType.Q4_K
    nb = cols // 32
    if qtype == "Q4_0":
        blk = np.empty((rows, nb, 18), dtype=np.uint8)
        d = (rng.standard_normal((rows, nb)) * 0.002).astype(np.float16)
        blk[:, :, 0:2] = d.view(np.uint8).reshape(rows, nb, 2)
        blk[:, :, 2:] = rng.integers(0, 256, (rows, nb, 16), dtype=np.uint8)
        return blk.reshape(rows, nb * 18), gguf.GGMLQuantizationType.Q4_0
    blk = np.empty((rows, nb, 34), dtype=np.uint8)
    d = (rng.standard_normal((rows, nb)) * 0.0002).astype(np.float16)
    blk[:, :, 0:2] = d.view(np.uint8).reshape(rows, nb, 2)
    blk[:, :, 2:] = rng.integers(0, 256, (rows, nb, 32), dtype=np.uint8)
    return blk.reshape(rows, nb * 34), gguf.GGMLQuantizationType.Q8_0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", default="llama-7b", choices=sorted(SHAPES))
    ap.add_argument("--type", default="Q4_0", choices=["Q4_0", "Q8_0", "Q4_K"])
    ap.add_argument("--vocab-from", default=os.path.expanduser(
        "~/.cache/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    a = ap.parse_args()
    s = SHAPES[a.shape]
    r = gguf.GGUFReader(a.vocab_from)
    arch = s.get("arch", "llama")
    w = gguf.GGUFWriter(a.out + ".tmp", arch)
    w.add_name(f"synthetic {a.shape} {a.type}")
    w.add_block_count(s["n_layer"])
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["n_embd"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(s["base"])
    if "n_expert" in s:
        w.add_key_length(s["head_dim"])
        w.add_value_length(s["head_dim"])
        w.add_expert_count(s["n_expert"])
        w.add_expert_used_count(s["n_expert_used"])
        w.add_expert_feed_forward_length(s["n_ff_exp"])
    if arch == "gpt-oss":
        w.add_uint32(f"{arch}.attention.sliding_window", 128)
        w.add_string(f"{arch}.rope.scaling.type", "yarn")
        w.add_float32(f"{arch}.rope.scaling.factor", 32.0)
        w.add_uint32(f"{arch}.rope.scaling.original_context_length", 4096)
    w.add_file_type({"Q4_0": 2, "Q8_0": 7, "Q4_K": 15}[a.type])
    n_vocab = 0
    for name, f in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.STRING:
            w.add_string(name, bytes(f.parts[f.data[0]]).decode("utf-8"))
        elif t == gguf.GGUFValueType.ARRAY:
            st = f.types[1]
            if st == gguf.GGUFValueType.STRING:
                vals = [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data]
            else:
                vals = [f.parts[i].tolist()[0] for i in f.data]
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(vals)
            w.add_key_value(name, vals, t, sub_type=st)
        else:
            w.add_key_value(name, f.parts[f.data[0]].tolist()[0], t)
    rng = np.random.default_rng(7)
    E, F = s["n_embd"], s["n_ff"]
    hd = s.get("head_dim", E // s["n_head"])
    Q, KV = s["n_head"] * hd, s["n_head_kv"] * hd

    def mat(name, rows, cols):
        data, qt = rand_quant(rng, rows, cols, a.type)
        w.add_tensor(name, data, raw_dtype=qt)  # shape from the byte shape

    mat("token_embd.weight", n_vocab, E)
    w.add_tensor("output_norm.weight", np.ones(E, dtype=np.float32))
    mat("output.weight", n_vocab, E)
    for i in range(s["n_layer"]):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(E, dtype=np.float32))
        ffn_norm = "post_attention_norm" if s.get("arch") == "gpt-oss" else "ffn_norm"
        w.add_tensor(f"blk.{i}.{ffn_norm}.weight", np.ones(E, dtype=np.float32))
        mat(f"blk.{i}.attn_q.weight", Q, E)
        mat(f"blk.{i}.attn_k.weight", KV, E)
        mat(f"blk.{i}.attn_v.weight", KV, E)
        mat(f"blk.{i}.attn_output.weight", E, Q)
        if "n_expert" not in s:
            mat(f"blk.{i}.ffn_gate.weight", F, E)
            mat(f"blk.{i}.ffn_up.weight", F, E)
            mat(f"blk.{i}.ffn_down.weight", E, F)
            continue
        ne, fe = s["n_expert"], s["n_ff_exp"]
        oss = arch == "gpt-oss"

        def vec(name, n, scale):
            w.add_tensor(name, (rng.standard_normal(n) * scale).astype(np.float32))

        if oss:
            for nm, n in (("q", Q), ("k", KV), ("v", KV), ("output", E)):
                vec(f"blk.{i}.attn_{nm}.bias", n, 0.01)
            vec(f"blk.{i}.attn_sinks.weight", s["n_head"], 1.0)
            vec(f"blk.{i}.ffn_gate_inp.bias", ne, 0.01)
            for nm, n in (("gate", fe), ("up", fe), ("down", E)):
                w.add_tensor(f"blk.{i}.ffn_{nm}_exps.bias",
                             (rng.standard_normal((ne, n)) * 0.01).astype(np.float32))
        else:
            w.add_tensor(f"blk.{i}.attn_q_norm.weight", np.ones(hd, dtype=np.float32))
            w.add_tensor(f"blk.{i}.attn_k_norm.weight", np.ones(hd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate_inp.weight",
                     (rng.standard_normal((ne, E)) * 0.05).astype(np.float32))
        for nm, rows, cols in (("gate", fe, E), ("up", fe, E), ("down", E, fe)):
            blocks = [rand_mxfp4(rng, rows, cols) if oss else rand_quant(rng, rows, cols, a.type)
                      for _ in range(ne)]
            data = np.stack([b[0] for b in blocks])  # (n_expert, rows, row bytes)
            w.add_tensor(f"blk.{i}.ffn_{nm}_exps.weight", data, raw_dtype=blocks[0][1])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(a.out + ".tmp", a.out)
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 1e9:.2f} GB)", file=sys.stderr)


if __name__ == "__main__":
    main()
