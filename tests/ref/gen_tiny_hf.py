#!/usr/bin/env python3
"""gen_tiny_hf.py - tiny random-weight models built with Hugging Face
transformers, written as GGUF with gguf-py, and transformers' logits for
every position of a fixed token sequence: the goldens that
tests/test_tiny_hf.c checks ruvllm's forward pass against.

Variants (each also named in tests/test_tiny_hf.c):

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

Geometry of all of them: hidden 64, 2 layers, 4 query heads over 2 KV heads
(GQA) of 16 (qwen3: of 32), intermediate 128, vocabulary 272 (256 GPT-2 byte tokens, 13
merges, 3 control tokens), f32 weights.

Weights: the model is built by transformers, then every parameter is
overwritten from one seeded torch.Generator (in sorted name order) with
values large enough that every part of the model shows in the logits
(transformers' default init, std 0.02, would leave attention nearly
uniform and RoPE invisible): embeddings N(0, 1); RMSNorm gains 1 + U(-0.25,
0.25); Q and K projections N(0, (2/sqrt(fan_in))^2), so that attention
scores have a standard deviation of a few units and the rotation matters;
other projections N(0, 1/fan_in); Q/K/V biases N(0, 0.25).

GGUF: written as llama.cpp's convert_hf_to_gguf.py would write these
models (f32 throughout, general.file_type 0):
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
  tokens.txt         the token ids (one line, space-separated): BOS, then
                     63 ids from a seeded generator
  manifest.tsv       per model: name, arch, n_vocab, n_tokens, and the
                     sensitivity figures below; # lines: versions

Sensitivity (printed and written to manifest.tsv): for each variant, how far
the logits move, in the test's metric (max over rows of max |a - b| / max
|ref row|), when the variant's defining feature is changed: scaling off,
YaRN's attention factor set to 1, Llama 3.1's factors replaced by plain
linear 8, Q/K not reordered (the wrong RoPE layout), biases dropped, and so
on. Each is 0.4 or more, far above the test's tolerance (1e-4; the issue asks
for 1e-3), so the test catches those
mistakes.

Usage:
    pip install torch==2.15.0 transformers==5.23.0 gguf==0.19.0 numpy==2.4.6
    python3 tests/ref/gen_tiny_hf.py            # rewrites tests/data/tiny/
    python3 tests/ref/gen_tiny_hf.py --check    # compares; exit 1 on a difference
    python3 tests/ref/gen_tiny_hf.py --check --llamacpp   # also llama.cpp's logits
        (llama-cpp-python 0.3.36) on the same files against transformers'

Versions used for the committed files: Python 3.11.7, torch 2.15.0 (PyPI
wheel, CPU only used), transformers 5.23.0, gguf (gguf-py) 0.19.0, numpy
2.4.6.
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
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                                          dtype=torch.float32)
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
             "# name\tarch\tn_vocab\tn_tokens\tsensitivity (the test's metric when a feature changes)"]
    for i, v in enumerate(VARIANTS):
        model = build_model(make_config(v))
        randomize(model, SEED + i)
        ref = logits_of(model, ids)
        assert ref.shape == (N_TOKENS, VOCAB) and np.all(np.isfinite(ref))
        gpath = os.path.join(work, v["name"] + ".gguf")
        write_gguf(gpath, v, model)
        ref.astype("<f4").tofile(os.path.join(work, v["name"] + ".logits"))
        sens = sensitivity(v, model, ref, ids)
        extra = ""
        if v["scaling"] and v["scaling"]["rope_type"] == "llama3":
            extra = " rope_freqs " + " ".join(f"{x:.6g}" for x in llama3_rope_factors(model))
        s = "; ".join(f"{lab} {val:.3g}" for lab, val in sens)
        print(f"{v['name']:13s} logits |max| {np.abs(ref).max():.3f}  {s}{extra}")
        lines.append(f"{v['name']}\t{v['arch']}\t{VOCAB}\t{N_TOKENS}\t{s}{extra}")
        for lab, val in sens:
            if val < 1e-2:
                print(f"  warning: {v['name']}: '{lab}' moves the logits by only {val:.3g}",
                      file=sys.stderr)
    with open(os.path.join(work, "tokens.txt"), "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    with open(os.path.join(work, "manifest.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")

    if args.llamacpp:
        llamacpp_check(work, ids)

    if args.check:
        for name in sorted(os.listdir(work)):
            a = open(os.path.join(work, name), "rb").read()
            try:
                b = open(os.path.join(out, name), "rb").read()
            except OSError:
                b = None
            if name.endswith(".logits") and b is not None and len(a) == len(b):
                ra = np.frombuffer(a, "<f4").reshape(N_TOKENS, VOCAB)
                rb = np.frombuffer(b, "<f4").reshape(N_TOKENS, VOCAB)
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
    for v in VARIANTS:
        ref = np.fromfile(os.path.join(out, v["name"] + ".logits"), "<f4").reshape(N_TOKENS, VOCAB)
        res = []
        for label, kv in (("f32 KV", {"type_k": 0, "type_v": 0}), ("f16 KV", {})):
            llm = lc.Llama(model_path=os.path.join(out, v["name"] + ".gguf"), n_ctx=N_TOKENS,
                           n_batch=N_TOKENS, logits_all=True, n_threads=1, n_threads_batch=1,
                           verbose=False, **kv)
            llm.eval(ids)
            got = np.asarray(llm.scores[:N_TOKENS], dtype=np.float32)
            res.append(f"{label} {rel_err(got, ref):.3g}")
            del llm
        print(f"llama.cpp {lc.__version__} vs transformers, {v['name']}: " + ", ".join(res))


def _gguf_version():
    try:
        from importlib.metadata import version
        return version("gguf")
    except Exception:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
