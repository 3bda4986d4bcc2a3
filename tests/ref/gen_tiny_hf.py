#!/usr/bin/env python3
"""gen_tiny_hf.py - tiny random-weight models built with Hugging Face
transformers, written as GGUF (with gguf-py, or by llama.cpp's own
converter for the issue-18 families), and transformers' logits for
every position of a fixed token sequence: the goldens that
tests/test_tiny_hf.c checks ruvllm's forward pass against.

Variants (the first seven also named in tests/test_tiny_hf.c):

  llama         Llama, plain RoPE (theta 10000), separate output matrix
  llama-tied    Llama, tie_word_embeddings (no output.weight in the GGUF)
  qwen2         Qwen2: Q/K/V biases, NeoX RoPE (theta 1e6), eps 1e-6
  llama-linear  Llama, rope_scaling linear, factor 4
  llama-yarn    Llama, rope_scaling YaRN, factor 4, original context 32,
                beta_fast 32, beta_slow 1 (max_position_embeddings 128)
  llama3        Llama, Llama-3.1 rope scaling: factor 8, low_freq_factor 1,
                high_freq_factor 4, original context 64
  qwen3         Qwen3: per-head RMSNorm of Q and K (q_norm, k_norm) before
                NeoX RoPE (theta 1e6), no biases, eps 1e-6, head_dim 32
                (not hidden / heads = 16: attention.key_length decides)

  issue 18's families, saved as Hugging Face directories (hf/<name>/) and
  converted by llama.cpp's own convert_hf_to_gguf.py (see GGUF below):
  gemma2        Gemma2ForCausalLM: attn/final logit softcaps 8 / 20 (the
                pre-cap scores reach 20, the pre-cap logits 81, p99 22),
                sliding window 8 on even layers (layer_types; llama.cpp's
                default pattern 2), query_pre_attn_scalar 16 = head_dim,
                GELU-tanh gated FFN, post-attention and post-FFN norms,
                embedding x sqrt(64), tied output, RMSNorm x*(1+w), eps 1e-6
  gemma3        Gemma3ForCausalLM (text), 6 layers: 0-4 windowed (8), 5
                global; local rope base 10000, global 1e6 with linear 8;
                QK-norm, post-norms, no softcaps (the defaults), tied
  mistral       MistralForCausalLM, window 8 on every layer; the converter
                writes arch "llama" and no sliding_window key
  phi3          Phi3ForCausalLM: fused qkv_proj and gate_up_proj, LongRoPE
                (8 short and 8 long factors, original context 32, max 128:
                attention factor sqrt(1 + ln 4 / ln 32)); two goldens: the
                64 tokens (long factors) and the first 32 alone (short)
  phi3-partial  the same with partial_rotary_factor 0.75 (rotary dims 12)
  ministral3    Ministral3ForCausalLM (arch mistral3): YaRN 4 past original
                context 32 (beta 32/1, mscale = mscale_all_dim = 1), and
                llama_4_scaling_beta 0.1: q *= 1 + 0.1 ln(1 + floor(pos/32))
  qwen3-hf      Qwen3ForCausalLM as qwen3 above (QK-norm, NeoX RoPE theta
                1e6, head_dim 32, eps 1e-6), but saved as a Hugging Face
                directory and converted by llama.cpp's converter (qwen3.gguf
                stays gguf-py's, as before)

  issue 19's mixtures of experts (also HF directories through the converter;
  transformers' experts_implementation "eager", its loop over the experts):
  mixtral       MixtralForCausalLM: 4 experts of intermediate 32, top-2 of a
                softmax over all four, renormalized; rope theta 1e6; the
                converter writes arch "llama" with llama.expert_count 4,
                expert_used_count 2, feed_forward_length 32 (the experts'),
                blk.N.ffn_gate_inp [64, 4] and ffn_gate_exps/ffn_up_exps
                [64, 32, 4], ffn_down_exps [32, 64, 4]
  qwen3moe      Qwen3MoeForCausalLM: 8 experts of moe_intermediate_size 32
                (intermediate_size 128, unused: decoder_sparse_step 1, no
                mlp_only_layers), top-2, norm_topk_prob true, QK-norm,
                head_dim 32, rope theta 1e6, eps 1e-6; expert_feed_forward_
                length 32 beside feed_forward_length 128
  qwen3moe-nonorm  the same with norm_topk_prob false. The converter writes
                no key for it (no expert_weights_norm) and llama.cpp always
                renormalizes qwen3moe: its logits are the "renormalized"
                row's; only an importer that reads config.json can match them
  qwen2moe      Qwen2MoeForCausalLM (Qwen1.5-MoE's shape): 4 experts of 32,
                top-2, norm_topk_prob false, a shared expert of 96
                (ffn_*_shexp) scaled by sigmoid(shared_expert_gate . x)
                (ffn_gate_inp_shexp [64, 1]), Q/K/V biases, theta 1e6
  deepseek2     DeepseekV2ForCausalLM, 3 layers: MLA (q_lora_rank 48: q_a_proj,
                q_a_layernorm, q_b_proj; kv_lora_rank 32; per head 16 dims
                without position + 8 RoPE dims (adjacent pairs, DeepSeek's
                interleaved layout), value 16; the latent's RoPE key shared
                by the 4 heads), layer 0 a dense FFN of 128
                (first_k_dense_replace 1), layers 1-2 MoE: 8 experts of 32,
                top-2 of a softmax over all (greedy), not renormalized, times
                routed_scaling_factor 2, plus 1 shared expert of 32; YaRN 4
                past original context 32 with mscale = mscale_all_dim =
                0.707 (V2's): softmax scale (1 + 0.0707 ln 4)^2 / sqrt(24).
                The converter writes arch deepseek2 with kv_b_proj split
                into attn_k_b (transposed) and attn_v_b
  deepseek2-lite  the same with q_lora_rank null (V2-Lite's plain q_proj ->
                attn_q), routed_scaling_factor 1. llama.cpp takes a missing
                q_lora_rank only at V2-Lite's real depth (26/27 layers):
                --llamacpp runs it on a copy with the key set to 0
  deepseek3     DeepseekV3ForCausalLM on deepseek2's geometry (MLA with
                q_lora_rank 48, dense layer 0, 8 experts + 1 shared) with
                V3's router: sigmoid scores; e_score_correction_bias (a
                buffer, N(0, 0.1^2)) added for the choice only; 4 groups of
                2 experts, the 2 groups with the largest sum of their top-2
                eligible; top-2 of those; the chosen sigmoid scores
                renormalized, times routed_scaling_factor 2.5; YaRN with
                mscale = mscale_all_dim = 1 (V3's). config.json also carries
                scoring_func "sigmoid" and topk_method "noaux_tc" as V3's
                does (the converter writes expert_gating_func 2 from it).
                Its routing margin is that of the group choice and of the
                expert choice on the biased sigmoid scores (ds3_routing)
  gpt-oss       GptOssForCausalLM: 4 experts of 32, router with bias, top-2 of
                the router logits then softmax over those two; experts
                stored (expert, in, out) with gate and up interleaved in
                gate_up_proj's columns, biases on gate/up and down; the
                clamped SwiGLU (up + 1) * g * sigmoid(1.702 g), g clamped
                above at 7, up to [-7, 7] (gate/up weights drawn GPTOSS_GU
                = 4 times the usual scale so the clamp binds: the fraction
                clamped is in manifest.tsv); per-head attention sinks
                N(0, 2^2) (a logit in every softmax's denominator); Q/K/V/O
                biases; window 8 on layer 0; YaRN 4 past original context
                32, theta 150000, truncate false (the correction range not
                rounded: llama.cpp rounds it, see the README); NeoX RoPE.
                The converter writes arch gpt-oss, splits gate_up into
                ffn_gate_exps / ffn_up_exps (and their biases), f32
  qwen3moe, qwen2moe, deepseek2/3 and gpt-oss take the byte-level BPE
  vocabulary of the gguf-py variants as a tokenizer.json (their converter
  reads no tokenizer.model); see PRE_SHIM for the one thing done to the
  converter for them.

Geometry of all of them: hidden 64, 2 layers (gemma3: 6, deepseek2: 3), 4 query heads
over 2 KV heads (GQA) of 16 (qwen3: of 32; deepseek2: MLA above), intermediate 128,
vocabulary 272 (256 GPT-2 byte tokens, 13
merges, 3 control tokens), f32 weights.

Weights: the model is built by transformers, then every parameter is
overwritten from one seeded torch.Generator (in sorted name order) with
values large enough that every part of the model shows in the logits
(transformers' default init, std 0.02, would leave attention nearly
uniform and RoPE invisible): embeddings N(0, 1); RMSNorm gains 1 + U(-0.25,
0.25); Q and K projections N(0, (2/sqrt(fan_in))^2), so that attention
scores have a standard deviation of a few units and the rotation matters;
other projections N(0, 1/fan_in); Q/K/V biases N(0, 0.25). Gemma stores
its RMSNorm gain as w with the norm multiplying by 1 + w: there w is
U(-0.25, 0.25); phi3's fused qkv_proj gets the Q/K scale on its Q and K
rows; DeepSeek's q_b_proj (or q_proj) and kv_a_proj_with_mqa (whose RoPE
key rows are not normalized) get the Q/K scale. The HF variants draw from
seed SEED + 100 + index (+ "reseed" where the first draw gave a routing
near-tie).

GGUF of the HF variants: made by convert_hf_to_gguf.py of the llama.cpp
that the llama-cpp-python 0.3.36 sdist vendors (vendor/llama.cpp; the sdist
records no commit), run with that tree's own gguf-py on PYTHONPATH and
--outtype f32: the file a user would download. Set LLAMACPP_DIR to the
vendored tree (default /tmp/llamacpp-sdist/llama_cpp_python-0.3.36/vendor/
llama.cpp: pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36
and untar). Their tokenizer is a tiny SentencePiece BPE model trained here
(sp_model_bytes: 272 pieces, byte fallback), since the converter demands
tokenizer.model for gemma2; the other converters take it too. The token ids
of tokens.txt are the same for every variant (in this vocabulary 269 is an
ordinary piece, not BOS: logits do not care).

GGUF of the older variants: written by write_gguf() below, as llama.cpp's
convert_hf_to_gguf.py would write these models (f32 throughout,
general.file_type 0):
  - tensor names token_embd, output_norm, output (absent when tied),
    blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, attn_q.bias,
    attn_k.bias, attn_v.bias, attn_q_norm, attn_k_norm, ffn_norm, ffn_gate,
    ffn_up, ffn_down}.weight;
  - for arch "llama" the rows of attn_q and attn_k are reordered from
    transformers' rotate-half layout (head dimension j pairs with j + d/2)
    to ggml's normal RoPE layout (2i pairs with 2i + 1): within each head,
    output row 2i + s comes from input row i + s*d/2. qwen2 is not
    reordered: ggml applies NeoX RoPE (halves) to it, as transformers does;
    nor is qwen3, for the same reason;
  - attention.key_length/value_length where the config has head_dim
    (llama, qwen3), and no rope.dimension_count for qwen3 (the converter
    writes none: it defaults to key_length);
  - {arch}.rope.scaling.type/factor for linear; for YaRN also
    rope.scaling.original_context_length (beta_fast/beta_slow are the
    defaults 32/1 and so not written, as the converter omits them);
  - Llama 3.1 scaling as the tensor rope_freqs.weight (F32, head_dim/2):
    the divisor of each RoPE frequency, original inv_freq over the scaled
    one, taken from transformers' own rotary embedding; no scaling keys.

Goldens in tests/data/tiny/:
  <name>.gguf        the model
  <name>.logits      little-endian f32, n_tokens x n_vocab, row t = the
                     logits after token t (model(ids).logits[0], f32,
                     attn_implementation="eager")
  phi3-short.logits, phi3-partial-short.logits
                     32 x n_vocab: the first 32 tokens alone (short factors)
  hf/<name>/         config.json, model.safetensors (f32), tokenizer.model,
                     tokenizer_config.json: the converter's input
  tokens.txt         the token ids (one line, space-separated): BOS, then
                     63 ids from a seeded generator
  manifest.tsv       per model: name, arch, n_vocab, n_tokens, and the
                     sensitivity figures below; # lines: versions

Routers (the MoE variants): N(0, 1/fan_in) like every other projection, so
router logits spread about one unit and every expert is chosen somewhere;
the script prints and writes to manifest.tsv how often each expert is among
the top k per layer, and the smallest gap between the k-th and (k+1)-th
router logit over all tokens and layers, and stops if that gap is below
1e-3 or an expert goes unused (a near-tie would make the golden depend on
rounding). Expert tensors (transformers' 3-D gate_up_proj and down_proj)
are N(0, 1/fan_in) too; save_pretrained writes them per expert, in each
family's original checkpoint names, which is what the converter reads.

Sensitivity (printed and written to manifest.tsv): for each variant, how far
the logits move, in the test's metric (max over rows of max |a - b| / max
|ref row|), when the variant's defining feature is changed: scaling off,
YaRN's attention factor set to 1, Llama 3.1's factors replaced by plain
linear 8, Q/K not reordered (the wrong RoPE layout), biases dropped, and so
on; for the HF variants each feature they add: window off or on the other
layers, each softcap off, post-norms off, embedding scale off, the gain w
instead of 1 + w, GELU -> SiLU, local base = global base, long <-> short
factors, YaRN's log multiplier ignored, temperature scaling off; for the
MoE variants top-1 instead of top-2, renormalization toggled, the router's
weights ignored (1/k each), experts permuted, each expert's gate and up
swapped, the shared expert or its sigmoid gate off; for DeepSeek also
routed_scaling_factor 1, the leading dense layer's FFN skipped, kv_a_norm
and q_a_norm off, the RoPE part taken from the wrong end of a head or as
NeoX halves, YaRN off, YaRN's mscale^2 on the softmax scale off; for
gpt-oss sinks off, clamp off, (up + 1) -> up, alpha 1, window off or on
the other layer, softmax over all experts then top-k (not renormalized),
each bias off, YaRN off, its attention factor 1, its range rounded. The
smallest is 0.04 (gemma3's local base, GELU -> SiLU), the rest 0.06 or
more, far above the test's tolerance (1e-4; the issue asks for 1e-3), so
the test catches those mistakes.

Usage:
    pip install torch==2.15.0 transformers==5.23.0 gguf==0.19.0 numpy==2.4.6 \
        safetensors sentencepiece protobuf
    python3 tests/ref/gen_tiny_hf.py            # rewrites tests/data/tiny/
    python3 tests/ref/gen_tiny_hf.py --check    # compares; exit 1 on a difference
    python3 tests/ref/gen_tiny_hf.py --check --llamacpp   # also llama.cpp's logits
        (llama-cpp-python 0.3.36) on the same files against transformers'

Versions used for the committed files: Python 3.11.7, torch 2.15.0 (PyPI
wheel, CPU only used), transformers 5.23.0, gguf (gguf-py) 0.19.0, numpy
2.4.6; for the HF variants also safetensors 0.8.0, sentencepiece 0.2.3 and
the converter above.
"""
import argparse
import copy
import math
import os
import sys

