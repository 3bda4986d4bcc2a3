#!/usr/bin/env python3
"""The issue's round trip: SmolLM2 -> `ruvllm dequant` F16 -> `ruvllm
quantize` Q8_0, Q6_K, Q4_K_M, Q4_0; each file loads in llama.cpp
(llama-cpp-python 0.3.36) and in ruvllm, greedy generation of 24 tokens
gives the same text in both for a few prompts (a difference is reported
with the two texts: the implementations' logits differ by float rounding,
so a near-tie may go either way), and `ruvllm bench ppl` is within 0.5% of
llama.cpp's perplexity on the same windows (tests/ref/ppl_llamacpp.py).

    python3 tests/ref/check_quantize_roundtrip.py [--chunks 8] [--text FILE] [--types Q8_0,...]

Versions: llama-cpp-python 0.3.36, gguf 0.19.0, numpy 2.4.6. Exit 1 when a
perplexity is off by more than 0.5% or a file does not load.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                     "ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPTS = ["The capital of France is", "def fib(n):", "Once upon a time"]



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
    ap.add_argument("--ruvllm", default=os.path.join(ROOT, "build/ruvllm"))
    ap.add_argument("--text", default=os.path.join(ROOT, "../shared/data/text/wikitext-2-test.txt"))
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--types", default="Q8_0,Q6_K,Q4_K_M,Q4_0")
    a = ap.parse_args()
    plain_cpu_backend()
    import llama_cpp
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        f16 = os.path.join(tmp, "f16.gguf")
        subprocess.run([a.ruvllm, "dequant", "-q", "--type", "f16", MODEL, f16], check=True)
        for q in a.types.split(","):
            path = os.path.join(tmp, q + ".gguf")
            subprocess.run([a.ruvllm, "quantize", "-q", "-t", "2", f16, path, q], check=True)
            llm = llama_cpp.Llama(model_path=path, n_ctx=256, verbose=False, use_extra_bufts=False, n_threads=2)
            same = 0
            for p in PROMPTS:
                ref = llm.create_completion(p, max_tokens=24, temperature=0.0, top_k=1)["choices"][0]["text"]
                got = subprocess.run([a.ruvllm, "run", "-m", path, "--temp", "0", "-n", "24", "-t", "2", p],
                                     check=True, capture_output=True, text=True).stdout
                if ref == got:
                    same += 1
                else:
                    print(f"  {q} {p!r}: llama.cpp {ref!r} / ruvllm {got!r}")
            del llm
            lp = subprocess.run([sys.executable, os.path.join(ROOT, "tests/ref/ppl_llamacpp.py"), path, a.text,
                                 "512", str(a.chunks)], check=True, capture_output=True, text=True).stdout
            rp = subprocess.run([a.ruvllm, "bench", "ppl", "-m", path, "-f", a.text, "-c", "512",
                                 "--chunks", str(a.chunks), "-t", "2"], check=True, capture_output=True, text=True)
            lv = float(re.findall(r"PPL\s*=?\s*([0-9.]+)", lp)[-1])
            rv = float(re.findall(r"([0-9]+\.[0-9]+)\s*(?:\+/-|±)", rp.stdout + rp.stderr)[-1])
            d = 100 * (rv - lv) / lv
            print(f"{q}: greedy same text {same}/{len(PROMPTS)}; ppl ruvllm {rv:.4f}, llama.cpp {lv:.4f} ({d:+.2f}%)")
            if abs(d) > 0.5:
                bad += 1
    print("OK" if not bad else f"{bad} failed checks")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
