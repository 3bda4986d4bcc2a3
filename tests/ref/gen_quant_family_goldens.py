#!/usr/bin/env python3
"""Goldens for `ruvllm quantize` on the families of issue 18 and the mixtures
of experts of issue 19, from llama.cpp's llama_model_quantize.

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
the rest. The mixtures of experts (mixtral: 4 experts; qwen3moe: 8, which
switches on llama.cpp's 8-expert rules: attn_v and attn_k Q8_0, attn_output
Q5_K in the low mixes; qwen2moe: 4 and a shared expert) add the 3-D
ffn_{gate,up,down}_exps, quantized a matrix an expert, and the routers
ffn_gate_inp, never quantized. deepseek2 and deepseek3 (DeepSeek-V2 and V3
as convert_hf_to_gguf.py writes them: MLA's attn_q_a/attn_q_b, attn_kv_a_mqa,
attn_k_b (16 wide: F16, llama.cpp's fallback for rows that are not whole
32-element blocks) and attn_v_b, a leading dense layer, shared experts,
V3's exp_probs_b.bias) and gpt-oss (biases, attn_sinks, 4 experts; also
with MXFP4 experts from gen_gptoss_mxfp4.py) add MXFP4_MOE. DeepSeek-V2-Lite
(tests/data/tiny/deepseek2-lite.gguf, no q_lora_rank) is left out: this
llama.cpp's llama_model_quantize refuses the converter's own file ("key not
found in model: deepseek2.attention.q_lora_rank").

Since the tiny models' rows are not whole K-quant blocks, --wide-moe (check
only, nothing written; log: tests/ref/quantize/wide-moe.log) also builds
two synthetic F16 mixtures of experts 256 wide with gguf-py, "moe8" (llama,
8 experts, 8 layers: the 8-expert rules and use_more_bits over the
layers, in K-quants) and "qwen2moe" (4 experts and a shared expert of 256,
4 layers), "deepseek2" (DeepSeek-V3's layout: MLA with q_lora_rank 256,
kv_lora_rank 256, attn_k_b rows 128 wide as in the real models, a leading
dense layer, 16 experts and a shared one, exp_probs_b) and "gpt-oss"
(16 experts, biases, sinks), and compares ruvllm with llama.cpp on them for
every mix of gen_quantize_goldens.py (Q2_K_S with an importance matrix) and
MXFP4_MOE. Names after --wide-moe pick some of the four.

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
MODELS = ["qwen3", "qwen3-hf", "gemma2", "gemma3", "mistral", "ministral3", "phi3", "phi3-partial",
          "mixtral", "qwen3moe", "qwen2moe", "deepseek2", "deepseek3", "gpt-oss", "gpt-oss-mxfp4"]
MIXES = ["Q4_0", "Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "Q2_K"]
# issue 19's families: also MXFP4_MOE (experts MXFP4, the rest Q8_0); the
# gpt-oss whose experts are MXFP4 already (gen_gptoss_mxfp4.py) only that
# (llama.cpp refuses to requantize them to another type)
MODEL_MIXES = {"deepseek2": MIXES + ["MXFP4_MOE"], "deepseek3": MIXES + ["MXFP4_MOE"],
               "gpt-oss": MIXES + ["MXFP4_MOE"], "gpt-oss-mxfp4": ["MXFP4_MOE"]}
FTYPES = dict(gq.FTYPES, MXFP4_MOE=38)   # LLAMA_FTYPE_MOSTLY_MXFP4_MOE
VERSIONS = {"llama_cpp": "0.3.36", "gguf": "0.19.0", "numpy": "2.4.6"}


def hashes(path):
    return [(t.name, t.tensor_type.name, hashlib.sha256(bytes(t.data)).hexdigest()[:16])
            for t in gguf.GGUFReader(path).tensors]


def synth_moe(path, arch, n_layer, n_embd, n_ff_exp, n_expert, n_used, n_ff_shexp, seed):
    """An F16 mixture of experts of random weights (the rules depend on
    names, shapes and hyper-parameters only)."""
    rng = np.random.default_rng(seed)
    n_head, n_head_kv, n_vocab = 8, 2, 512
    hd = n_embd // n_head
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(512)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff_exp)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    if arch != "llama":
        w.add_expert_feed_forward_length(n_ff_exp)
    if n_ff_shexp:
        w.add_expert_shared_feed_forward_length(n_ff_shexp)
    w.add_rope_dimension_count(hd)
    w.add_file_type(1)
    mats = [("token_embd.weight", (n_vocab, n_embd)), ("output.weight", (n_vocab, n_embd))]
    vecs = [("output_norm.weight", n_embd)]
    for i in range(n_layer):
        p = f"blk.{i}."
        vecs += [(p + "attn_norm.weight", n_embd), (p + "ffn_norm.weight", n_embd)]
        mats += [(p + "attn_q.weight", (n_embd, n_embd)), (p + "attn_k.weight", (n_head_kv * hd, n_embd)),
                 (p + "attn_v.weight", (n_head_kv * hd, n_embd)), (p + "attn_output.weight", (n_embd, n_embd)),
                 (p + "ffn_gate_inp.weight", (n_expert, n_embd)),
                 (p + "ffn_gate_exps.weight", (n_expert, n_ff_exp, n_embd)),
                 (p + "ffn_up_exps.weight", (n_expert, n_ff_exp, n_embd)),
                 (p + "ffn_down_exps.weight", (n_expert, n_embd, n_ff_exp))]
        if n_ff_shexp:
            mats += [(p + "ffn_gate_inp_shexp.weight", (1, n_embd)),
                     (p + "ffn_gate_shexp.weight", (n_ff_shexp, n_embd)),
                     (p + "ffn_up_shexp.weight", (n_ff_shexp, n_embd)),
                     (p + "ffn_down_shexp.weight", (n_embd, n_ff_shexp))]
    for name, shape in mats:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float16))
    for name, n in vecs:
        w.add_tensor(name, np.ones(n, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def synth_mla_oss(path, arch, n_layer, n_expert, seed):
    """An F16 DeepSeek-V3 (deepseek2: MLA with q_lora_rank, a leading dense
    layer, a shared expert, exp_probs_b) or gpt-oss (biases, sinks,
    post_attention_norm) of random weights, 256 wide where a K-quant row
    can be (DeepSeek's attn_k_b rows are qk_nope_head_dim 128 wide, as in
    the real models), with the keys llama.cpp's loader needs."""
    rng = np.random.default_rng(seed)
    n_embd, n_ff, n_vocab, n_used = 256, 256, 512, 2
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(n_layer)
    w.add_context_length(512)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    mats, vecs = [("token_embd.weight", (n_vocab, n_embd)), ("output.weight", (n_vocab, n_embd))], \
        [("output_norm.weight", (n_embd,))]
    if arch == "deepseek2":
        n_head, q_lora, kv_lora, rope, nope, v = 2, 256, 256, 64, 128, 128
        w.add_head_count(n_head)
        w.add_head_count_kv(1)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_expert_count(n_expert)
        w.add_expert_used_count(n_used)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        w.add_key_length(kv_lora + rope)
        w.add_value_length(kv_lora)
        w.add_file_type(1)
        w.add_leading_dense_block_count(1)
        w.add_vocab_size(n_vocab)
        w.add_q_lora_rank(q_lora)
        w.add_kv_lora_rank(kv_lora)
        w.add_key_length_mla(nope + rope)
        w.add_value_length_mla(v)
        w.add_expert_feed_forward_length(n_ff)
        w.add_expert_shared_count(1)
        w.add_expert_weights_scale(2.5)
        w.add_expert_weights_norm(True)
        w.add_rope_dimension_count(rope)
        for i in range(n_layer):
            p = f"blk.{i}."
            vecs += [(p + "attn_norm.weight", (n_embd,)), (p + "ffn_norm.weight", (n_embd,)),
                     (p + "attn_q_a_norm.weight", (q_lora,)), (p + "attn_kv_a_norm.weight", (kv_lora,))]
            mats += [(p + "attn_q_a.weight", (q_lora, n_embd)),
                     (p + "attn_q_b.weight", (n_head * (nope + rope), q_lora)),
                     (p + "attn_kv_a_mqa.weight", (kv_lora + rope, n_embd)),
                     (p + "attn_k_b.weight", (n_head, kv_lora, nope)),
                     (p + "attn_v_b.weight", (n_head, v, kv_lora)),
                     (p + "attn_output.weight", (n_embd, n_head * v))]
            if i == 0:
                mats += [(p + "ffn_gate.weight", (n_ff, n_embd)), (p + "ffn_up.weight", (n_ff, n_embd)),
                         (p + "ffn_down.weight", (n_embd, n_ff))]
                continue
            vecs += [(p + "exp_probs_b.bias", (n_expert,))]
            mats += [(p + "ffn_gate_inp.weight", (n_expert, n_embd)),
                     (p + "ffn_gate_exps.weight", (n_expert, n_ff, n_embd)),
                     (p + "ffn_up_exps.weight", (n_expert, n_ff, n_embd)),
                     (p + "ffn_down_exps.weight", (n_expert, n_embd, n_ff)),
                     (p + "ffn_gate_shexp.weight", (n_ff, n_embd)), (p + "ffn_up_shexp.weight", (n_ff, n_embd)),
                     (p + "ffn_down_shexp.weight", (n_embd, n_ff))]
    else:
        n_head, n_head_kv, hd = 4, 2, 64
        w.add_head_count(n_head)
        w.add_head_count_kv(n_head_kv)
        w.add_rope_freq_base(150000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_expert_count(n_expert)
        w.add_expert_used_count(n_used)
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_file_type(1)
        w.add_sliding_window(128)
        w.add_expert_feed_forward_length(n_ff)
        for i in range(n_layer):
            p = f"blk.{i}."
            vecs += [(p + "attn_norm.weight", (n_embd,)), (p + "post_attention_norm.weight", (n_embd,)),
                     (p + "attn_sinks.weight", (n_head,)), (p + "attn_q.bias", (n_head * hd,)),
                     (p + "attn_k.bias", (n_head_kv * hd,)), (p + "attn_v.bias", (n_head_kv * hd,)),
                     (p + "attn_output.bias", (n_embd,)), (p + "ffn_gate_inp.bias", (n_expert,)),
                     (p + "ffn_gate_exps.bias", (n_expert, n_ff)), (p + "ffn_up_exps.bias", (n_expert, n_ff)),
                     (p + "ffn_down_exps.bias", (n_expert, n_embd))]
            mats += [(p + "attn_q.weight", (n_head * hd, n_embd)), (p + "attn_k.weight", (n_head_kv * hd, n_embd)),
                     (p + "attn_v.weight", (n_head_kv * hd, n_embd)),
                     (p + "attn_output.weight", (n_embd, n_head * hd)),
                     (p + "ffn_gate_inp.weight", (n_expert, n_embd)),
                     (p + "ffn_gate_exps.weight", (n_expert, n_ff, n_embd)),
                     (p + "ffn_up_exps.weight", (n_expert, n_ff, n_embd)),
                     (p + "ffn_down_exps.weight", (n_expert, n_embd, n_ff))]
    for name, shape in mats:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float16))
    for name, shape in vecs:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.1 + 1).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def moe_imatrix(path, seed):
    """Random positive importance values, one set per matrix (an expert's
    for the 3-D tensors, as llama.cpp's imatrix holds them): {name:
    float32[n_mat, ne0]}."""
    rng = np.random.default_rng(seed)
    out = {}
    for t in gguf.GGUFReader(path).tensors:
        if len(t.shape) >= 2:
            n_mat = int(t.shape[2]) if len(t.shape) == 3 else 1
            out[t.name] = (rng.random((n_mat, int(t.shape[0]))) * 2 + 0.05).astype(np.float32)
    return out