import numpy as np
import torch
import transformers
import gguf

VERSIONS = {"torch": "2.15.0", "transformers": "5.23.0", "gguf": "0.19.0", "numpy": "2.4.6"}

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FF = 64, 2, 4, 2, 16, 128
N_TOKENS = 64
SEED = 20240611

# ---------------------------------------------------------------------------
# Vocabulary: GPT-2 byte-level BPE, 256 byte tokens + merges + specials
# ---------------------------------------------------------------------------


def byte_to_unicode():
    """GPT-2's printable mapping of the 256 bytes (a fact of the format)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + \
        list(range(0xAE, 0xFF + 1))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


MERGES = ["Ġ t", "h e", "i n", "Ġ a", "e r", "o n", "r e", "a n", "e n", "a t", "o r",
          "Ġ s", "Ġt he"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def vocabulary():
    b2u = byte_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    for m in MERGES:
        left, right = m.split(" ")
        assert left in tokens and right in tokens, m
        tokens.append(left + right)
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for s in SPECIALS:
        tokens.append(s)
        types.append(gguf.TokenType.CONTROL)
    return tokens, types


TOKENS, TOKEN_TYPES = vocabulary()
VOCAB = len(TOKENS)                     # 272
BOS = TOKENS.index("<|endoftext|>")     # 269, also EOS

# ---------------------------------------------------------------------------
# Variants
# ---------------------------------------------------------------------------

VARIANTS = [
    dict(name="llama", arch="llama", theta=10000.0, tie=False, scaling=None, max_pos=128),
    dict(name="llama-tied", arch="llama", theta=10000.0, tie=True, scaling=None, max_pos=128),
    dict(name="qwen2", arch="qwen2", theta=1000000.0, tie=False, scaling=None, max_pos=128,
         eps=1e-6),
    dict(name="llama-linear", arch="llama", theta=10000.0, tie=False, max_pos=512,
         scaling={"rope_type": "linear", "factor": 4.0}),
    dict(name="llama-yarn", arch="llama", theta=10000.0, tie=False, max_pos=128,
         scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                  "beta_fast": 32.0, "beta_slow": 1.0}),
    dict(name="llama3", arch="llama", theta=10000.0, tie=False, max_pos=512,
         scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    dict(name="qwen3", arch="qwen3", theta=1000000.0, tie=False, scaling=None, max_pos=128,
         eps=1e-6, head_dim=32),
]


def make_config(v, scaling="default"):
    """A transformers config for variant v; `scaling` overrides its rope
    scaling (None: none) for the sensitivity checks."""
    sc = v["scaling"] if scaling == "default" else scaling
    rope = {"rope_type": "default", "rope_theta": v["theta"]}
    if sc:
        rope = dict(sc, rope_theta=v["theta"])
    common = dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  num_key_value_heads=KV_HEADS, intermediate_size=FF, vocab_size=VOCAB,
                  max_position_embeddings=v["max_pos"], rms_norm_eps=v.get("eps", 1e-5),
                  hidden_act="silu", tie_word_embeddings=v["tie"], rope_parameters=rope,
                  bos_token_id=BOS, eos_token_id=BOS, pad_token_id=None)
    if v["arch"] == "llama":
        return transformers.LlamaConfig(head_dim=HEAD_DIM, attention_bias=False, mlp_bias=False,
                                        **common)
    if v["arch"] == "qwen3":
        return transformers.Qwen3Config(head_dim=v["head_dim"], attention_bias=False,
                                        use_sliding_window=False, **common)
    return transformers.Qwen2Config(use_sliding_window=False, **common)


def build_model(config):
    torch.manual_seed(0)
    # mixtures of experts: transformers' reference loop over the experts
    # (its default, grouped_mm, is a kernel choice)
    moe = {"experts_implementation": "eager"} if hasattr(config, "num_experts_per_tok") else {}
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                                          dtype=torch.float32, **moe)
    return model.eval()


def randomize(model, seed):
    """Overwrite every parameter from one seeded generator (sorted names;
    tied parameters appear once)."""
    g = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name in sorted(params):
            p = params[name]
            if name.endswith("norm.weight"):
                p.copy_(1 + (torch.rand(p.shape, generator=g) - 0.5) * 0.5)
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                p.copy_(torch.randn(p.shape, generator=g) * (2 / math.sqrt(p.shape[1])))
            elif name.endswith(".weight"):
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            else:
                raise SystemExit("unexpected parameter " + name)


def logits_of(model, ids):
    with torch.no_grad():
        out = model(torch.tensor([ids], dtype=torch.long))
    return out.logits[0].to(torch.float32).numpy()


def rel_err(a, ref):
    """The test's metric: max over rows of max |a - ref| / max |ref row|."""
    return float(np.max(np.max(np.abs(a - ref), axis=1) / np.max(np.abs(ref), axis=1)))

