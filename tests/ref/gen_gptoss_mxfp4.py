#!/usr/bin/env python3
"""A tiny gpt-oss checkpoint with MXFP4 experts, as openai/gpt-oss-20b stores
them, and llama.cpp's converter's GGUF of it.

openai/gpt-oss-* keep each layer's experts as
  model.layers.N.mlp.experts.gate_up_proj_blocks  uint8 [E, 2 ff, dim / 32, 16]
  model.layers.N.mlp.experts.gate_up_proj_scales  uint8 [E, 2 ff, dim / 32]
  model.layers.N.mlp.experts.down_proj_blocks     uint8 [E, dim, ff / 32, 16]
  model.layers.N.mlp.experts.down_proj_scales     uint8 [E, dim, ff / 32]
(rows the outputs; gate and up interleaved along 2 ff, gate the even rows;
a block's byte j holds elements 2j (low nibble) and 2j + 1 (high) as E2M1
codes, the scale an E8M0 exponent) and config.json says
quantization_config.quant_method "mxfp4". No such checkpoint is small
enough to commit, so this one is made from the tiny f32 gpt-oss of
gen_tiny_hf.py (tests/data/tiny/hf/gpt-oss): its experts quantized to MXFP4
in that layout (the scale llama.cpp's quantizer picks, floor(log2 amax) - 2,
each element the nearest E2M1 value), everything else as it is. The GGUF is
convert_hf_to_gguf.py's, --outtype f32 (the experts stay MXFP4, the file
type becomes MOSTLY_MXFP4_MOE), through gen_tiny_hf.py's PRE_SHIM.

  /tmp/venv18/bin/python tests/ref/gen_gptoss_mxfp4.py

Made with torch 2.15.0, numpy 2.4.6, safetensors from /tmp/venv18 and the
converter of the llama-cpp-python 0.3.36 sdist (gen_tiny_hf.py's
CONVERTER_DEFAULT; LLAMACPP_DIR overrides).
"""
import json
import os
import shutil
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_tiny_hf  # noqa: E402  (its converter runner)

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def mxfp4(w):
    """w [..., rows, cols] (cols a multiple of 32) -> blocks [..., rows, cols/32, 16], scales."""
    b = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32).astype(np.float32)
    amax = np.abs(b).max(axis=-1)
    e = np.where(amax > 0, np.floor(np.log2(np.maximum(amax, 1e-30))) - 2 + 127, 0).astype(np.int32)
    e = np.clip(e, 0, 254)
    d = np.ldexp(np.float32(1), e - 127).astype(np.float32)
    x = b / d[..., None]
    codes = np.abs(x[..., None] - E2M1).argmin(axis=-1).astype(np.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return blocks.astype(np.uint8), e.astype(np.uint8)


def main():
    src = os.path.join(HERE, "..", "data", "tiny", "hf", "gpt-oss")
    dst = os.path.join(HERE, "..", "data", "tiny", "hf", "gpt-oss-mxfp4")
    out = os.path.join(HERE, "..", "data", "tiny", "gpt-oss-mxfp4.gguf")
    os.makedirs(dst, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), dst)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
        "quant_method": "mxfp4"}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    t = load_file(os.path.join(src, "model.safetensors"))
    o = {}
    for k, v in t.items():
        if k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
            # x @ W [E, in, out] -> rows the outputs [E, out, in]
            blocks, scales = mxfp4(np.ascontiguousarray(np.swapaxes(v, -1, -2)))
            o[k + "_blocks"] = blocks
            o[k + "_scales"] = scales
        else:
            o[k] = v
    save_file(o, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    gen_tiny_hf.convert(dst, out, pre=gen_tiny_hf.BPE_PRE["gptoss"])
    print("wrote", dst, "and", out)


if __name__ == "__main__":
    main()
