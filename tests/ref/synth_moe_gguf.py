#!/usr/bin/env python3
"""synth_moe_gguf.py - a synthetic qwen3moe GGUF with Qwen3-30B-A3B's layer
shapes (hidden 2048, 32 query / 4 KV heads of 128, 128 experts of 768, top-8)
and random Q8_0 weights, fewer layers, for measuring streamed experts
(lib/engine/experts.c): the routing of random weights is not a real model's,
the bytes and shapes are. The tokenizer is the tiny qwen3moe test model's
(272 tokens). Not run by `make check`. gguf-py 0.19.0 (with numpy):

    python3 tests/ref/synth_moe_gguf.py OUT.gguf N_LAYERS    (4 layers: 2.5 GiB)

Every layer's experts hold the same random bytes (each layer its own random
router and attention), which changes nothing for the cache.
"""
import os, sys
import numpy as np
import gguf
n_layer = int(sys.argv[2]); out = sys.argv[1]
E, H, HKV, HD, NE, NU, FE, V = 2048, 32, 4, 128, 128, 8, 768, 272
rng = np.random.default_rng(0)
src = gguf.GGUFReader(os.path.join(os.path.dirname(__file__), "..", "data", "tiny", "qwen3moe.gguf"))
w = gguf.GGUFWriter(out, "qwen3moe")
A = "qwen3moe"
w.add_block_count(n_layer); w.add_context_length(4096); w.add_embedding_length(E)
w.add_feed_forward_length(6144); w.add_head_count(H); w.add_head_count_kv(HKV)
w.add_rope_freq_base(1e6); w.add_layer_norm_rms_eps(1e-6); w.add_expert_count(NE)
w.add_expert_used_count(NU); w.add_key_length(HD); w.add_value_length(HD)
w.add_expert_feed_forward_length(FE); w.add_file_type(7)
for f in src.fields.values():
    if f.name.startswith("tokenizer."):
        if f.name == "tokenizer.ggml.model": w.add_tokenizer_model("gpt2")
        elif f.name == "tokenizer.ggml.pre": w.add_tokenizer_pre("qwen2")
        elif f.name == "tokenizer.ggml.tokens": w.add_token_list([bytes(f.parts[i]).decode() for i in f.data])
        elif f.name == "tokenizer.ggml.token_type": w.add_token_types([int(f.parts[i][0]) for i in f.data])
        elif f.name == "tokenizer.ggml.merges": w.add_token_merges([bytes(f.parts[i]).decode() for i in f.data])
        elif f.name.endswith("_token_id"):
            w.add_uint32(f.name, int(f.parts[f.data[0]][0]))
        elif f.name == "tokenizer.ggml.add_bos_token": w.add_add_bos_token(False)
Q8 = gguf.GGMLQuantizationType.Q8_0
def q8(shape_rows, ncols, seed):
    r = np.random.default_rng(seed)
    nb = ncols // 32
    blk = np.empty(shape_rows + (nb, 34), dtype=np.uint8)
    d = np.float16(0.02 * 1.7 / 127)
    blk[..., 0:2] = np.frombuffer(np.array([d], dtype=np.float16).tobytes(), dtype=np.uint8)
    blk[..., 2:] = r.integers(0, 256, size=shape_rows + (nb, 32), dtype=np.uint8)
    return blk.reshape(shape_rows + (nb * 34,))
f32 = lambda *s: (rng.standard_normal(s) * 0.02).astype(np.float32)
w.add_tensor("token_embd.weight", rng.standard_normal((V, E)).astype(np.float32))
w.add_tensor("output_norm.weight", np.ones(E, np.float32))
w.add_tensor("output.weight", q8((V,), E, 1), raw_dtype=Q8)
gate = q8((NE, FE), E, 2); up = q8((NE, FE), E, 3); down = q8((NE, E), FE, 4)
for l in range(n_layer):
    p = "blk.%d." % l
    w.add_tensor(p + "attn_norm.weight", np.ones(E, np.float32))
    w.add_tensor(p + "ffn_norm.weight", np.ones(E, np.float32))
    w.add_tensor(p + "attn_q_norm.weight", np.ones(HD, np.float32))
    w.add_tensor(p + "attn_k_norm.weight", np.ones(HD, np.float32))
    w.add_tensor(p + "attn_q.weight", q8((H * HD,), E, 10 + l), raw_dtype=Q8)
    w.add_tensor(p + "attn_k.weight", q8((HKV * HD,), E, 20 + l), raw_dtype=Q8)
    w.add_tensor(p + "attn_v.weight", q8((HKV * HD,), E, 30 + l), raw_dtype=Q8)
    w.add_tensor(p + "attn_output.weight", q8((E,), H * HD, 40 + l), raw_dtype=Q8)
    w.add_tensor(p + "ffn_gate_inp.weight", f32(NE, E))
    w.add_tensor(p + "ffn_gate_exps.weight", gate, raw_dtype=Q8)
    w.add_tensor(p + "ffn_up_exps.weight", up, raw_dtype=Q8)
    w.add_tensor(p + "ffn_down_exps.weight", down, raw_dtype=Q8)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