# ---------------------------------------------------------------------------
# GGUF
# ---------------------------------------------------------------------------


def rope_reorder(w, n_head):
    """transformers' rotate-half rows -> ggml's adjacent pairs, per head:
    row 2i + s of a head comes from row i + s*d/2."""
    rows = w.shape[0]
    d = rows // n_head
    return w.reshape(n_head, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(model):
    """rope_freqs.weight: original inv_freq / the scaled inv_freq that
    transformers' rotary embedding computed for this config."""
    rot = model.model.rotary_emb
    scaled = rot.inv_freq.to(torch.float64).numpy()
    theta = model.config.rope_parameters["rope_theta"]
    orig = 1.0 / theta ** (np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM)
    return (orig / scaled).astype(np.float32)


def write_gguf(path, v, model, reorder_qk=True):
    cfg = model.config
    arch = v["arch"]
    sd = {k: t.detach().to(torch.float32).numpy() for k, t in model.state_dict().items()}
    w = gguf.GGUFWriter(path, arch)
    w.add_name("tiny-" + v["name"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(VOCAB)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(v["theta"])
    hd = v.get("head_dim", HEAD_DIM)
    if arch != "qwen3":
        w.add_rope_dimension_count(HEAD_DIM)
    if arch in ("llama", "qwen3"):
        # the converter writes these when the HF config has head_dim
        w.add_key_length(hd)
        w.add_value_length(hd)
    sc = v["scaling"]
    if sc and sc["rope_type"] == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(sc["factor"])
    elif sc and sc["rope_type"] == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(sc["factor"])
        w.add_rope_scaling_orig_ctx_len(sc["original_max_position_embeddings"])
        if sc.get("beta_fast", 32.0) != 32.0:
            w.add_rope_scaling_yarn_beta_fast(sc["beta_fast"])
        if sc.get("beta_slow", 1.0) != 1.0:
            w.add_rope_scaling_yarn_beta_slow(sc["beta_slow"])

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(TOKENS)
    w.add_token_types([int(t) for t in TOKEN_TYPES])
    w.add_token_merges(MERGES)
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(BOS)
    w.add_add_bos_token(False)

    def put(name, arr):
        w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))

    put("token_embd.weight", sd["model.embed_tokens.weight"])
    if sc and sc["rope_type"] == "llama3":
        put("rope_freqs.weight", llama3_rope_factors(model))
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        b = f"blk.{i}."
        q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
        if arch == "llama" and reorder_qk:
            q, k = rope_reorder(q, HEADS), rope_reorder(k, KV_HEADS)
        put(b + "attn_norm.weight", sd[p + "input_layernorm.weight"])
        put(b + "attn_q.weight", q)
        put(b + "attn_k.weight", k)
        put(b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        if arch == "qwen2":
            put(b + "attn_q.bias", sd[p + "self_attn.q_proj.bias"])
            put(b + "attn_k.bias", sd[p + "self_attn.k_proj.bias"])
            put(b + "attn_v.bias", sd[p + "self_attn.v_proj.bias"])
        if arch == "qwen3":
            put(b + "attn_q_norm.weight", sd[p + "self_attn.q_norm.weight"])
            put(b + "attn_k_norm.weight", sd[p + "self_attn.k_norm.weight"])
        put(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        put(b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        put(b + "ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        put(b + "ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        put(b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    put("output_norm.weight", sd["model.norm.weight"])
    if not v["tie"]:
        put("output.weight", sd["lm_head.weight"])

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

# ---------------------------------------------------------------------------
# Sensitivity: what the test would see if a feature were got wrong
# ---------------------------------------------------------------------------


def variant_logits(v, state, ids, scaling="default", mutate=None):
    m = build_model(make_config(v, scaling))
    m.load_state_dict(state)
    if mutate:
        mutate(m)
    return logits_of(m, ids)


def sensitivity(v, model, ref, ids):
    """(label, metric) pairs: the logits with one feature changed, against
    the golden."""
    st = copy.deepcopy(model.state_dict())
    out = []
    sc = v["scaling"]

    def qk_layout(m):
        # emulate the GGUF stored without the Q/K reorder, as ruvllm would
        # read it: its rows, interpreted in ggml's adjacent-pair layout,
        # are transformers' rows reordered back the other way
        with torch.no_grad():
            for layer in m.model.layers:
                for proj, nh in ((layer.self_attn.q_proj, HEADS), (layer.self_attn.k_proj, KV_HEADS)):
                    w = proj.weight.numpy()
                    d = HEAD_DIM
                    inv = w.reshape(nh, d // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)
                    proj.weight.copy_(torch.from_numpy(inv.copy()))

    if sc is None:
        out.append(("rope_theta x2", rel_err(variant_logits(dict(v, theta=v["theta"] * 2), st, ids),
                                             ref)))
    else:
        out.append(("no scaling", rel_err(variant_logits(v, st, ids, scaling=None), ref)))
    if v["arch"] == "llama":
        out.append(("Q/K not reordered", rel_err(variant_logits(v, st, ids, mutate=qk_layout), ref)))
    if v["arch"] == "qwen2":
        def nobias(m):
            with torch.no_grad():
                for layer in m.model.layers:
                    layer.self_attn.q_proj.bias.zero_()
                    layer.self_attn.k_proj.bias.zero_()
        out.append(("no Q/K bias", rel_err(variant_logits(v, st, ids, mutate=nobias), ref)))
    if v["arch"] == "qwen3":
        def no_qk_norm(m):
            for layer in m.model.layers:
                layer.self_attn.q_norm = torch.nn.Identity()
                layer.self_attn.k_norm = torch.nn.Identity()

        def qk_gain_1(m):
            with torch.no_grad():
                for layer in m.model.layers:
                    layer.self_attn.q_norm.weight.fill_(1)
                    layer.self_attn.k_norm.weight.fill_(1)
        out.append(("no QK-norm", rel_err(variant_logits(v, st, ids, mutate=no_qk_norm), ref)))
        out.append(("QK-norm gains 1", rel_err(variant_logits(v, st, ids, mutate=qk_gain_1), ref)))
    if sc and sc["rope_type"] == "yarn":
        out.append(("attention_factor 1", rel_err(
            variant_logits(v, st, ids, scaling=dict(sc, attention_factor=1.0)), ref)))
        out.append(("linear 4 instead", rel_err(
            variant_logits(v, st, ids, scaling={"rope_type": "linear", "factor": 4.0}), ref)))
    if sc and sc["rope_type"] == "llama3":
        out.append(("linear 8 instead", rel_err(
            variant_logits(v, st, ids, scaling={"rope_type": "linear", "factor": 8.0}), ref)))
    if v["tie"]:
        def untie(m):
            # what reading an output matrix other than the embedding gives
            with torch.no_grad():
                m.lm_head.weight = torch.nn.Parameter(m.model.embed_tokens.weight * 0.5)
        out.append(("output = 0.5 * embedding", rel_err(variant_logits(v, st, ids, mutate=untie),
                                                        ref)))
    return out

# ---------------------------------------------------------------------------
# Families converted by llama.cpp's own converter (issue 18): the model is
# saved as a Hugging Face directory under tests/data/tiny/hf/<name>/ and
# convert_hf_to_gguf.py of the llama.cpp that llama-cpp-python 0.3.36
# vendors writes <name>.gguf from it (--outtype f32).
# ---------------------------------------------------------------------------

CONVERTER_DEFAULT = "/tmp/llamacpp-sdist/llama_cpp_python-0.3.36/vendor/llama.cpp"
CONVERTER_VERSION = "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp/convert_hf_to_gguf.py " \
    "(vendored commit not recorded in the sdist: cmake BUILD_COMMIT 'unknown')"
HF_SEED = SEED + 100
SP_PAD, SP_EOS, SP_BOS, SP_UNK = 0, 1, 2, 3
SW = 8                      # sliding window of every windowed variant (< N_TOKENS)
PHI3_ORIG = 32              # phi3 original context: the 64-token test runs past it
# LongRoPE factors (head_dim/2 = 8 distinct values each; the partial variant
# takes the first 6: rotary dimension 12 of 16)
LONG_FACTOR = [1.0, 1.5, 2.25, 3.5, 5.0, 7.5, 11.0, 16.0]
SHORT_FACTOR = [1.0, 1.05, 1.1, 1.2, 1.35, 1.5, 1.75, 2.0]

HF_VARIANTS = [
    dict(name="gemma2", family="gemma2", gguf_arch="gemma2", layers=2),
    dict(name="gemma3", family="gemma3", gguf_arch="gemma3", layers=6),
    dict(name="mistral", family="mistral", gguf_arch="llama", layers=2),
    dict(name="phi3", family="phi3", gguf_arch="phi3", layers=2, partial=1.0),
    dict(name="phi3-partial", family="phi3", gguf_arch="phi3", layers=2, partial=0.75),
    dict(name="ministral3", family="ministral3", gguf_arch="mistral3", layers=2),
    dict(name="qwen3-hf", family="qwen3", gguf_arch="qwen3", layers=2, head_dim=32),
    # issue 19: mixtures of experts
    dict(name="mixtral", family="mixtral", gguf_arch="llama", layers=2, experts=4, top_k=2,
         moe_ff=32),
    dict(name="qwen3moe", family="qwen3moe", gguf_arch="qwen3moe", layers=2, experts=8, top_k=2,
         moe_ff=32, norm_topk=True, head_dim=32),
    dict(name="qwen3moe-nonorm", family="qwen3moe", gguf_arch="qwen3moe", layers=2, experts=8,
         top_k=2, moe_ff=32, norm_topk=False, head_dim=32),
    dict(name="qwen2moe", family="qwen2moe", gguf_arch="qwen2moe", layers=2, experts=4, top_k=2,
         moe_ff=32, shared_ff=96, norm_topk=False),
    # DeepSeek-V2 (MLA with a compressed query, rank 48) and V2-Lite (plain
    # q_proj): one leading dense layer, then 8 routed experts (top-2 of a
    # softmax, not renormalized, times routed_scaling_factor) + 1 shared
    dict(name="deepseek2", family="deepseek2", gguf_arch="deepseek2", layers=3, experts=8,
         top_k=2, moe_ff=32, norm_topk=False, q_lora=48, scale=2.0, reseed=1000),
    dict(name="deepseek2-lite", family="deepseek2", gguf_arch="deepseek2", layers=3, experts=8,
         top_k=2, moe_ff=32, norm_topk=False, q_lora=None, scale=1.0),
    # gpt-oss: attention sinks, window 8 on layer 0, biases everywhere,
    # YaRN, top-2 of the router logits then softmax over those two, the
    # clamped SwiGLU (alpha 1.702, limit 7, (up + 1) * glu)
    dict(name="gpt-oss", family="gptoss", gguf_arch="gpt-oss", layers=2, experts=4, top_k=2,
         moe_ff=32, reseed=3000),
    # DeepSeek-V3's router on the deepseek2 geometry: sigmoid scores, a
    # correction bias used only to choose, 4 groups of 2 experts of which
    # the best 2 groups (by the sum of their top-2) are eligible, the top-2
    # weights renormalized then times routed_scaling_factor 2.5
    dict(name="deepseek3", family="deepseek2", v3=True, gguf_arch="deepseek2", layers=3,
         experts=8, top_k=2, moe_ff=32, norm_topk=True, q_lora=48, scale=2.5, n_group=4,
         topk_group=2, reseed=1000),
]
MOE_FAMILIES = ("mixtral", "qwen3moe", "qwen2moe", "deepseek2", "gptoss")
BPE_FAMILIES = ("qwen3moe", "qwen2moe", "deepseek2", "gptoss")     # tokenizer.json
# the tokenizer pre-type given to the converter for BPE_FAMILIES (PRE_SHIM):
# what the family's releases carry
BPE_PRE = {"qwen3moe": "qwen2", "qwen2moe": "qwen2", "deepseek2": "deepseek-v3",
           "gptoss": "gpt-4o"}
# gpt-oss: its experts' gate/up weights drawn GPTOSS_GU times the usual
# scale, so that the SwiGLU clamp (limit 7) binds for a good fraction of
# the activations, and their down weights 1/GPTOSS_GU times, to keep the
# experts' output in proportion
GPTOSS_GU = 4.0
GPTOSS_SINK_STD = 2.0
# DeepSeek MLA geometry: latent KV rank, the per-head query/key split into a
# part without position (nope) and a RoPE part, the value head
DS_KV_RANK, DS_NOPE, DS_ROPE, DS_V = 32, 16, 8, 16


def sp_model_bytes():
    """A tiny SentencePiece BPE model (Gemma's id layout: pad 0, eos 1,
    bos 2, unk 3; control <|endoftext|> 4, which llama.cpp's vocabulary
    loader looks up in any model named Phi3; 256 byte-fallback pieces
    5..260; 11 pieces learned), trained deterministically on a seeded word
    list: the tokenizer.model that the converter demands for gemma2 (and
    uses for the others)."""
    import io
    import sentencepiece as spm
    rng = np.random.default_rng(7)
    words = ["the", "then", "there", "in", "on", "an", "at", "or", "sat", "rat", "tin", "net"]
    lines = [" ".join(rng.choice(words, 12)) for _ in range(200)]
    m = io.BytesIO()
    # from an iterator, not a file: the trainer records an input file's
    # path in the model
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=m, model_type="bpe", vocab_size=VOCAB,
        byte_fallback=True, character_coverage=1.0, pad_id=SP_PAD, eos_id=SP_EOS, bos_id=SP_BOS,
        unk_id=SP_UNK, num_threads=1, add_dummy_prefix=False, minloglevel=2,
        hard_vocab_limit=True, normalization_rule_name="identity",
        control_symbols=["<|endoftext|>"])
    return m.getvalue()


def hf_rope(v, **o):
    fam = v["family"]
    if fam == "phi3":
        n = int(HEAD_DIM * o.get("partial", v["partial"])) // 2
        extra = {"attention_factor": o["attn_factor"]} if "attn_factor" in o else {}
        return {**extra, "rope_type": "longrope", "rope_theta": 10000.0,
                "short_factor": o.get("short", SHORT_FACTOR)[:n],
                "long_factor": o.get("long", LONG_FACTOR)[:n],
                "original_max_position_embeddings": PHI3_ORIG,
                "partial_rotary_factor": o.get("partial", v["partial"])}
    if fam == "ministral3":
        if o.get("no_yarn"):
            return {"rope_type": "default", "rope_theta": 10000.0,
                    "llama_4_scaling_beta": o.get("beta", 0.1),
                    "original_max_position_embeddings": 32}
        return {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                "original_max_position_embeddings": 32, "max_position_embeddings": 128,
                "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                "mscale_all_dim": o.get("mscale_all_dim", 1.0),
                "llama_4_scaling_beta": o.get("beta", 0.1)}
    if fam in ("qwen3", "mixtral", "qwen3moe", "qwen2moe"):
        return {"rope_type": "default", "rope_theta": o.get("theta", 1000000.0)}
    if fam == "gptoss":
        # gpt-oss's YaRN (truncate false: the correction range not rounded),
        # factor 4 past original context 32; attention factor 1 + 0.1 ln 4
        if o.get("no_yarn"):
            return {"rope_type": "default", "rope_theta": 150000.0}
        extra = {"attention_factor": o["attn_factor"]} if "attn_factor" in o else {}
        return {**extra, "rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0,
                "original_max_position_embeddings": 32, "beta_fast": 32.0, "beta_slow": 1.0,
                "truncate": o.get("truncate", False)}
    if fam == "deepseek2" and v.get("v3"):
        # DeepSeek-V3's mscale = mscale_all_dim = 1
        if o.get("no_yarn"):
            return {"rope_type": "default", "rope_theta": 10000.0}
        return {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                "original_max_position_embeddings": 32, "beta_fast": 32.0, "beta_slow": 1.0,
                "mscale": 1.0, "mscale_all_dim": 1.0}
    if fam == "deepseek2":
        # YaRN 4 past original context 32 with DeepSeek-V2's mscale =
        # mscale_all_dim = 0.707: cos/sin unscaled (the ratio is 1), the
        # softmax scale times (1 + 0.0707 ln 4)^2
        if o.get("no_yarn"):
            return {"rope_type": "default", "rope_theta": 10000.0}
        return {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                "original_max_position_embeddings": 32, "beta_fast": 32.0, "beta_slow": 1.0,
                "mscale": 0.707, "mscale_all_dim": 0.707}
    if fam == "gemma3":
        full = {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}
        if o.get("no_global_scaling"):
            full = {"rope_type": "default", "rope_theta": 1000000.0}
        local = {"rope_type": "default", "rope_theta": o.get("local_theta", 10000.0)}
        return {"full_attention": full, "sliding_attention": local}
    return {"rope_type": "default", "rope_theta": 10000.0}


def make_hf_config(v, **o):
    """The transformers config of HF variant v; keyword overrides turn one
    feature off for the sensitivity rows."""
    fam, n = v["family"], v["layers"]
    common = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FF,
                  num_hidden_layers=n, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                  max_position_embeddings=128, rope_parameters=hf_rope(v, **o),
                  bos_token_id=SP_BOS, eos_token_id=SP_EOS, pad_token_id=SP_PAD)
    window = o.get("window", SW)
    if fam in ("gemma2", "gemma3"):
        act = o.get("act", "gelu_pytorch_tanh")
        if fam == "gemma2":
            types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
            if o.get("swap_pattern"):
                types = ["full_attention" if i % 2 == 0 else "sliding_attention" for i in range(n)]
            return transformers.Gemma2Config(
                head_dim=HEAD_DIM, hidden_activation=act, rms_norm_eps=1e-6,
                query_pre_attn_scalar=o.get("qpas", HEAD_DIM), sliding_window=window,
                layer_types=types, attn_logit_softcapping=o.get("attn_cap", 8.0),
                final_logit_softcapping=o.get("final_cap", 20.0), tie_word_embeddings=True,
                **common)
        types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)]
        return transformers.Gemma3TextConfig(
            head_dim=HEAD_DIM, hidden_activation=act, rms_norm_eps=1e-6,
            query_pre_attn_scalar=o.get("qpas", HEAD_DIM), sliding_window=window,
            layer_types=types, tie_word_embeddings=True, **common)
    if fam == "mistral":
        return transformers.MistralConfig(head_dim=HEAD_DIM, sliding_window=window,
                                          rms_norm_eps=1e-5, tie_word_embeddings=False, **common)
    if fam == "ministral3":
        return transformers.Ministral3Config(head_dim=HEAD_DIM, sliding_window=None,
                                             rms_norm_eps=1e-5, tie_word_embeddings=False,
                                             **common)
    if fam == "qwen3":
        return transformers.Qwen3Config(head_dim=v["head_dim"], attention_bias=False,
                                        use_sliding_window=False, sliding_window=None,
                                        rms_norm_eps=1e-6, tie_word_embeddings=False, **common)
    if fam == "phi3":
        return transformers.Phi3Config(rms_norm_eps=1e-5, tie_word_embeddings=False,
                                       original_max_position_embeddings=PHI3_ORIG,
                                       sliding_window=None, resid_pdrop=0.0, embd_pdrop=0.0,
                                       attention_dropout=0.0, **common)
    if fam in BPE_FAMILIES:
        common.update(bos_token_id=BOS, eos_token_id=BOS, pad_token_id=None)
    if fam == "gptoss":
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
        if o.get("swap_pattern"):
            types = types[::-1]
        return transformers.GptOssConfig(
            **dict(common, intermediate_size=v["moe_ff"]), head_dim=HEAD_DIM,
            num_local_experts=v["experts"], num_experts_per_tok=o.get("top_k", v["top_k"]),
            sliding_window=window, layer_types=types, swiglu_limit=o.get("limit", 7.0),
            attention_bias=True, rms_norm_eps=1e-5, tie_word_embeddings=False,
            output_router_logits=False, router_aux_loss_coef=0.0)
    if fam == "deepseek2" and v.get("v3"):
        # scoring_func / topk_method: not transformers' fields (it always
        # uses sigmoid and groups), but V3's config.json carries them and the
        # converter reads scoring_func (expert_gating_func)
        return transformers.DeepseekV3Config(
            **dict(common, num_key_value_heads=HEADS), n_routed_experts=v["experts"],
            num_experts_per_tok=o.get("top_k", v["top_k"]), moe_intermediate_size=v["moe_ff"],
            n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=v["q_lora"],
            kv_lora_rank=DS_KV_RANK, qk_nope_head_dim=DS_NOPE, qk_rope_head_dim=DS_ROPE,
            v_head_dim=DS_V, n_group=o.get("n_group", v["n_group"]),
            topk_group=o.get("topk_group", v["topk_group"]),
            norm_topk_prob=o.get("norm_topk", v["norm_topk"]),
            routed_scaling_factor=o.get("scale", v["scale"]), rope_interleave=True,
            rms_norm_eps=1e-6, attention_bias=False, tie_word_embeddings=False,
            scoring_func="sigmoid", topk_method="noaux_tc")
    if fam == "deepseek2":
        # intermediate_size 128: the leading dense layer's FFN; the shared
        # expert is n_shared_experts x moe_intermediate_size
        return transformers.DeepseekV2Config(
            **dict(common, num_key_value_heads=HEADS), n_routed_experts=v["experts"],
            num_experts_per_tok=o.get("top_k", v["top_k"]), moe_intermediate_size=v["moe_ff"],
            n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=v["q_lora"],
            kv_lora_rank=DS_KV_RANK, qk_nope_head_dim=DS_NOPE, qk_rope_head_dim=DS_ROPE,
            v_head_dim=DS_V, topk_method="greedy", n_group=None, topk_group=None,
            norm_topk_prob=o.get("norm_topk", v["norm_topk"]),
            routed_scaling_factor=o.get("scale", v["scale"]), rms_norm_eps=1e-6,
            attention_bias=False, tie_word_embeddings=False, output_router_logits=False,
            router_aux_loss_coef=0.0)
    if fam in MOE_FAMILIES:
        moe = dict(num_experts_per_tok=o.get("top_k", v["top_k"]), tie_word_embeddings=False,
                   output_router_logits=False, router_aux_loss_coef=0.0)
        if fam == "mixtral":
            # Mixtral's intermediate_size is the experts'
            return transformers.MixtralConfig(**dict(common, intermediate_size=v["moe_ff"]),
                                              head_dim=HEAD_DIM, num_local_experts=v["experts"],
                                              sliding_window=None, rms_norm_eps=1e-5,
                                              router_jitter_noise=0.0, **moe)
        qmoe = dict(num_experts=v["experts"], moe_intermediate_size=v["moe_ff"],
                    norm_topk_prob=o.get("norm_topk", v["norm_topk"]), decoder_sparse_step=1,
                    mlp_only_layers=[], use_sliding_window=False, sliding_window=None,
                    rms_norm_eps=1e-6, **moe)
        if fam == "qwen3moe":
            return transformers.Qwen3MoeConfig(head_dim=v["head_dim"], attention_bias=False,
                                               **qmoe, **common)
        return transformers.Qwen2MoeConfig(shared_expert_intermediate_size=v["shared_ff"],
                                           qkv_bias=True, **qmoe, **common)
    raise SystemExit("unknown family " + fam)


def randomize_hf(model, seed, family):
    """randomize() for the HF variants: the same scales; Gemma's RMSNorm
    multiplies by 1 + w, so its gains are stored as w = U(-0.25, 0.25)
    (the converter writes 1 + w); phi3's fused qkv_proj gets the Q/K scale
    on its Q and K rows."""
    g = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    gemma = family in ("gemma2", "gemma3")
    with torch.no_grad():
        for name in sorted(params):
            p = params[name]
            if family == "gptoss" and _gptoss_param(p, name, g):
                continue
            if name.endswith("norm.weight"):
                u = (torch.rand(p.shape, generator=g) - 0.5) * 0.5
                p.copy_(u if gemma else 1 + u)
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                p.copy_(torch.randn(p.shape, generator=g) * (2 / math.sqrt(p.shape[1])))
            elif name.endswith(("q_b_proj.weight", "kv_a_proj_with_mqa.weight")):
                # MLA: the query, and the key's RoPE part (the latent is
                # normalized, so its scale drops out), at the Q/K scale
                p.copy_(torch.randn(p.shape, generator=g) * (2 / math.sqrt(p.shape[1])))
            elif name.endswith("qkv_proj.weight"):
                w = torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1])
                w[:(HEADS + KV_HEADS) * HEAD_DIM] *= 2
                p.copy_(w)
            elif name.endswith(".weight"):
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            elif name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                # transformers' 3-D expert tensors (expert, out, in)
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[2]))
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            else:
                raise SystemExit("unexpected parameter " + name)


