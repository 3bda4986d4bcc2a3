#!/usr/bin/env python3
"""Greedy-decoding goldens for `ruvllm run`, made with llama.cpp.

    python3 tests/ref/gen_llamacpp_goldens.py [--set NAME] [--check] [--model FILE] [-n N]
    python3 tests/ref/gen_llamacpp_goldens.py --set gemma3 --self-agreement

--set names a model and its goldens (SETS below): smollm2 (the default
model, tests/ref/llamacpp/, 64 tokens, n_ctx 2048; what the text below
describes) or gemma3 (Gemma 3 270M Q4_K_M, tests/ref/gemma3/, 32 tokens,
n_ctx 512, BOS in front as its add_bos_token says, GEMMA3_PROMPTS).
--self-agreement also runs llama.cpp twice more on the same prompts, with
flash attention on and with flash attention and a q8_0 KV cache, and
writes self-agreement.tsv: per variant, how many continuations equal the
golden's token for token and, per prompt, the first step that differs
(-1: none). That is the bar for ruvllm (tests/cli/t0120-gemma3-run-llamacpp.sh):
agree with llama.cpp at least as often as llama.cpp agrees with itself
when it switches attention path.

llama.cpp comes from PyPI (llama-cpp-python, which builds the llama.cpp it
vendors). For each prompt in PROMPTS below this tokenizes the prompt with
llama.cpp (no BOS: the default model's add_bos_token is false; special
tokens parsed only for prompts marked so; BOS only when the model's
add_bos_token says so), evaluates it, then decodes
greedily: at each step the argmax of the last position's logits is the
next token, and the margin between the two largest logits is recorded.
Generation stops after N tokens (64) or at an end-of-generation token
(which is recorded, like `ruvllm run --json` does).

It writes, under tests/ref/llamacpp/:

  prompts/<id>.txt  the prompt's exact bytes (the CLI test passes them with
                    `ruvllm run -f`, so no shell quoting is involved)
  greedy.tsv        one line per prompt, tab-separated:
                      id, special (1: parse special tokens, `--special`),
                      prompt as a JSON string (for reading only),
                      prompt token ids, generated token ids,
                      per-step top-2 logit margin (%.4f),
                      per-step second-best token id,
                      first step with margin < TIE (-1: none)
                    lists are space-separated; '#' lines are comments
                    (the versions used come first).

Checked in `make check` (no Python) by tests/cli/t0030-run-llamacpp.sh
(`ruvllm run --tokenize` gives the prompt ids; `ruvllm run --temp 0 -n 64`
gives the tokens, or first differs at a step whose margin is below a
tolerance) and tests/test_forward_llamacpp.c (teacher forcing: llama.cpp's
tokens are fed back, and at every step whose margin is at least the
tolerance our argmax must be llama.cpp's token). tests/ref/README.md says
why that tolerance is 0.5 rather than the 1e-3 (TIE) of an exact tie; the
first_tie column still records the first step under 1e-3.

--check regenerates in memory and compares with the committed greedy.tsv
(tokens exactly, margins to 2e-3); exit 1 on a difference. --kv-f32 runs
llama.cpp with an f32 KV cache instead of its default f16 (for the
measurements in the README; use with --out DIR, never over the goldens).
"""
import argparse
import json
import os
import platform
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "llamacpp"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TIE = 1e-3

# (id, parse special tokens, prompt). Varied on purpose: prose, chat
# markup, code, numbers, lists, accents, CJK, Cyrillic, emoji, whitespace.
PROMPTS = [
    ("en-capital", False, "The capital of France is"),
    ("en-story", False, "Once upon a time, in a small village by the sea, there lived"),
    ("en-history", False, "In 1969, Neil Armstrong became the first person to"),
    ("chatml", True, "<|im_start|>user\nWhat is the boiling point of water at sea level?<|im_end|>\n"
                     "<|im_start|>assistant\n"),
    ("py-fib", False, 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
    ("c-main", False, "#include <stdio.h>\n\nint main(void)\n{\n"),
    ("num-seq", False, "1, 2, 3, 5, 8, 13, 21,"),
    ("num-arith", False, "Question: What is 17 + 25?\nAnswer:"),
    ("list", False, "Shopping list:\n- eggs\n- milk\n-"),
    ("json", False, '{"name": "Alice", "age": 30, "city":'),
    ("fr-accents", False, "Le château de Versailles, près de Paris, est célèbre pour"),
    ("de-umlaut", False, "Die Straße führt über die Brücke zum Marktplatz, wo"),
    ("zh", False, "中国的首都是北京。北京是"),
    ("ru", False, "Москва — столица России. Это город"),
    ("emoji", False, "I love pizza 🍕 and ice cream 🍦 because"),
    ("whitespace", False, "    \n\n\t  x  =  1\n\n\n    y\t=\t2\n  \t"),
]


# Gemma 3 270M is a base model (no chat template in the file): the chat
# prompt is Gemma's turn markup, written out. No "whitespace" prompt: on
# this model its continuation is blank tokens at near ties.
GEMMA3_PROMPTS = [p for p in PROMPTS if p[0] not in ("chatml", "whitespace")] + [
    ("gemma-turn", True, "<start_of_turn>user\nWhat is the boiling point of water at sea level?"
                         "<end_of_turn>\n<start_of_turn>model\n"),
    ("ja", False, "日本の首都は東京です。東京は"),
]

SETS = {
    "smollm2": {"model": DEFAULT_MODEL_FILE, "out": OUT, "prompts": PROMPTS, "n": 64, "n_ctx": 2048},
    "gemma3": {"model": "gemma-3-270m-q4_k_m.gguf", "out": HERE / "gemma3", "prompts": GEMMA3_PROMPTS,
               "n": 32, "n_ctx": 512},
}

# llama.cpp run other ways, for its self-agreement (--self-agreement):
# name -> Llama() arguments. A quantized V cache needs flash attention.
GGML_TYPE_Q8_0 = 8
VARIANTS = [
    ("flash-attn", {"flash_attn": True}),
    ("q8_0-kv", {"flash_attn": True, "type_k": GGML_TYPE_Q8_0, "type_v": GGML_TYPE_Q8_0}),
]


def default_model(name=DEFAULT_MODEL_FILE):
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "ruvllm", "models", name)


