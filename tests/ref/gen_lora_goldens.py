#!/usr/bin/env python3
"""Random LoRA adapters for SmolLM2 made with peft, and what peft's merge
gives, for tests/test_lora.c and tests/cli/t0090-lora.sh.

    python3 tests/ref/gen_lora_goldens.py [--model IN.gguf] [--out tests/data/lora]

The Hugging Face form of the default model is `build/ruvllm dequant
--format safetensors --type f32` of it (the same weights as the GGUF:
Q4_1/Q8_0 values dequantized exactly). transformers loads it in float32 and
peft puts adapters on it:

  smol-r8/         r=8, lora_alpha=16 on q,k,v,o,gate,up,down of layers
                   0, 1, 14, 29; A and B random (seed 1), stored F16 (the
                   values are f16-exact, so peft's f32 merge sees the
                   stored values)
  smol-rs4/        r=4, lora_alpha=8, use_rslora, on the same modules of
                   layers 1 and 2 (seed 2), F16
  smol-r8.gguf     smol-r8 as llama.cpp's convert_lora_to_gguf.py writes it
                   (gguf-py): general.type adapter, adapter.type lora,
                   adapter.lora.alpha 16, "<gguf name>.lora_a" (r, n_in) and
                   ".lora_b" (n_out, r) F16, B's rows of attn_q/attn_k in
                   the GGUF row order (convert_hf_to_gguf's llama permute)
  bad-*/           broken adapters for the error tests (DoRA, a wrong shape,
                   an unknown target, modules_to_save, a truncated file)
  goldens.gguf     peft's merge_and_unload (float32) of
                     case "a": smol-r8 alone,
                     case "b": smol-r8 + 0.5 * smol-rs4 (the deltas of the two
                               peft merges, the second times 0.5: peft's
                               scale for a loaded adapter is 1)
                   in GGUF names and row order: for every updated tensor and
                   case, "<case>.<name>.proj" = W' p (p = "probe.<n_in>",
                   uniform in [-1, 1), seed 3) over all rows, and
                   "<case>.<name>.rows" = rows 0, n_out/2 and n_out-1 of W';
                   plus "a.blk.5.attn_q.weight.proj" of an untouched tensor
  llamacpp.txt     llama.cpp's greedy continuation (llama-cpp-python, the
                   `ruvllm dequant --type f32` of the base with smol-r8.gguf
                   as lora_path, 24 tokens) of "The capital of France is"

Versions: peft 0.21.2, torch 2.15.0, transformers 5.23.0, gguf-py 0.19.0,
safetensors 0.8.0, numpy 2.4.6, llama-cpp-python 0.3.36.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

LAYERS_A = [0, 1, 14, 29]
LAYERS_B = [1, 2]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GGUF_OF = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
           "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
PARENT = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn",
          "o_proj": "self_attn", "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
PROMPT = "The capital of France is"


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute (rows of q/k)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def make_adapter(base, out, r, alpha, rslora, layers, seed):
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file, save_file
    cfg = LoraConfig(r=r, lora_alpha=alpha, use_rslora=rslora, target_modules=TARGETS,
                     layers_to_transform=layers, lora_dropout=0.0, bias="none",
                     task_type="CAUSAL_LM")
    m = get_peft_model(base, cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                v = torch.randn(p.shape, generator=g) * 0.05
                p.copy_(v.to(torch.float16).to(torch.float32))   # f16-exact
    m.save_pretrained(out)
    st = os.path.join(out, "adapter_model.safetensors")
    sd = load_file(st)
    save_file({k: v.to(torch.float16).contiguous() for k, v in sd.items()}, st,
              metadata={"format": "pt"})
    # the config as peft wrote it, without the local base path
    cj = os.path.join(out, "adapter_config.json")
    c = json.load(open(cj))
    c["base_model_name_or_path"] = "HuggingFaceTB/SmolLM2-135M-Instruct"
    json.dump(c, open(cj, "w"), indent=2, sort_keys=True)
    m.unload()   # the base model without the LoRA layers again


def merged_state(hf_dir, adapter):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    base = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    m = PeftModel.from_pretrained(base, adapter, dtype=torch.float32)
    m = m.merge_and_unload()
    return {k: v.detach().float().numpy() for k, v in m.state_dict().items()}


def gguf_name(hf):
    # model.layers.N.<parent>.<mod>.weight -> blk.N.<gguf>.weight
    parts = hf.split(".")
    return "blk.%s.%s.weight" % (parts[2], GGUF_OF[parts[4]])


def to_gguf_rows(name, w, cfg):
    if ".q_proj." in name:
        return permute(w, cfg["num_attention_heads"], cfg["num_attention_heads"])
    if ".k_proj." in name:
        return permute(w, cfg["num_attention_heads"], cfg["num_key_value_heads"])
    return w


def write_gguf_adapter(src_dir, path, cfg):
    import gguf
    from safetensors.numpy import load_file
    c = json.load(open(os.path.join(src_dir, "adapter_config.json")))
    sd = load_file(os.path.join(src_dir, "adapter_model.safetensors"))
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(c["lora_alpha"]))
    for k in sorted(sd):
        if ".lora_B." in k:
            continue
        hf = k.replace("base_model.model.", "").replace(".lora_A.weight", ".weight")
        a = sd[k]
        b = sd[k.replace(".lora_A.", ".lora_B.")]
        b = to_gguf_rows(hf, b, cfg)
        n = gguf_name(hf)
        w.add_tensor(n + ".lora_a", np.ascontiguousarray(a))
        w.add_tensor(n + ".lora_b", np.ascontiguousarray(b))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_bad(out, good):
    from safetensors.torch import load_file, save_file
    sd = load_file(os.path.join(good, "adapter_model.safetensors"))
    cfg = json.load(open(os.path.join(good, "adapter_config.json")))
    q = "base_model.model.model.layers.0.self_attn.q_proj"

    def mk(name, tensors, conf):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        save_file(tensors, os.path.join(d, "adapter_model.safetensors"), metadata={"format": "pt"})
        json.dump(conf, open(os.path.join(d, "adapter_config.json"), "w"), indent=2, sort_keys=True)

    one = {q + ".lora_A.weight": sd[q + ".lora_A.weight"], q + ".lora_B.weight": sd[q + ".lora_B.weight"]}
    mk("bad-dora", dict(one, **{q + ".lora_magnitude_vector": torch.ones(576, dtype=torch.float16)}),
       dict(cfg, use_dora=True))
    mk("bad-shape", {q + ".lora_A.weight": sd[q + ".lora_A.weight"][:, :500].contiguous(),
                     q + ".lora_B.weight": sd[q + ".lora_B.weight"]}, cfg)
    t = "base_model.model.model.layers.0.self_attn.qkv_proj"
    mk("bad-target", {t + ".lora_A.weight": sd[q + ".lora_A.weight"],
                      t + ".lora_B.weight": sd[q + ".lora_B.weight"]}, cfg)
    mk("bad-save", dict(one, **{"base_model.model.lm_head.modules_to_save.weight":
                                torch.zeros(4, 576, dtype=torch.float16)}), cfg)
    # a truncated safetensors file: the header promises more data than there is
    mk("bad-trunc", one, cfg)
    st = os.path.join(out, "bad-trunc", "adapter_model.safetensors")
    raw = open(st, "rb").read()
    open(st, "wb").write(raw[: len(raw) - 1000])


def main():
    ap = argparse.ArgumentParser()
    cache = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    ap.add_argument("--model", default=os.path.join(cache, "ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default="tests/data/lora")
    ap.add_argument("--ruvllm", default="build/ruvllm")
    a = ap.parse_args()
    torch.manual_seed(0)
    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="lora-ref.")
    try:
        hf = os.path.join(tmp, "hf")
        subprocess.run([a.ruvllm, "dequant", "-q", "--format", "safetensors", "--type", "f32",
                        a.model, hf], check=True)
        cfg = json.load(open(os.path.join(hf, "config.json")))
        from transformers import AutoModelForCausalLM
        base = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
        base_sd = {k: v.detach().float().numpy().copy() for k, v in base.state_dict().items()}
        ad_a = os.path.join(a.out, "smol-r8")
        ad_b = os.path.join(a.out, "smol-rs4")
        for d in (ad_a, ad_b):
            shutil.rmtree(d, ignore_errors=True)
        make_adapter(base, ad_a, 8, 16, False, LAYERS_A, 1)
        base = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
        make_adapter(base, ad_b, 4, 8, True, LAYERS_B, 2)
        for f in ("README.md",):
            for d in (ad_a, ad_b):
                if os.path.exists(os.path.join(d, f)):
                    os.remove(os.path.join(d, f))
        write_gguf_adapter(ad_a, os.path.join(a.out, "smol-r8.gguf"), cfg)
        write_bad(a.out, ad_a)

        ma = merged_state(hf, ad_a)
        mb = merged_state(hf, ad_b)
        import gguf
        g = gguf.GGUFWriter(os.path.join(a.out, "goldens.gguf"), arch="ruvllm-lora-goldens")
        rng = np.random.default_rng(3)
        probes = {}
        for n_in in (576, 1536):
            probes[n_in] = rng.uniform(-1, 1, n_in).astype(np.float32)
            g.add_tensor("probe.%d" % n_in, probes[n_in])
        n = 0
        for case, layers in (("a", LAYERS_A), ("b", sorted(set(LAYERS_A) | set(LAYERS_B)))):
            for l in layers:
                for t in TARGETS:
                    hfn = "model.layers.%d.%s.%s.weight" % (l, PARENT[t], t)
                    w0 = base_sd[hfn].astype(np.float64)
                    da = ma[hfn].astype(np.float64) - w0 if l in LAYERS_A else 0
                    if case == "a":
                        wm = w0 + da
                    else:
                        db = mb[hfn].astype(np.float64) - w0 if l in LAYERS_B else 0
                        wm = w0 + da + 0.5 * db
                    wm = to_gguf_rows(hfn, wm, cfg)
                    name = gguf_name(hfn)
                    proj = (wm @ probes[wm.shape[1]].astype(np.float64)).astype(np.float32)
                    rows = wm[[0, wm.shape[0] // 2, wm.shape[0] - 1]].astype(np.float32)
                    g.add_tensor("%s.%s.proj" % (case, name), proj)
                    g.add_tensor("%s.%s.rows" % (case, name), rows)
                    n += 1
        hfn = "model.layers.5.self_attn.q_proj.weight"
        w5 = to_gguf_rows(hfn, base_sd[hfn].astype(np.float64), cfg)
        g.add_tensor("a.blk.5.attn_q.weight.proj", (w5 @ probes[576].astype(np.float64)).astype(np.float32))
        g.write_header_to_file()
        g.write_kv_data_to_file()
        g.write_tensors_to_file()
        g.close()
        print("goldens: %d tensors" % n)

        try:
            from llama_cpp import Llama
            # the f32 form of the base: llama.cpp 0.3.36 crashes applying a
            # LoRA to the Q4_1 file on this CPU (AMX buffers)
            f32 = os.path.join(tmp, "base-f32.gguf")
            subprocess.run([a.ruvllm, "dequant", "-q", "--type", "f32", a.model, f32], check=True)
            llm = Llama(model_path=f32, lora_path=os.path.join(a.out, "smol-r8.gguf"),
                        n_ctx=256, n_threads=2, seed=0, verbose=False, use_extra_bufts=False)
            r = llm.create_completion(PROMPT, max_tokens=24, temperature=0.0, top_k=1)
            open(os.path.join(a.out, "llamacpp.txt"), "w").write(r["choices"][0]["text"])
            print("llama.cpp:", repr(r["choices"][0]["text"]))
        except Exception as e:  # optional check
            print("llama-cpp-python with lora_path failed:", e, file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