def ds3_correction_bias(model, seed):
    """DeepSeek-V3's e_score_correction_bias (a buffer, not a parameter):
    N(0, 0.1^2) per expert from its own generator, large against the spread
    of the sigmoid scores so that it changes choices."""
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for mlp in _moe_mlps(model):
            b = mlp.gate.e_score_correction_bias
            b.copy_(torch.randn(b.shape, generator=g) * 0.1)


def ds3_routing(model, ids):
    """moe_routing() for DeepSeek-V3's router: the choice is made on
    sigmoid(logit) + bias within the best groups, so the margins are those
    of the group choice (topk_group-th against the next group score) and of
    the expert choice among the eligible ones (k-th against (k+1)-th)."""
    got = []
    mlps = _moe_mlps(model)
    hooks = [mlp.gate.register_forward_hook(lambda mod, a, out: got.append((mod, out[0].detach())))
             for mlp in mlps]
    logits_of(model, ids)
    for h in hooks:
        h.remove()
    moe_layers = [i for i, layer in enumerate(_layers(model)) if hasattr(layer.mlp, "experts")]
    hist, margin, where = [], float("inf"), None
    for li, (r, lg) in zip(moe_layers, got):
        ch = torch.sigmoid(lg.to(torch.float64)) + r.e_score_correction_bias.to(torch.float64)
        ng, per = r.num_group, r.num_experts // r.num_group
        gs = ch.view(-1, ng, per).topk(2, dim=-1)[0].sum(dim=-1)
        gsrt, gidx = torch.sort(gs, dim=-1, descending=True)
        mask = torch.zeros_like(gs).scatter_(1, gidx[:, :r.topk_group], 1.0)
        ch = ch.masked_fill(mask.repeat_interleave(per, dim=1) == 0, float("-inf"))
        srt, idx = torch.sort(ch, dim=-1, descending=True)
        hist.append(np.bincount(idx[:, :r.top_k].reshape(-1).numpy(), minlength=r.num_experts).tolist())
        gaps = [(srt[:, r.top_k - 1] - srt[:, r.top_k]).numpy()]
        if r.topk_group < ng:
            gaps.append((gsrt[:, r.topk_group - 1] - gsrt[:, r.topk_group]).numpy())
        gap = np.minimum.reduce(gaps)
        t = int(np.argmin(gap))
        if gap[t] < margin:
            margin, where = float(gap[t]), (li, t)
    return list(zip(moe_layers, hist)), margin, where