def versions():
    import llama_cpp
    v = [f"python {platform.python_version()}",
         f"numpy {np.__version__}",
         f"llama-cpp-python {llama_cpp.__version__}"]
    # llama.cpp's own build number/commit is not exposed by the bindings
    # (llama-cpp-python pins one vendored commit per release); the shared
    # libraries' versions are.
    libdir = Path(llama_cpp.__file__).parent / "lib"
    libs = sorted(p.name for p in libdir.glob("lib*.so.*.*.*"))
    if libs:
        v.append("libraries " + " ".join(libs))
    try:
        info = llama_cpp.llama_print_system_info().decode().strip()
        v.append(f"llama.cpp system info: {info}")
    except Exception:  # noqa: BLE001 - informational only
        pass
    return v


def add_bos(llm):
    return bool(llm._model.add_bos_token()) if hasattr(llm._model, "add_bos_token") else False


def greedy(llm, prompt, special, n_max):
    """Prompt ids, generated ids, top-2 margins and second-best ids."""
    ids = llm.tokenize(prompt.encode("utf-8"), add_bos=add_bos(llm), special=special)
    llm.reset()
    llm.eval(ids)
    out, margins, seconds = [], [], []
    for _ in range(n_max):
        logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        order = np.argsort(-logits, kind="stable")
        top1, top2 = int(order[0]), int(order[1])
        out.append(top1)
        margins.append(float(logits[top1] - logits[top2]))
        seconds.append(top2)
        if llm.token_eos() == top1 or is_eog(llm, top1):
            break
        llm.eval([top1])
    return ids, out, margins, seconds


def is_eog(llm, tok):
    import llama_cpp
    try:
        return bool(llama_cpp.llama_vocab_is_eog(llama_cpp.llama_model_get_vocab(llm.model), tok))
    except AttributeError:
        return bool(llama_cpp.llama_token_is_eog(llm.model, tok))


def plain_cpu_backend():
    """Load weights into plain CPU buffers (llama_model_params.use_extra_bufts
    = false), which Llama() does not expose. The extra buffer types are
    repacked and AMX layouts; on this machine the AMX path (chosen when the
    wheel is built with -march=native on a CPU that reports AMX) crashes in
    ggml_backend_amx_mul_mat. The plain path is ggml's reference CPU path
    (quantized dot products against Q8 activations), the one ruvllm models."""
    import llama_cpp.llama_cpp as lc
    orig = lc.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    lc.llama_model_default_params = params


def make_lines(model, n_max, threads, kv_f32=False, prompts=PROMPTS, n_ctx=2048, extra=None):
    plain_cpu_backend()
    from llama_cpp import Llama
    kv = {"type_k": 0, "type_v": 0} if kv_f32 else {}  # GGML_TYPE_F32
    kv.update(extra or {})
    llm = Llama(model_path=model, n_ctx=n_ctx, n_batch=512, logits_all=True,
                n_threads=threads, n_threads_batch=threads, verbose=False, **kv)
    rows = []
    for pid, special, text in prompts:
        ids, out, margins, seconds = greedy(llm, text, special, n_max)
        first_tie = next((i for i, m in enumerate(margins) if m < TIE), -1)
        rows.append((pid, special, text, ids, out, margins, seconds, first_tie))
        print(f"{pid}: {len(ids)} prompt tokens, {len(out)} generated, "
              f"min margin {min(margins):.4f}, first tie {first_tie}", file=sys.stderr)
    return rows


