#!/usr/bin/env python3
"""Check the Hugging Face import and export of the families of issues 18
and 19 (mixtures of experts: mixtral, qwen3moe, qwen2moe) against
transformers and llama.cpp.

    python3 tests/ref/check_convert_hf.py [--part transformers|llamacpp|both] [NAME...]

For each tiny model tests/data/tiny/hf/<name>/ (tests/ref/gen_tiny_hf.py
writes them, and llama.cpp's convert_hf_to_gguf.py output of each as
tests/data/tiny/<name>.gguf):
  transformers part (torch, transformers): `ruvllm quantize DIR OUT F32`
    imports the directory; `ruvllm dequant --format safetensors --type f32`
    exports that file again; transformers loads the exported directory
    (AutoModelForCausalLM, attn_implementation="eager") and its logits for
    every position of tests/data/tiny/tokens.txt are compared with the
    original directory's: max |a - b| / max |logit| must be <= 1e-6 (the
    same weights, bar Gemma's norm gains which return bit-exact as 1 + w);
    the exported tensors equal the original ones bit for bit except
    Gemma's RMSNorm gains (exported as fl(fl(1 + w) - 1)), whose largest
    difference is printed.
  <name>-nonorm (Qwen3-MoE with norm_topk_prob false, which llama.cpp's
    qwen3moe cannot compute): `ruvllm quantize` must refuse it, naming
    norm_topk_prob, in either part.
  llama.cpp part (llama-cpp-python): our import and the converter's file
    both load in llama.cpp; their logits over the same tokens agree within
    1e-4 of max |logit| (the files hold the same tensors and, but for the
    differences t0100-hf-import.sh lists, the same metadata).
Versions: torch 2.15.0, transformers 5.23.0 (in one venv), llama-cpp-python
0.3.36, numpy 2.4.6 (in another; run the parts separately where one venv has
not both). Exit status 1 on a failed check. Results: tests/ref/convert_hf.log.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "tests/data/tiny")


def names(a):
    if a.names:
        return a.names
    return sorted(os.listdir(os.path.join(TINY, "hf")))


def tokens():
    return [int(x) for x in open(os.path.join(TINY, "tokens.txt")).read().split()]


def rel(a, b):
    return float(max(np.abs(a[t] - b[t]).max() / np.abs(b[t]).max() for t in range(len(b))))


def refused(a, name, tmp):
    r = subprocess.run([a.ruvllm, "quantize", "-q", os.path.join(TINY, "hf", name),
                        os.path.join(tmp, "x.gguf"), "F32"], capture_output=True, text=True)
    ok = r.returncode == 1 and "norm_topk_prob" in r.stderr and not os.path.exists(os.path.join(tmp, "x.gguf"))
    print(f"{name}: refused: {r.stderr.strip()} -> {'ok' if ok else 'FAIL'}")
    return ok


def part_transformers(a, name, tmp):
    import torch
    import transformers
    from safetensors.numpy import load_file
    src = os.path.join(TINY, "hf", name)
    gg, hf = os.path.join(tmp, "ours.gguf"), os.path.join(tmp, "hf")
    subprocess.run([a.ruvllm, "quantize", "-q", src, gg, "F32"], check=True)
    subprocess.run([a.ruvllm, "dequant", "-q", "--format", "safetensors", "--type", "f32", gg, hf], check=True)
    x, y = load_file(os.path.join(src, "model.safetensors")), load_file(os.path.join(hf, "model.safetensors"))
    tied = "lm_head.weight" not in y
    diff, worst = [], 0.0
    for k, v in x.items():
        if tied and k == "lm_head.weight":
            continue
        if k not in y or y[k].shape != v.shape:
            diff.append(k)
        elif y[k].tobytes() != v.tobytes():
            if "norm" in k and "gemma" in name:
                worst = max(worst, float(np.abs(y[k] - v).max()))
            else:
                diff.append(k)
    ids = torch.tensor([tokens()])
    kw = dict(dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        l0 = transformers.AutoModelForCausalLM.from_pretrained(src, **kw)(ids).logits[0].numpy()
        m1 = transformers.AutoModelForCausalLM.from_pretrained(hf, **kw)
        l1 = m1(ids).logits[0].numpy()
    r = rel(l1, l0)
    ok = r <= 1e-6 and not diff
    print(f"{name}: exported as {type(m1).__name__}: {len(y)} tensors, not bit-identical {diff}"
          f"{f' (Gemma norm gains within {worst:.1e})' if worst else ''}; transformers logits on the "
          f"export vs the original: max rel. {r:.1e} -> {'ok' if ok else 'FAIL'}")
    return ok


def part_llamacpp(a, name, tmp):
    import llama_cpp
    src = os.path.join(TINY, "hf", name)
    gg = os.path.join(tmp, "ours.gguf")
    subprocess.run([a.ruvllm, "quantize", "-q", src, gg, "F32"], check=True)
    ids = tokens()
    out = []
    for path in [os.path.join(TINY, name + ".gguf"), gg]:
        ll = llama_cpp.Llama(model_path=path, n_ctx=128, verbose=False, logits_all=True, n_threads=2)
        ll.eval(ids)
        out.append(np.array(ll.scores[: len(ids)], dtype=np.float32))
        del ll
    r = rel(out[1], out[0])
    ok = r <= 1e-4
    print(f"{name}: llama.cpp on our import vs on the converter's file: max rel. {r:.1e} -> {'ok' if ok else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", default="both", choices=["transformers", "llamacpp", "both"])
    ap.add_argument("--ruvllm", default=os.path.join(ROOT, "build/ruvllm"))
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    bad = 0
    for name in names(a):
        for part, fn in [("transformers", part_transformers), ("llamacpp", part_llamacpp)]:
            if a.part in (part, "both"):
                with tempfile.TemporaryDirectory() as tmp:
                    bad += not (refused if name.endswith("-nonorm") else fn)(a, name, tmp)
    print("OK" if not bad else f"{bad} failed checks")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