def _gptoss_param(p, name, g):
    """gpt-oss's own parameters (the rest as randomize_hf draws them):
    sinks N(0, GPTOSS_SINK_STD^2), one logit per head; the experts stored
    (expert, in, out), gate and up interleaved in gate_up_proj's columns."""
    if name.endswith("self_attn.sinks"):
        p.copy_(torch.randn(p.shape, generator=g) * GPTOSS_SINK_STD)
    elif name.endswith("experts.gate_up_proj"):
        p.copy_(torch.randn(p.shape, generator=g) * (GPTOSS_GU / math.sqrt(p.shape[1])))
    elif name.endswith("experts.down_proj"):
        p.copy_(torch.randn(p.shape, generator=g) / (GPTOSS_GU * math.sqrt(p.shape[1])))
    elif name.endswith(("experts.gate_up_proj_bias", "experts.down_proj_bias")):
        p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    else:
        return False
    return True


def hf_logits(v, state, ids, mutate=None, **o):
    m = build_model(make_hf_config(v, **o))
    m.load_state_dict(state)
    if mutate:
        mutate(m)
    return logits_of(m, ids)


def _layers(m):
    return m.model.layers


def _moe_mlps(m):
    """The mixture-of-experts blocks (DeepSeek's leading dense layer has
    none)."""
    return [layer.mlp for layer in _layers(m) if hasattr(layer.mlp, "experts")]


def _router(mlp):
    return mlp.router if hasattr(mlp, "router") else mlp.gate


