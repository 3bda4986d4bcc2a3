#!/usr/bin/env python3
"""kv_centering.py - how much key centering helps quantized KV pages, simulated
on SmolLM2-135M's real keys and queries (lib/engine/kvcache.c "Key centering").

For each layer and query head over 1024 tokens of wikitext-2 it compares the
attention distribution with exact keys against the one with quantized keys
(mean KL over query positions 32.., page 0 kept exact as the cache's
attention sink does) for: tq4 as kvcache.c defines it (random-sign
Walsh-Hadamard rotation, 4-bit Lloyd-Max N(0,1) codebook scaled by
1/sqrt(head_dim), norm kept, renormalized), tq4 of k - c with c the mean
key of positions 1..31, 1..63, 1..255, of every position, or of each page
(which would cost memory per page), tq3 and q8 with and without a centre.

Made with: torch 2.15.0, transformers 5.23.0, numpy (Python 3.11).
The model directory comes from the default GGUF:
  build/ruvllm dequant ~/.cache/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf \
      /tmp/hf_smol --format safetensors --type f32
  python3 tests/ref/kv_centering.py [/tmp/hf_smol]

Result (session 4): mean KL tq4 0.030; centred on 1..31 0.020, 1..63 0.019,
1..255 0.016, all 0.015, per page 0.010; tq3 0.109 -> 0.057 (1..255);
q8 0.00020 -> 0.00011 (1..255). Perplexity (README "KV cache formats"):
q8 +0.15% -> +0.09%, tq4 +1.61% -> +1.43%, tq3 +7.29% -> +4.82%.
"""
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

torch.set_num_threads(2)
d = sys.argv[1] if len(sys.argv) > 1 else "/tmp/hf_smol"
tok = AutoTokenizer.from_pretrained(d)
model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
text = open("../shared/data/text/wikitext-2-test.txt").read()[5000:20000]
ids = tok(text, return_tensors="pt").input_ids[:, :1024]
T = ids.shape[1]
qs = {}


def hook(i):
    def f(mod, inp, out):
        qs[i] = out.detach()
    return f


for i, layer in enumerate(model.model.layers):
    layer.self_attn.q_proj.register_forward_hook(hook(i))
with torch.no_grad():
    out = model(ids, use_cache=True)
pkv = out.past_key_values
cfg = model.config
nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
hd = cfg.hidden_size // nh
cos, sin = model.model.rotary_emb(qs[0], torch.arange(T)[None])

# Lloyd-Max levels for N(0,1) (tests/ref/gen_lloyd_max.py)
CB4 = np.array([0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6180, 2.0690, 2.7326])
CB4 = np.concatenate([-CB4[::-1], CB4])
CB3 = np.array([0.2451, 0.7560, 1.3440, 2.1520])
CB3 = np.concatenate([-CB3[::-1], CB3])
signs = np.random.default_rng(1).choice([-1.0, 1.0], size=hd)
H = np.array([[1.0]])
while H.shape[0] < hd:
    H = np.block([[H, H], [H, -H]])
R = H / np.sqrt(hd) * signs[None, :]


def tq(K, cb):
    n = np.linalg.norm(K, axis=1, keepdims=True) + 1e-30
    y = (K / n) @ R.T * np.sqrt(hd)
    idx = np.abs(y[:, :, None] - cb[None, None, :]).argmin(-1)
    xr = (cb[idx] / np.sqrt(hd)) @ R
    return xr / np.linalg.norm(xr, axis=1, keepdims=True) * n


def q8(K):
    out = K.copy()
    for g in range(0, hd, 32):
        s = np.abs(K[:, g:g + 32]).max(1, keepdims=True) / 127 + 1e-30
        out[:, g:g + 32] = np.round(K[:, g:g + 32] / s) * s
    return out


def kl(q, K, Kq):
    m = np.tril(np.ones((T, T), bool))
    res = []
    for KK in (K, Kq):
        s = q @ KK.T / np.sqrt(hd)
        s[~m] = -1e30
        p = np.exp(s - s.max(1, keepdims=True))
        res.append(p / p.sum(1, keepdims=True))
    p, pq = res
    return (p * (np.log(p + 1e-30) - np.log(pq + 1e-30))).sum(1)[32:].mean()


def centred(f, K, c):
    return np.vstack([K[:32], f(K[32:] - c) + c])


tot = {}
for L in range(cfg.num_hidden_layers):
    Kl = pkv.layers[L].keys[0].numpy().astype(np.float64)
    q = qs[L].view(1, T, nh, hd).transpose(1, 2)
    q, _ = apply_rotary_pos_emb(q, q, cos, sin)
    q = q[0].numpy().astype(np.float64)
    for h in range(nh):
        K = Kl[h // (nh // nkv)]
        t4 = lambda x: tq(x, CB4)
        t3 = lambda x: tq(x, CB3)
        c256 = K[1:256].mean(0)
        res = {
            "tq4": kl(q[h], K, np.vstack([K[:32], t4(K[32:])])),
            "tq4 c1..31": kl(q[h], K, centred(t4, K, K[1:32].mean(0))),
            "tq4 c1..63": kl(q[h], K, centred(t4, K, K[1:64].mean(0))),
            "tq4 c1..255": kl(q[h], K, centred(t4, K, c256)),
            "tq4 c all": kl(q[h], K, centred(t4, K, K[32:].mean(0))),
            "tq4 c per page": kl(q[h], K, np.vstack(
                [K[:32]] + [t4(K[i:i + 32] - K[i:i + 32].mean(0)) + K[i:i + 32].mean(0)
                            for i in range(32, T, 32)])),
            "tq3": kl(q[h], K, np.vstack([K[:32], t3(K[32:])])),
            "tq3 c1..255": kl(q[h], K, centred(t3, K, c256)),
            "q8": kl(q[h], K, np.vstack([K[:32], q8(K[32:])])),
            "q8 c1..255": kl(q[h], K, centred(q8, K, c256)),
        }
        for k, v in res.items():
            tot.setdefault(k, []).append(v)
    print("layer", L, flush=True)
for k, v in tot.items():
    print("%-16s mean KL %.5f" % (k, np.mean(v)))