def fmt(row):
    pid, special, text, ids, out, margins, seconds, first_tie = row
    sp = lambda xs: " ".join(str(x) for x in xs)  # noqa: E731
    return "\t".join([pid, "1" if special else "0", json.dumps(text, ensure_ascii=False),
                      sp(ids), sp(out), " ".join(f"{m:.4f}" for m in margins), sp(seconds),
                      str(first_tie)])


def parse(path):
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        f = line.split("\t")
        rows[f[0]] = f
    return rows


def first_diff(a, b):
    """The first step where two token lists differ (-1: equal)."""
    for i in range(max(len(a), len(b))):
        if i >= len(a) or i >= len(b) or a[i] != b[i]:
            return i
    return -1


def self_agreement(a, st, rows):
    """llama.cpp against itself: each VARIANTS run's continuations against
    the golden rows (f16 KV, no flash attention)."""
    lines = ["# llama.cpp's greedy continuations of " + os.path.basename(a.model)
             + " run other ways, against greedy.tsv; made by tests/ref/gen_llamacpp_goldens.py"
             + f" --set {a.set} --self-agreement",
             "# variant\tequal (continuations equal token for token)\tprompts"
             "\tfirst differing step per prompt (-1: none), in greedy.tsv's order"]
    for name, extra in VARIANTS:
        other = make_lines(a.model, a.n, a.threads, prompts=st["prompts"], n_ctx=st["n_ctx"], extra=extra)
        firsts = [first_diff(r[4], o[4]) for r, o in zip(rows, other)]
        equal = sum(1 for f in firsts if f < 0)
        print(f"{name}: {equal} of {len(rows)} equal; first differences {firsts}", file=sys.stderr)
        lines.append("\t".join([name, str(equal), str(len(rows)), " ".join(str(f) for f in firsts)]))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", default="smollm2", choices=sorted(SETS), help="model and goldens")
    ap.add_argument("--model", help="model file (default: the set's, in the ruvllm cache)")
    ap.add_argument("-n", type=int, help="tokens to generate per prompt (default: the set's)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--check", action="store_true", help="compare with the committed goldens")
    ap.add_argument("--kv-f32", action="store_true", help="f32 KV cache in llama.cpp (default f16)")
    ap.add_argument("--self-agreement", action="store_true",
                    help="also run llama.cpp with flash attention and a q8_0 KV cache; write self-agreement.tsv")
    ap.add_argument("--out", type=Path, help="output directory (default: the set's, tests/ref/llamacpp for smollm2)")
    a = ap.parse_args()
    st = SETS[a.set]
    a.model = a.model or default_model(st["model"])
    a.n = a.n or st["n"]
    a.out = a.out or st["out"]
    if a.kv_f32 and a.out == st["out"] and not a.check:
        ap.error("--kv-f32 writes measurements, not the goldens: give --out DIR")

    rows = make_lines(a.model, a.n, a.threads, a.kv_f32, prompts=st["prompts"], n_ctx=st["n_ctx"])
    header = ["# greedy continuations by llama.cpp of " + os.path.basename(a.model)
              + f", up to {a.n} tokens; made by tests/ref/gen_llamacpp_goldens.py"
              + ("" if a.set == "smollm2" else f" --set {a.set}")]
    header += ["# " + v for v in versions()]
    header.append(f"# llama.cpp context: n_ctx {st['n_ctx']}, n_batch 512, KV cache "
                  + ("f32" if a.kv_f32 else "f16 (default)")
                  + ", no flash attention, weights in plain CPU buffers (no repack/AMX)")
    header.append("# id\tspecial\tprompt\tprompt_ids\ttokens\tmargins\tsecond_ids\tfirst_tie")
    lines = [fmt(r) for r in rows]

    if a.check:
        old = parse(a.out / "greedy.tsv")
        bad = 0
        for r in rows:
            f = fmt(r).split("\t")
            o = old.get(f[0])
            if o is None:
                print(f"{f[0]}: not in the committed goldens"); bad += 1; continue
            same = o[:5] == f[:5] and o[7] == f[7] and all(
                abs(float(x) - float(y)) <= 2e-3 for x, y in zip(o[5].split(), f[5].split()))
            if not same:
                print(f"{f[0]}: differs"); bad += 1
        print(f"{len(rows) - bad} same, {bad} different")
        return 1 if bad else 0

    (a.out / "prompts").mkdir(parents=True, exist_ok=True)
    for pid, _, text in st["prompts"]:
        (a.out / "prompts" / f"{pid}.txt").write_bytes(text.encode("utf-8"))
    (a.out / "greedy.tsv").write_text("\n".join(header + lines) + "\n", encoding="utf-8")
    if a.self_agreement:
        (a.out / "self-agreement.tsv").write_text("\n".join(self_agreement(a, st, rows)) + "\n",
                                                 encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