def hf_sensitivity(v, model, ref, ids):
    """(label, metric) rows: each feature the family adds, turned off."""
    st = copy.deepcopy(model.state_dict())
    fam = v["family"]
    out = []

    def row(label, mutate=None, **o):
        out.append((label, rel_err(hf_logits(v, st, ids, mutate=mutate, **o), ref[:len(ids)])))

    def post_norms_off(m):
        for layer in _layers(m):
            layer.post_attention_layernorm = torch.nn.Identity()
            layer.post_feedforward_layernorm = torch.nn.Identity()

    def no_embed_scale(m):
        m.model.embed_tokens.embed_scale.fill_(1.0)

    def norm_no_plus_one(m):
        # a reader that forgot Gemma's 1 + w: the gain is the stored w
        with torch.no_grad():
            for name, p in m.named_parameters():
                if name.endswith("norm.weight"):
                    p.sub_(1.0)

    def qk_layout(m):
        hd = v.get("head_dim", HEAD_DIM)
        with torch.no_grad():
            for layer in _layers(m):
                for proj, nh in ((layer.self_attn.q_proj, HEADS), (layer.self_attn.k_proj, KV_HEADS)):
                    w = proj.weight.numpy()
                    inv = w.reshape(nh, hd // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)
                    proj.weight.copy_(torch.from_numpy(inv.copy()))

    if fam == "gemma2":
        row("window off", window=4 * N_TOKENS)
        row("window on odd layers instead", swap_pattern=True)
        row("attn softcap off", attn_cap=None)
        row("final softcap off", final_cap=None)
        row("post-norms off", post_norms_off)
        row("embedding scale off", no_embed_scale)
        row("norm gain w not 1+w", norm_no_plus_one)
        row("gelu -> silu", act="silu")
        row("query_pre_attn_scalar 256", qpas=256)
    elif fam == "gemma3":
        row("window off", window=4 * N_TOKENS)
        row("local base = global base", local_theta=1000000.0)
        row("no linear 8 on global", no_global_scaling=True)

        def no_qk_norm(m):
            for layer in _layers(m):
                layer.self_attn.q_norm = torch.nn.Identity()
                layer.self_attn.k_norm = torch.nn.Identity()
        row("no QK-norm", no_qk_norm)
        row("post-norms off", post_norms_off)
        row("embedding scale off", no_embed_scale)
        row("norm gain w not 1+w", norm_no_plus_one)
        row("gelu -> silu", act="silu")
    elif fam == "mistral":
        row("window off", window=None)
        row("Q/K not reordered", qk_layout)
    elif fam == "ministral3":
        row("no YaRN", no_yarn=True)
        row("temperature scaling off", beta=0.0)
        # llama.cpp divides by mscale(factor, yarn_log_multiplier): without
        # it the attention factor is 0.1 ln 4 + 1
        row("yarn_log_multiplier ignored", mscale_all_dim=0.0)
        row("Q/K not reordered", qk_layout)
    elif fam == "qwen3":
        def no_qk_norm3(m):
            for layer in _layers(m):
                layer.self_attn.q_norm = torch.nn.Identity()
                layer.self_attn.k_norm = torch.nn.Identity()

        def qk_gain_1(m):
            with torch.no_grad():
                for layer in _layers(m):
                    layer.self_attn.q_norm.weight.fill_(1)
                    layer.self_attn.k_norm.weight.fill_(1)
        row("rope_theta x2", theta=2000000.0)
        row("no QK-norm", no_qk_norm3)
        row("QK-norm gains 1", qk_gain_1)
        # a reader that permuted Q/K as llama's (NeoX rotation is Hugging
        # Face's own layout)
        row("Q/K reordered as llama's", qk_layout)
    elif fam == "phi3":
        row("long <-> short factors", long=SHORT_FACTOR, short=LONG_FACTOR)
        row("factors all 1", long=[1.0] * 8, short=[1.0] * 8)
        row("attn_factor 1", attn_factor=1.0)
        if v["partial"] < 1.0:
            row("rotary over all 16 dims", partial=1.0,
                long=LONG_FACTOR[:6] + LONG_FACTOR[4:6], short=SHORT_FACTOR[:6] + SHORT_FACTOR[4:6])

        def split_wrong(m):
            # gate and up halves of gate_up_proj swapped
            with torch.no_grad():
                for layer in _layers(m):
                    w = layer.mlp.gate_up_proj.weight
                    w.copy_(torch.cat([w[FF:], w[:FF]]))
        row("gate/up halves swapped", split_wrong)
    elif fam == "gptoss":
        gptoss_rows(v, row)
    elif fam in MOE_FAMILIES:
        k = v["top_k"]
        row("top-1 instead of top-2", top_k=1)
        if fam == "mixtral":
            row("no renormalization", lambda m: set_router(m, "plain"))
        elif fam == "deepseek2" and v.get("v3"):
            row("not renormalized", norm_topk=False)
        elif fam == "deepseek2":
            row("renormalized", lambda m: set_router(m, "renorm"))
        elif v["norm_topk"]:
            row("no renormalization", norm_topk=False)
        else:
            row("renormalized", norm_topk=True)
        if not v.get("v3"):
            row(f"router weights ignored (1/{k} each)", lambda m: set_router(m, "uniform"))
        row("experts permuted (rolled by 1)", roll_experts)
        row("expert gate/up swapped", swap_expert_gate_up)
        if fam == "qwen2moe":
            row("shared expert off", shared_expert_off)
            row("shared gate off (sigmoid = 1)", shared_gate_off)

            def nobias(m):
                with torch.no_grad():
                    for layer in _layers(m):
                        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj,
                                     layer.self_attn.v_proj):
                            proj.bias.zero_()
            row("no Q/K/V bias", nobias)
        if fam == "qwen3moe":
            def no_qk_norm_moe(m):
                for layer in _layers(m):
                    layer.self_attn.q_norm = torch.nn.Identity()
                    layer.self_attn.k_norm = torch.nn.Identity()
            row("no QK-norm", no_qk_norm_moe)
        if fam == "mixtral":
            row("Q/K not reordered", qk_layout)
        if fam == "deepseek2":
            deepseek_rows(v, row)
    return out


def deepseek_rows(v, row):
    """DeepSeek-V2's own features, each got wrong (MLA's absorbed and
    expanded forms are the same math: no row)."""
    qk = DS_NOPE + DS_ROPE

    def q_weight(attn):
        return attn.q_b_proj.weight if v["q_lora"] else attn.q_proj.weight

    def rope_first(m):
        # a reader taking each query head's first 8 dims as its RoPE part
        # (and the last 16 as the part without position)
        with torch.no_grad():
            for layer in _layers(m):
                w = q_weight(layer.self_attn)
                h = w.reshape(HEADS, qk, -1)
                w.copy_(torch.cat([h[:, DS_ROPE:], h[:, :DS_ROPE]], dim=1).reshape(w.shape))

    def rope_halves(m):
        # NeoX halves instead of the adjacent pairs DeepSeek rotates: the
        # RoPE rows of the query heads and of the shared key, reordered
        with torch.no_grad():
            for layer in _layers(m):
                a = layer.self_attn
                w = q_weight(a)
                h = w.reshape(HEADS, qk, -1).clone()
                h[:, DS_NOPE:] = torch.from_numpy(_pairs_from_halves(h[:, DS_NOPE:]))
                w.copy_(h.reshape(w.shape))
                kv = a.kv_a_proj_with_mqa.weight
                kv[DS_KV_RANK:] = torch.from_numpy(_pairs_from_halves(kv[None, DS_KV_RANK:])[0])

    def no_mscale(m):
        for layer in _layers(m):
            layer.self_attn.scaling = qk ** -0.5

    def kv_a_norm_off(m):
        for layer in _layers(m):
            layer.self_attn.kv_a_layernorm = torch.nn.Identity()

    def q_a_norm_off(m):
        for layer in _layers(m):
            layer.self_attn.q_a_layernorm = torch.nn.Identity()

    def shexp_off(m):
        with torch.no_grad():
            for mlp in _moe_mlps(m):
                mlp.shared_experts.down_proj.weight.zero_()

    def dense_ffn_skipped(m):
        m.model.layers[0].mlp = _Zero()

    if v["scale"] != 1.0:
        row("routed_scaling_factor 1", scale=1.0)
    if v.get("v3"):
        ds3_router_rows(v, row)
    row("shared expert off", shexp_off)
    row("leading dense FFN skipped", dense_ffn_skipped)
    row("kv_a_norm off", kv_a_norm_off)
    if v["q_lora"]:
        row("q_a_norm off", q_a_norm_off)
    row("RoPE part = first 8 dims of a head", rope_first)
    row("RoPE pairs as NeoX halves", rope_halves)
    row("no YaRN", no_yarn=True)
    row("YaRN mscale^2 off (softmax scale 1/sqrt(24))", no_mscale)


def gptoss_rows(v, row):
    """gpt-oss's features, each got wrong."""
    import torch.nn.functional as F

    def router(mode):
        def mutate(m):
            for mlp in _moe_mlps(m):
                r = mlp.router

                def fwd(h, r=r):
                    logits = F.linear(h, r.weight, r.bias)
                    if mode == "softmax-all":
                        # softmax over all experts, then top-k, not
                        # renormalized (Mixtral's order without its
                        # renormalization)
                        val, idx = torch.topk(torch.softmax(logits, dim=-1), r.top_k, dim=-1)
                    else:
                        val, idx = torch.topk(logits, r.top_k, dim=-1)
                        val = torch.full_like(val, 1.0 / r.top_k)
                    return logits, val, idx
                r.forward = fwd
        return mutate

    def sinks_off(m):
        with torch.no_grad():
            for layer in _layers(m):
                layer.self_attn.sinks.fill_(float("-inf"))

    def gate_up_swapped(m):
        with torch.no_grad():
            for mlp in _moe_mlps(m):
                for p in (mlp.experts.gate_up_proj, mlp.experts.gate_up_proj_bias):
                    p.copy_(torch.stack([p[..., 1::2], p[..., ::2]], dim=-1).reshape(p.shape))

    def no_plus_one(m):
        for mlp in _moe_mlps(m):
            e = mlp.experts

            def gate(gu, e=e):
                g_, u = gu[..., ::2], gu[..., 1::2]
                g_ = g_.clamp(max=e.limit)
                u = u.clamp(min=-e.limit, max=e.limit)
                return u * (g_ * torch.sigmoid(g_ * e.alpha))
            e._apply_gate = gate

    def alpha_1(m):
        for mlp in _moe_mlps(m):
            mlp.experts.alpha = 1.0

    def attn_bias_off(m):
        with torch.no_grad():
            for layer in _layers(m):
                a = layer.self_attn
                for proj in (a.q_proj, a.k_proj, a.v_proj, a.o_proj):
                    proj.bias.zero_()

    def expert_bias_off(m):
        with torch.no_grad():
            for mlp in _moe_mlps(m):
                mlp.experts.gate_up_proj_bias.zero_()
                mlp.experts.down_proj_bias.zero_()

    def router_bias_off(m):
        with torch.no_grad():
            for mlp in _moe_mlps(m):
                mlp.router.bias.zero_()

    row("sinks off", sinks_off)
    row("SwiGLU clamp off", limit=float("inf"))
    row("SwiGLU (up + 1) -> up", no_plus_one)
    row("SwiGLU alpha 1", alpha_1)
    row("window off", window=4 * N_TOKENS)
    row("window on layer 1 instead", swap_pattern=True)
    row("softmax over all, then top-2 (not renormalized)", router("softmax-all"))
    row("top-1 instead of top-2", top_k=1)
    row("router weights ignored (1/2 each)", router("uniform"))
    row("experts permuted (rolled by 1)", roll_experts)
    row("expert gate/up swapped", gate_up_swapped)
    row("router bias off", router_bias_off)
    row("expert biases off", expert_bias_off)
    row("attention biases off", attn_bias_off)
    row("no YaRN", no_yarn=True)
    row("YaRN attention factor 1", attn_factor=1.0)
    # llama.cpp rounds YaRN's correction range outward (floor/ceil) whatever
    # the config says; gpt-oss's truncate false keeps it fractional
    row("YaRN range rounded (truncate true)", truncate=True)


