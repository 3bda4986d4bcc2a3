#!/usr/bin/env python3
"""Check `ruvllm dequant --format safetensors` with transformers.

    python3 tests/ref/check_dequant_hf.py [--model IN.gguf] [--type f32|f16|bf16]

Writes the Hugging Face directory of IN with `build/ruvllm dequant
--format safetensors --type T` and the GGUF file of the same weights with
`ruvllm dequant --type f32`, then:
  - transformers (AutoTokenizer, AutoModelForCausalLM) loads the directory;
  - its tokenizer gives llama.cpp's token ids (llama-cpp-python on the GGUF)
    for a few prompts, and its chat template renders;
  - its logits for every position of a prompt agree with llama.cpp's on
    the GGUF file (the same weights): max |difference| / max |logit|
    reported, below 1e-3 with f32;
  - greedy generation (16 tokens) gives the same text as `ruvllm run
    --temp 0` on the GGUF file.
With --tiny, instead, each tiny model of tests/data/tiny/ (llama, tied,
linear and YaRN RoPE scaling, qwen2 with Q/K/V biases, qwen3 with
QK-norm; the converter's mixtures of experts mixtral, qwen3moe and qwen2moe,
whose stacked experts go back to one matrix each; f32) goes to a
Hugging Face directory whose transformers logits must equal the committed
ones (tests/ref/gen_tiny_hf.py) within 1e-5 of max |logit|, and back through
`ruvllm quantize DIR OUT F32` to a GGUF whose tensors equal the original's
byte for byte (llama3's rope_freqs has no Hugging Face form here: refused).
With --spm: tiny llama models carrying the vocabularies of
$RVL_SHARED_DATA/tokenizers/ggml-vocab-{llama-spm,gpt-2,starcoder,mpt}.gguf
(written here with gguf-py) go to Hugging Face directories; Hugging Face
tokenizers on their tokenizer.json (for SentencePiece, merges derived from
the scores) must give llama.cpp's ids for every test string of the
vocabulary's .inp/.out, and the
directory imported back (`ruvllm quantize DIR OUT F16`) must have the same
tokens and token types and give the same ids in `ruvllm run --tokenize`.
Versions: torch 2.15.0, transformers 5.23.0, tokenizers 0.23.3,
llama-cpp-python 0.3.36, numpy 2.4.6. Exit status 1 on a failed check.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                       "ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPTS = ["The capital of France is", "def fib(n):\n    return", "Numbers 12345 and x=3.14!",
           "  spaces\tand\nnewlines  "]



def plain_cpu_backend():
    """llama.cpp's AMX/repacked buffer path crashes on this machine with
    quantized weights (the Llama(use_extra_bufts=False) keyword does not
    reach it): patch the default model parameters, as ppl_llamacpp.py does."""
    import llama_cpp.llama_cpp as lc
    orig = lc.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    lc.llama_model_default_params = params

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT)
    ap.add_argument("--type", default="f32", choices=["f32", "f16", "bf16"])
    ap.add_argument("--ruvllm", default=os.path.join(ROOT, "build/ruvllm"))
    ap.add_argument("--tiny", action="store_true", help="check the tiny models of tests/data/tiny")
    ap.add_argument("--spm", action="store_true", help="check shared test vocabularies both ways")
    ap.add_argument("--vocabs", default="llama-spm,gpt-2,starcoder,mpt")
    a = ap.parse_args()
    if a.tiny:
        return check_tiny(a)
    if a.spm:
        return check_spm(a)
    import torch
    import transformers
    plain_cpu_backend()
    import llama_cpp
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        hf, gg = os.path.join(tmp, "hf"), os.path.join(tmp, "f32.gguf")
        subprocess.run([a.ruvllm, "dequant", "-q", "--format", "safetensors", "--type", a.type,
                        a.model, hf], check=True)
        subprocess.run([a.ruvllm, "dequant", "-q", "--type", "f32", a.model, gg], check=True)
        tok = transformers.AutoTokenizer.from_pretrained(hf)
        model = transformers.AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
        model.eval()
        ll = llama_cpp.Llama(model_path=gg, n_ctx=256, verbose=False, use_extra_bufts=False,
                             n_threads=2, logits_all=True)
        for p in PROMPTS:
            ids_hf = tok(p)["input_ids"]
            ids_ll = ll.tokenize(p.encode(), add_bos=ll.metadata.get("tokenizer.ggml.add_bos_token") == "true",
                                 special=False)
            if list(ids_hf) != list(ids_ll):
                print(f"tokens differ for {p!r}: {ids_hf} vs {ids_ll}"); bad += 1
        msgs = [{"role": "user", "content": "Hi"}]
        print("chat template:", repr(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)))

        p = PROMPTS[0]
        ids = tok(p)["input_ids"]
        with torch.no_grad():
            lh = model(torch.tensor([ids])).logits[0].float().numpy()
        ll.reset()
        ll.eval(ids)
        lc = np.array(ll.scores[: len(ids)], dtype=np.float32)
        rel = float(np.abs(lh - lc).max() / np.abs(lc).max())
        print(f"logits, {len(ids)} positions: max |transformers - llama.cpp| / max |logit| = {rel:.2e}")
        if a.type == "f32" and rel > 1e-3:
            bad += 1
        with torch.no_grad():
            g = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)
        text_hf = tok.decode(g[0][len(ids):], skip_special_tokens=True)
        text_rv = subprocess.run([a.ruvllm, "run", "-m", gg, "--temp", "0", "-n", "16", "-t", "2", p],
                                 check=True, capture_output=True, text=True).stdout
        print(f"transformers: {text_hf!r}\nruvllm run:   {text_rv!r}")
        if text_hf != text_rv:
            print("greedy texts differ"); bad += 1
    print("OK" if not bad else f"{bad} failed checks")
    return 1 if bad else 0


def check_spm(a):
    import gguf
    from tokenizers import Tokenizer
    shared = os.environ.get("RVL_SHARED_DATA", os.path.join(ROOT, "../shared/data"))
    fails = 0
    for name in a.vocabs.split(","):
        src = os.path.join(shared, f"tokenizers/ggml-vocab-{name}.gguf")
        print(f"{name}:")
        with tempfile.TemporaryDirectory() as tmp:
            fails += _check_spm(a.ruvllm, src, gguf.GGUFReader(src), tmp, gguf, Tokenizer)
    print("OK" if not fails else f"{fails} vocabularies failed")
    return 1 if fails else 0


def _check_spm(R, src, r, tmp, gguf, Tokenizer):
    path = os.path.join(tmp, "tiny-spm.gguf")
    w = gguf.GGUFWriter(path, "llama")
    toks = [bytes(r.fields["tokenizer.ggml.tokens"].parts[i]).decode() for i in r.fields["tokenizer.ggml.tokens"].data]
    types = [int(r.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in r.fields["tokenizer.ggml.token_type"].data]
    fs = r.fields
    sv = lambda k: bytes(fs[k].parts[fs[k].data[0]]).decode()
    iv = lambda k: int(fs[k].parts[fs[k].data[0]][0])
    model = sv("tokenizer.ggml.model")
    w.add_block_count(1); w.add_context_length(256); w.add_embedding_length(64); w.add_feed_forward_length(128)
    w.add_head_count(4); w.add_head_count_kv(4); w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model(model); w.add_tokenizer_pre(sv("tokenizer.ggml.pre") if "tokenizer.ggml.pre" in fs else "default")
    w.add_token_list(toks); w.add_token_types(types)
    if "tokenizer.ggml.scores" in fs:
        w.add_token_scores([float(fs["tokenizer.ggml.scores"].parts[i][0]) for i in fs["tokenizer.ggml.scores"].data])
    if "tokenizer.ggml.merges" in fs:
        w.add_token_merges([bytes(fs["tokenizer.ggml.merges"].parts[i]).decode() for i in fs["tokenizer.ggml.merges"].data])
    for k, f in [("bos", w.add_bos_token_id), ("eos", w.add_eos_token_id), ("unknown", w.add_unk_token_id)]:
        if f"tokenizer.ggml.{k}_token_id" in fs:
            f(iv(f"tokenizer.ggml.{k}_token_id"))
    for k, f in [("bos", w.add_add_bos_token), ("eos", w.add_add_eos_token)]:
        if f"tokenizer.ggml.add_{k}_token" in fs:
            f(bool(iv(f"tokenizer.ggml.add_{k}_token")))
    rng = np.random.default_rng(0)
    n = len(toks)
    w.add_tensor("token_embd.weight", (rng.standard_normal((n, 64))*0.02).astype(np.float16))
    w.add_tensor("output_norm.weight", np.ones(64, np.float32))
    w.add_tensor("output.weight", (rng.standard_normal((n, 64))*0.02).astype(np.float16))
    for nm, sh in [("attn_q",(64,64)),("attn_k",(64,64)),("attn_v",(64,64)),("attn_output",(64,64)),("ffn_gate",(128,64)),("ffn_up",(128,64)),("ffn_down",(64,128))]:
        w.add_tensor(f"blk.0.{nm}.weight", (rng.standard_normal(sh)*0.02).astype(np.float16))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(64, np.float32)); w.add_tensor("blk.0.ffn_norm.weight", np.ones(64, np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    hf = os.path.join(tmp, "hf")
    subprocess.run([R, "dequant", "-q", "--format", "safetensors", path, hf], check=True)
    t = Tokenizer.from_file(os.path.join(hf, "tokenizer.json"))
    inp = open(src + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    out = open(src + ".out").read().split("\n")
    fails = 0
    ok = 0
    for s, o in zip(inp, out):
        want = [int(x) for x in o.split()]
        got = t.encode(s, add_special_tokens=False).ids
        if got == want:
            ok += 1
        else:
            print("  differs:", repr(s[:40]), got[:12], want[:12])
    print(f"HF tokenizers on our tokenizer.json: {ok}/{len(inp)} test strings give llama.cpp's ids")
    fails += ok != len(inp)
    back = os.path.join(tmp, "back.gguf")
    subprocess.run([R, "quantize", "-q", hf, back, "F16"], check=True)
    ok = 0
    for s, o in zip(inp, out):
        got = subprocess.run([R, "run", "-m", back, "--tokenize", "--no-bos", "--", s],
                             check=True, capture_output=True, text=True).stdout.split()
        if got == o.split():
            ok += 1
        else:
            print("  differs:", repr(s[:40]), got[:12], o.split()[:12])
    print(f"ruvllm on the imported GGUF: {ok}/{len(inp)} test strings give llama.cpp's ids")
    fails += ok != len(inp)
    o = gguf.GGUFReader(back)
    f = o.fields
    same_toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode() for i in f["tokenizer.ggml.tokens"].data] == toks
    same_types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data] == types
    print(f"imported tokens equal: {same_toks}, token types equal: {same_types}")
    fails += (not same_toks) + (not same_types)
    return 1 if fails else 0


def check_tiny(a):
    import torch
    import transformers
    import gguf
    tiny = os.path.join(ROOT, "tests/data/tiny")
    ids = [int(x) for x in open(os.path.join(tiny, "tokens.txt")).read().split()]
    bad = 0
    # (qwen3moe-nonorm.gguf is not among them: the file means what llama.cpp
    # computes, renormalized, and exports as norm_topk_prob true, so its
    # transformers logits are qwen3moe's way, not the committed ones)
    for name in ["llama", "llama-tied", "llama-linear", "llama-yarn", "qwen2", "qwen3", "llama3",
                 "mixtral", "qwen3moe", "qwen2moe"]:
        src = os.path.join(tiny, name + ".gguf")
        with tempfile.TemporaryDirectory() as tmp:
            hf, back = os.path.join(tmp, "hf"), os.path.join(tmp, "back.gguf")
            r = subprocess.run([a.ruvllm, "dequant", "-q", "--format", "safetensors", "--type", "f32",
                                src, hf], capture_output=True, text=True)
            if name == "llama3":
                ok = r.returncode == 1 and "rope_freqs" in r.stderr
                print(f"{name}: refused as expected: {ok} ({r.stderr.strip()})")
                bad += 0 if ok else 1
                continue
            if r.returncode:
                print(f"{name}: dequant failed: {r.stderr}"); bad += 1; continue
            model = transformers.AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32,
                                                                      attn_implementation="eager")
            with torch.no_grad():
                got = model(torch.tensor([ids])).logits[0].numpy()
            ref = np.fromfile(os.path.join(tiny, name + ".logits"), dtype="<f4").reshape(len(ids), -1)
            rel = float(max(np.abs(got[t] - ref[t]).max() / np.abs(ref[t]).max() for t in range(len(ids))))
            subprocess.run([a.ruvllm, "quantize", "-q", hf, back, "F32"], check=True)
            ta = {t.name: t for t in gguf.GGUFReader(src).tensors}
            tb = {t.name: t for t in gguf.GGUFReader(back).tensors}
            same = sum(1 for n in ta if n in tb and ta[n].tensor_type == tb[n].tensor_type
                       and bytes(ta[n].data) == bytes(tb[n].data))
            ok = rel < 1e-5 and same == len(ta) == len(tb)
            print(f"{name}: transformers logits rel. err {rel:.1e}; back to GGUF: {same}/{len(ta)} tensors identical")
            bad += 0 if ok else 1
    print("OK" if not bad else f"{bad} failed checks")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
