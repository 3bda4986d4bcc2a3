#!/usr/bin/env python3
"""Check `ruvllm dequant` against gguf-py and llama.cpp.

    python3 tests/ref/check_dequant.py [--model IN.gguf] [--type f32|f16|bf16]
    python3 tests/ref/check_dequant.py --no-llama --golden [--model IN.gguf]

Runs `build/ruvllm dequant IN OUT --type T` into a temporary directory and
checks, with gguf-py 0.19.0 (numpy):
  - every tensor of OUT has IN's name and shape; 1-D tensors are F32, the
    others T;
  - f32: OUT's data equals gguf.quants.dequantize of IN's tensor bit for
    bit; f16/bf16: equals that rounded by gguf.quants.quantize to T;
  - metadata: the same keys in the same order with the same values, except
    general.file_type (0, 1 or 32);
and that llama.cpp (llama-cpp-python 0.3.36) loads OUT and that greedy
generation of 16 tokens gives the same text from OUT in llama.cpp and in
`ruvllm run --temp 0`.  Exit status 1 on any difference.
Not run by `make check` (needs Python). --golden also writes, for each of
f32, f16 and bf16, tests/ref/dequant/smollm2-<type>.tsv: per tensor its
name, its output type and the first 16 hex digits of the SHA-256 of what
gguf-py makes of it (the values checked above), in file order, which
tests/cli/t0060-dequant.sh compares with `ruvllm dequant`'s output.
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                       "ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf")
FTYPE = {"f32": 0, "f16": 1, "bf16": 32}
QT = {"f32": T.F32, "f16": T.F16, "bf16": T.BF16}


def field_value(f):
    return [bytes(f.parts[i]) for i in f.data] if f.data else []



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
    ap.add_argument("--type", default="f32", choices=FTYPE)
    ap.add_argument("--ruvllm", default=os.path.join(ROOT, "build/ruvllm"))
    ap.add_argument("--no-llama", action="store_true", help="skip the llama.cpp checks")
    ap.add_argument("--golden", action="store_true",
                    help="check f32, f16 and bf16 and write tests/ref/dequant/smollm2-<type>.tsv")
    a = ap.parse_args()
    if a.golden:
        bad = 0
        for t in FTYPE:
            a.type = t
            bad += check(a, golden=os.path.join(ROOT, "tests/ref/dequant", f"smollm2-{t}.tsv"))
        return 1 if bad else 0
    return check(a)


def check(a, golden=None):
    bad = 0
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.gguf")
        subprocess.run([a.ruvllm, "dequant", "-q", "--type", a.type, a.model, out], check=True)
        ri, ro = gguf.GGUFReader(a.model), gguf.GGUFReader(out)
        ki, ko = list(ri.fields), list(ro.fields)
        strip = lambda ks: [k for k in ks if not k.startswith("GGUF.")]
        if strip(ki) != strip(ko):
            print("metadata keys differ"); bad += 1
        for k in strip(ki):
            if k == "general.file_type":
                v = int(ro.fields[k].parts[-1][0])
                if v != FTYPE[a.type]:
                    print(f"general.file_type {v}, wanted {FTYPE[a.type]}"); bad += 1
                continue
            fi, fo = ri.fields[k], ro.fields.get(k)
            if fo is None or fi.types != fo.types or field_value(fi) != field_value(fo):
                print(f"metadata {k} differs"); bad += 1
        if len(ri.tensors) != len(ro.tensors):
            print("tensor count differs"); bad += 1
        n_ok = 0
        for ti, to in zip(ri.tensors, ro.tensors):
            want_t = T.F32 if len(ti.shape) <= 1 else QT[a.type]
            if ti.name != to.name or list(ti.shape) != list(to.shape) or to.tensor_type != want_t:
                print(f"{ti.name}: header differs ({to.name} {list(to.shape)} {to.tensor_type.name})")
                bad += 1
                continue
            ref = gguf.quants.dequantize(ti.data, ti.tensor_type).astype(np.float32)
            if want_t != T.F32:
                ref = gguf.quants.quantize(ref, want_t)
            got = np.asarray(to.data)
            lines.append(f"{ti.name}\t{want_t.name}\t{hashlib.sha256(ref.tobytes()).hexdigest()[:16]}\n")
            if ref.tobytes() != got.tobytes():
                print(f"{ti.name}: data differs from gguf-py ({ti.tensor_type.name} -> {want_t.name})")
                bad += 1
            else:
                n_ok += 1
        print(f"{n_ok}/{len(ri.tensors)} tensors equal gguf-py's dequantize ({a.type})")
        if golden:
            os.makedirs(os.path.dirname(golden), exist_ok=True)
            with open(golden, "w") as g:
                g.writelines(lines)
            print(f"wrote {golden}")
        if not a.no_llama:
            bad += check_llama(a, out)
    print("OK" if not bad else f"{bad} differences")
    return 1 if bad else 0


def check_llama(a, path):
    plain_cpu_backend()
    import llama_cpp
    prompt = "The capital of France is"
    m = llama_cpp.Llama(model_path=path, n_ctx=256, verbose=False, use_extra_bufts=False,
                        n_threads=2, seed=0)
    r = m.create_completion(prompt, max_tokens=16, temperature=0.0, top_k=1)
    ref = r["choices"][0]["text"]
    got = subprocess.run([a.ruvllm, "run", "-m", path, "--temp", "0", "-n", "16", "-t", "2", prompt],
                         check=True, capture_output=True, text=True).stdout
    print(f"llama.cpp loads it: {ref!r}")
    print(f"ruvllm run:         {got!r}")
    if ref != got:
        print("greedy outputs differ"); return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