def gptoss_clamped(model, ids):
    """The fraction of the routed experts' gate and up activations that the
    SwiGLU clamp changes (gate > limit; |up| > limit)."""
    n = {"gate": 0, "up": 0, "all": 0}
    for mlp in _moe_mlps(model):
        e = mlp.experts
        orig = e._apply_gate

        def gate(gu, e=e, orig=orig):
            n["gate"] += int((gu[..., ::2] > e.limit).sum())
            n["up"] += int((gu[..., 1::2].abs() > e.limit).sum())
            n["all"] += gu[..., ::2].numel()
            return orig(gu)
        e._apply_gate = gate
    logits_of(model, ids)
    for mlp in _moe_mlps(model):
        del mlp.experts._apply_gate
    return n["gate"] / n["all"], n["up"] / n["all"]


def ds3_router_rows(v, row):
    """DeepSeek-V3's router, each part got wrong."""
    import torch.nn.functional as F

    def router(mode):
        def mutate(m):
            for mlp in _moe_mlps(m):
                r = mlp.gate
                orig = r.forward

                def fwd(h, r=r, orig=orig):
                    logits, w, idx = orig(h)
                    lg = logits.float()
                    if mode == "bias-in-weights":
                        # the weights taken from the biased choice scores
                        w = (torch.sigmoid(lg) + r.e_score_correction_bias).gather(1, idx)
                        w = w / w.sum(dim=-1, keepdim=True) * r.routed_scaling_factor
                    elif mode == "softmax":
                        # softmax scores (V2's) in place of sigmoid, the
                        # same choice
                        w = torch.softmax(lg, dim=-1).gather(1, idx)
                        w = w / w.sum(dim=-1, keepdim=True) * r.routed_scaling_factor
                    return logits, w, idx
                r.forward = fwd
        return mutate

    def bias_off(m):
        with torch.no_grad():
            for mlp in _moe_mlps(m):
                mlp.gate.e_score_correction_bias.zero_()

    row("correction bias off", bias_off)
    row("correction bias in the weights too", router("bias-in-weights"))
    row("no group limit (n_group 1)", n_group=1, topk_group=1)
    row("softmax weights instead of sigmoid", router("softmax"))