def write_moe_imatrix(path, im):
    w = gguf.GGUFWriter(path, "llama")
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["synthetic"])
    w.add_uint32("imatrix.chunk_count", 1)
    w.add_uint32("imatrix.chunk_size", 512)
    for name, v in im.items():
        w.add_tensor(name + ".in_sum2", v)      # count 1: values exactly
        w.add_tensor(name + ".counts", np.ones((v.shape[0], 1), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def wide_moe(only):
    """ruvllm against llama.cpp on the synthetic wide mixtures of experts
    (those named in `only`, or all)."""
    bad = 0
    specs = {"moe8": ("llama", 8, 256, 256, 8, 2, 0, 5),
             "qwen2moe": ("qwen2moe", 4, 256, 256, 4, 2, 256, 6),
             "deepseek2": ("deepseek2", 4, 0, 0, 16, 0, 0, 7),
             "gpt-oss": ("gpt-oss", 4, 0, 0, 16, 0, 0, 8)}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (arch, nl, ne, nf, nx, nu, nsh, seed) in specs.items():
            if only and name not in only:
                continue
            src = os.path.join(tmp, name + ".gguf")
            if arch in ("deepseek2", "gpt-oss"):
                synth_mla_oss(src, arch, nl, nx, seed)
            else:
                synth_moe(src, arch, nl, ne, nf, nx, nu, nsh, seed)
            im, imf = moe_imatrix(src, seed + 10), os.path.join(tmp, name + ".imatrix.gguf")
            write_moe_imatrix(imf, im)
            for mix, ft in FTYPES.items():
                ref, ours = os.path.join(tmp, "ref.gguf"), os.path.join(tmp, "ours.gguf")
                use = mix in gq.NEEDS_IMATRIX
                gq.llama_quantize(src, ref, ft, {k: v.reshape(-1) for k, v in im.items()} if use else None)
                gq.ruvllm_quantize(src, ours, mix, imf if use else None)
                bad += gq.compare(f"wide {name} {mix}", ours, ref)
                types = sorted({t.tensor_type.name for t in gguf.GGUFReader(ref).tensors})
                print(f"  llama.cpp's types: {' '.join(types)}")
                os.unlink(ref)
                os.unlink(ours)
    print("OK" if not bad else f"{bad} differences")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="compare only, write nothing")
    ap.add_argument("--wide-moe", action="store_true",
                    help="check only: synthetic 256-wide mixtures of experts, every mix")
    ap.add_argument("--ruvllm", default=gq.RUVLLM, help="the binary (default build/ruvllm)")
    ap.add_argument("models", nargs="*", default=MODELS)
    a = ap.parse_args()
    gq.RUVLLM = a.ruvllm
    if a.wide_moe:
        return wide_moe(set(a.models) & {"moe8", "qwen2moe", "deepseek2", "gpt-oss"})
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
            for mix in MODEL_MIXES.get(name, MIXES):
                ref, ours = os.path.join(tmp, "ref.gguf"), os.path.join(tmp, "ours.gguf")
                gq.llama_quantize(src, ref, FTYPES[mix])
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
