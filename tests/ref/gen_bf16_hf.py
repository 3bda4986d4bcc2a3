#!/usr/bin/env python3
"""BF16 copies of two tiny Hugging Face models and llama.cpp's converter's
GGUF of each, --outtype auto (what a user gets from a real BF16 checkpoint):
the matrices stay BF16, and what the converter keeps in F32 whatever the
checkpoint's dtype - 1-D tensors, norms, routers (ffn_gate_inp), every
tensor whose name does not end in .weight (gpt-oss's 2-D expert biases) -
is F32. tests/cli/t0100-hf-import.sh checks ruvllm's import against them.

    /tmp/venv18/bin/python tests/ref/gen_bf16_hf.py

From tests/data/tiny/hf/{gpt-oss,qwen2moe} (gen_tiny_hf.py), every float
tensor cast to bfloat16 by torch; written to tests/data/tiny/hf/<name>-bf16
and tests/data/tiny/<name>-bf16.gguf. Made with torch 2.15.0, safetensors
0.8.0 from /tmp/venv18 and the converter of the llama-cpp-python 0.3.36
sdist (gen_tiny_hf.py's CONVERTER_DEFAULT; LLAMACPP_DIR overrides), through
gen_tiny_hf.py's PRE_SHIM as for their f32 originals.
"""
import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_tiny_hf as g  # noqa: E402

MODELS = {"gpt-oss": g.BPE_PRE["gptoss"], "qwen2moe": g.BPE_PRE["qwen2moe"]}


def main():
    tiny = os.path.join(HERE, "..", "data", "tiny")
    for name, pre in MODELS.items():
        src, dst = os.path.join(tiny, "hf", name), os.path.join(tiny, "hf", name + "-bf16")
        os.makedirs(dst, exist_ok=True)
        for f in os.listdir(src):
            if f != "model.safetensors":
                shutil.copy(os.path.join(src, f), dst)
        t = load_file(os.path.join(src, "model.safetensors"))
        save_file({k: v.to(torch.bfloat16) for k, v in t.items()}, os.path.join(dst, "model.safetensors"),
                  metadata={"format": "pt"})
        root = os.environ.get("LLAMACPP_DIR", g.CONVERTER_DEFAULT)
        env = dict(os.environ, PYTHONPATH=os.path.join(root, "gguf-py"))
        out = os.path.join(tiny, name + "-bf16.gguf")
        cmd = [sys.executable, "-c", g.PRE_SHIM, root, pre, dst, "--outfile", out, "--outtype", "auto"]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
            raise SystemExit(f"convert_hf_to_gguf.py failed on {dst}")
        print("wrote", dst, "and", out)


if __name__ == "__main__":
    main()