def _pairs_from_halves(h):
    """Rows (..., d, in) in rotate-half order re-read as adjacent pairs:
    row 2i + s of the result is row i + s*d/2 (what a reader applying NeoX
    halves to pair-ordered rows computes, in transformers' pair layout)."""
    a = h.numpy() if hasattr(h, "numpy") else h
    n, d = a.shape[0], a.shape[1]
    return np.ascontiguousarray(a.reshape(n, 2, d // 2, -1).swapaxes(1, 2).reshape(a.shape))


class _Zero(torch.nn.Module):
    def forward(self, h):
        return torch.zeros_like(h)


# --- mixtures of experts: mutations for the sensitivity rows, routing ----


def set_router(m, mode):
    """Replace each router's forward: softmax over all experts, top-k, then
    "plain" (the top-k probabilities as they are, no renormalization),
    "uniform" (1/k each: the router's weights ignored; DeepSeek: times its
    routed_scaling_factor) or "renorm" (DeepSeek: renormalized, then
    scaled)."""
    import torch.nn.functional as F
    for mlp in _moe_mlps(m):
        gate = mlp.gate

        def fwd(h, gate=gate):
            h = h.reshape(-1, gate.hidden_dim)
            logits = F.linear(h, gate.weight)
            top, idx = torch.topk(torch.softmax(logits.float(), dim=-1), gate.top_k, dim=-1)
            if mode == "renorm":
                # DeepSeek-V2's router ignores norm_topk_prob: renormalized
                # here, then routed_scaling_factor
                top = top / top.sum(dim=-1, keepdim=True) * gate.routed_scaling_factor
            if mode == "uniform":
                # DeepSeek's routed_scaling_factor kept
                top = torch.full_like(top, getattr(gate, "routed_scaling_factor", 1.0) / gate.top_k)
            return logits, top.to(logits.dtype), idx
        gate.forward = fwd


def roll_experts(m):
    # expert e's weights read as expert e + 1's; the router unchanged
    with torch.no_grad():
        for mlp in _moe_mlps(m):
            e = mlp.experts
            for p in (e.gate_up_proj, e.down_proj) + tuple(
                    getattr(e, b) for b in ("gate_up_proj_bias", "down_proj_bias") if hasattr(e, b)):
                p.copy_(torch.roll(p, 1, dims=0))


def swap_expert_gate_up(m):
    with torch.no_grad():
        for mlp in _moe_mlps(m):
            w = mlp.experts.gate_up_proj
            n = w.shape[1] // 2
            w.copy_(torch.cat([w[:, n:], w[:, :n]], dim=1))


def shared_expert_off(m):
    with torch.no_grad():
        for layer in _layers(m):
            layer.mlp.shared_expert.down_proj.weight.zero_()


class _Inf(torch.nn.Module):
    def forward(self, h):
        return torch.full(h.shape[:-1] + (1,), float("inf"), dtype=h.dtype)


def shared_gate_off(m):
    # sigmoid(inf) = 1: the shared expert's output taken whole
    for layer in _layers(m):
        layer.mlp.shared_expert_gate = _Inf()


def moe_routing(model, ids, k):
    """The router logits of every layer over the sequence: per layer the
    number of times each expert is among the top k, and the smallest gap
    between the k-th and (k+1)-th largest logit over all tokens and layers
    (a near-tie would make the golden depend on rounding)."""
    got = []
    hooks = [_router(mlp).register_forward_hook(lambda mod, a, out: got.append(out[0].detach()))
             for mlp in _moe_mlps(model)]
    logits_of(model, ids)
    for h in hooks:
        h.remove()
    hist, margin, where = [], float("inf"), None
    moe_layers = [i for i, layer in enumerate(_layers(model)) if hasattr(layer.mlp, "experts")]
    for li, lg in zip(moe_layers, got):
        srt, idx = torch.sort(lg.to(torch.float64), dim=-1, descending=True)
        hist.append(np.bincount(idx[:, :k].reshape(-1).numpy(), minlength=lg.shape[1]).tolist())
        gap = (srt[:, k - 1] - srt[:, k]).numpy()
        t = int(np.argmin(gap))
        if gap[t] < margin:
            margin, where = float(gap[t]), (li, t)
    return list(zip(moe_layers, hist)), margin, where


def hf_short_sensitivity(v, model, ref_short, ids):
    st = copy.deepcopy(model.state_dict())
    return [("short <-> long factors", rel_err(
        hf_logits(v, st, ids, long=SHORT_FACTOR, short=LONG_FACTOR), ref_short))]


def save_hf_dir(d, v, model, sp_bytes):
    """config.json + model.safetensors (f32) from transformers, and the
    tokenizer files: tokenizer.model and a tokenizer_config.json."""
    import json
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    model.save_pretrained(d, safe_serialization=True)
    for f in ("generation_config.json",):
        p = os.path.join(d, f)
        if os.path.exists(p):
            os.remove(p)
    if v["family"] in BPE_FAMILIES:
        save_bpe_tokenizer(d)
        return
    with open(os.path.join(d, "tokenizer.model"), "wb") as f:
        f.write(sp_bytes)
    cls = {"gemma2": "GemmaTokenizer", "gemma3": "GemmaTokenizer"}.get(v["family"], "LlamaTokenizer")
    tc = {"tokenizer_class": cls, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
          "pad_token": "<pad>", "add_bos_token": True, "add_eos_token": False,
          "model_max_length": 128}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=2, sort_keys=True)
        f.write("\n")


# BPE_FAMILIES: the converter takes only a byte-level BPE tokenizer
# (tokenizer.json) for these, and recognizes its pre-tokenizer by a hash of
# the ids it gives a fixed text, known only for published tokenizers. The
# converter is run unchanged except that an unrecognized hash yields
# "qwen2" (what Qwen's MoE releases carry) instead of an error: tensors and
# hyper-parameters are all its own.
PRE_SHIM = """
import runpy, sys
root, pre = sys.argv[1], sys.argv[2]
sys.argv = [root + "/convert_hf_to_gguf.py"] + sys.argv[3:]
sys.path.insert(0, root)
from conversion import base
orig = base.TextModel.get_vocab_base_pre
def pre_or_default(self, tokenizer):
    try:
        return orig(self, tokenizer)
    except NotImplementedError:
        return pre
base.TextModel.get_vocab_base_pre = pre_or_default
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def save_bpe_tokenizer(d):
    """tokenizer.json of the byte-level BPE vocabulary the gguf-py variants
    carry (TOKENS, MERGES, SPECIALS: 272 ids), for the BPE_FAMILIES."""
    import json
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, AddedToken
    plain = {t: i for i, t in enumerate(TOKENS) if t not in SPECIALS}
    tk = Tokenizer(models.BPE(vocab=plain, merges=[tuple(m.split(" ")) for m in MERGES]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tk.save(os.path.join(d, "tokenizer.json"))
    tc = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": SPECIALS[0],
          "pad_token": SPECIALS[0], "add_bos_token": False, "model_max_length": 128}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=2, sort_keys=True)
        f.write("\n")


def convert(hf_dir, gguf_path, pre=None):
    """llama.cpp's convert_hf_to_gguf.py, with its own gguf-py; `pre`: the
    tokenizer pre-type when the converter does not recognize ours
    (PRE_SHIM)."""
    import subprocess
    root = os.environ.get("LLAMACPP_DIR", CONVERTER_DEFAULT)
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "gguf-py"))
    args = [hf_dir, "--outfile", gguf_path, "--outtype", "f32"]
    if pre:
        cmd = [sys.executable, "-c", PRE_SHIM, root, pre] + args
    else:
        cmd = [sys.executable, os.path.join(root, "convert_hf_to_gguf.py")] + args
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
        raise SystemExit(f"convert_hf_to_gguf.py failed on {hf_dir}")


# ---------------------------------------------------------------------------


def token_ids():
    rng = np.random.default_rng(SEED)
    return [BOS] + [int(x) for x in rng.integers(0, VOCAB, size=N_TOKENS - 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "data", "tiny"))
    ap.add_argument("--check", action="store_true",
                    help="compare with the files in --out instead of writing them")
    ap.add_argument("--llamacpp", action="store_true",
                    help="also evaluate the files with llama-cpp-python and compare")
    args = ap.parse_args()
    torch.set_num_threads(2)

    got = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
           "gguf": _gguf_version(), "numpy": np.__version__}
    for k, want in VERSIONS.items():
        if got[k] != want:
            print(f"warning: {k} {got[k]} differs from the {want} that made the committed files",
                  file=sys.stderr)

    out = os.path.abspath(args.out)
    work = out if not args.check else os.path.join("/tmp", "gen_tiny_hf_check")
    os.makedirs(work, exist_ok=True)
    ids = token_ids()
    bad = 0
    lines = ["# tests/data/tiny: made by tests/ref/gen_tiny_hf.py",
             "# " + " ".join(f"{k} {got[k]}" for k in VERSIONS) +
             f" python {sys.version.split()[0]}",
             "# GGUF of the hf/ variants: " + CONVERTER_VERSION + " --outtype f32, its own gguf-py",
             "# name\tarch\tn_vocab\tn_tokens\tsensitivity (the test's metric when a feature changes)"]

    def report(name, arch, n_tok, ref, sens, extra=""):
        s = "; ".join(f"{lab} {val:.3g}" for lab, val in sens)
        print(f"{name:13s} logits |max| {np.abs(ref).max():.3f}  {s}{extra}", flush=True)
        lines.append(f"{name}\t{arch}\t{VOCAB}\t{n_tok}\t{s}{extra}")
        for lab, val in sens:
            if val < 1e-2:
                print(f"  warning: {name}: '{lab}' moves the logits by only {val:.3g}",
                      file=sys.stderr)

    for i, v in enumerate(VARIANTS):
        model = build_model(make_config(v))
        randomize(model, SEED + i)
        ref = logits_of(model, ids)
        assert ref.shape == (N_TOKENS, VOCAB) and np.all(np.isfinite(ref))
        gpath = os.path.join(work, v["name"] + ".gguf")
        write_gguf(gpath, v, model)
        ref.astype("<f4").tofile(os.path.join(work, v["name"] + ".logits"))
        extra = ""
        if v["scaling"] and v["scaling"]["rope_type"] == "llama3":
            extra = " rope_freqs " + " ".join(f"{x:.6g}" for x in llama3_rope_factors(model))
        report(v["name"], v["arch"], N_TOKENS, ref, sensitivity(v, model, ref, ids), extra)

    sp_bytes = sp_model_bytes()
    for i, v in enumerate(HF_VARIANTS):
        model = build_model(make_hf_config(v))
        randomize_hf(model, HF_SEED + i + v.get("reseed", 0), v["family"])
        if v.get("v3"):
            ds3_correction_bias(model, HF_SEED + i + v.get("reseed", 0))
        ref = logits_of(model, ids)
        assert ref.shape == (N_TOKENS, VOCAB) and np.all(np.isfinite(ref))
        hf_dir = os.path.join(work, "hf", v["name"])
        save_hf_dir(hf_dir, v, model, sp_bytes)
        convert(hf_dir, os.path.join(work, v["name"] + ".gguf"), pre=BPE_PRE.get(v["family"]))
        ref.astype("<f4").tofile(os.path.join(work, v["name"] + ".logits"))
        extra = ""
        if v["family"] in MOE_FAMILIES:
            hist, margin, where = (ds3_routing(model, ids) if v.get("v3") else
                                   moe_routing(model, ids, v["top_k"]))
            extra = "; experts chosen " + " | ".join(
                f"L{li} " + " ".join(map(str, h)) for li, h in hist) + \
                f"; smallest top-{v['top_k']} margin {margin:.3g} (layer {where[0]}, token {where[1]})"
            if margin < 1e-3 or min(min(h) for _, h in hist) == 0:
                raise SystemExit(f"{v['name']}: routing near a tie or an expert unused: reseed")
        if v["family"] == "gptoss":
            cg, cu = gptoss_clamped(model, ids)
            extra += f"; clamped gate {cg:.3f} up {cu:.3f}"
        report(v["name"], v["gguf_arch"], N_TOKENS, ref, hf_sensitivity(v, model, ref, ids), extra)
        if v["family"] == "phi3":
            # the first PHI3_ORIG tokens alone: within the original
            # context, so the short factors
            short = logits_of(model, ids[:PHI3_ORIG])
            short.astype("<f4").tofile(os.path.join(work, v["name"] + "-short.logits"))
            report(v["name"] + "-short", v["gguf_arch"], PHI3_ORIG, short,
                   hf_short_sensitivity(v, model, short, ids[:PHI3_ORIG]))

    with open(os.path.join(work, "tokens.txt"), "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    with open(os.path.join(work, "manifest.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")

    if args.llamacpp:
        llamacpp_check(work, ids)

    if args.check:
        names = []
        for root, _, files in os.walk(work):
            names += [os.path.relpath(os.path.join(root, f), work) for f in files]
        for name in sorted(names):
            a = open(os.path.join(work, name), "rb").read()
            try:
                b = open(os.path.join(out, name), "rb").read()
            except OSError:
                b = None
            if name.endswith(".logits") and b is not None and len(a) == len(b):
                ra = np.frombuffer(a, "<f4").reshape(-1, VOCAB)
                rb = np.frombuffer(b, "<f4").reshape(-1, VOCAB)
                e = rel_err(ra, rb)
                status = "same" if a == b else f"differs by {e:.3g} (metric)"
                if e > 1e-5:
                    bad += 1
            elif a == b:
                status = "same"
            else:
                status = "DIFFERS"
                bad += 1 if not name.endswith(".tsv") else 0
            print(f"{name}: {status}")
    return 1 if bad else 0


def llamacpp_check(out, ids):
    """Cross-check: llama.cpp (llama-cpp-python) evaluates each written GGUF
    and its logits are compared with transformers', with an f32 and with
    its default f16 KV cache. Confirms that the files are laid out as
    llama.cpp expects (Q/K order, rope_freqs), independently of ruvllm."""
    import llama_cpp as lc
    default_params = lc.llama_model_default_params

    def params():
        # plain CPU buffers: the AMX path crashes on this machine (see
        # gen_llamacpp_goldens.py)
        p = default_params()
        p.use_extra_bufts = False
        return p
    lc.llama_model_default_params = params
    runs = [(v["name"], v["name"], N_TOKENS) for v in VARIANTS + HF_VARIANTS]
    runs += [(v["name"] + "-short", v["name"], PHI3_ORIG) for v in HF_VARIANTS
             if v["family"] == "phi3"]
    tmp = os.path.join("/tmp", "gen_tiny_hf_llamacpp")
    os.makedirs(tmp, exist_ok=True)
    for golden, model, n in runs:
        ref = np.fromfile(os.path.join(out, golden + ".logits"), "<f4").reshape(n, VOCAB)
        res = []
        path = os.path.join(out, model + ".gguf")
        if model == "deepseek2-lite":
            # llama.cpp takes a DeepSeek2 without q_lora_rank for V2-Lite
            # only when it has 26 or 27 layers (its real depth), and reads
            # the key otherwise: a copy with the key 0 (plain attn_q)
            path = os.path.join(tmp, model + ".gguf")
            gguf_with_key(os.path.join(out, model + ".gguf"), path,
                          "deepseek2.attention.q_lora_rank", 0, gguf.GGUFValueType.UINT32)
        for label, kv in (("f32 KV", {"type_k": 0, "type_v": 0}), ("f16 KV", {})):
            llm = lc.Llama(model_path=path, n_ctx=n,
                           n_batch=n, logits_all=True, n_threads=1, n_threads_batch=1,
                           verbose=False, **kv)
            llm.eval(ids[:n])
            got = np.asarray(llm.scores[:n], dtype=np.float32)
            res.append(f"{label} {rel_err(got, ref):.3g}")
            del llm
        print(f"llama.cpp {lc.__version__} vs transformers, {golden} (n_ctx {n}): " +
              ", ".join(res), flush=True)


def gguf_with_key(src, dst, key, val, vtype):
    """A copy of GGUF src with one more key (gguf-py, as its
    gguf_new_metadata.py script copies a file)."""
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch, endianess=r.endianess)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub)
    w.add_key_value(key, val, vtype)
    for t in r.tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(t.data)
    w.close()


def _gguf_version():
    try:
        from importlib.metadata import version
        return version("gguf")
    except Exception:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
