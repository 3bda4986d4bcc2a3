#!/usr/bin/env python3
"""Side-by-side speed of ruvllm and llama.cpp on the same machine, same
model file, same threads, in the same run: llama.cpp's own llama-bench and
`ruvllm bench model` take turns, test by test, round by round, so both see
the same machine state.

llama-bench is built natively from the llama.cpp that the llama-cpp-python
0.3.36 sdist vendors (scripts/build-llama-bench.sh: -DGGML_NATIVE=ON and
llama.cpp's defaults otherwise, its CPU repack path on; into a cache
directory, about 6 minutes on 2 cores the first time). Both programs measure
the same tests: pp = one batch of N prompt tokens from an empty cache, tg =
N single-token decodes from an empty cache, after one warm-up run; each
reports every repetition (samples_ts). Here each (model, threads, test) runs
`--rounds` times in each program, alternating, with `-r` repetitions per
run; the figure printed is the median of all the repetitions, beside the
ratio ruvllm / llama.cpp (> 1: ruvllm faster).

usage: scripts/bench-vs-llamacpp.py [--model M]... [--threads 1,2] [-p 512] [-n 128]
                                    [--rounds 2] [-r 3] [--llama-bench PATH]
                                    [--llama-args "-fa off"] [--ruvllm-args "--kv-type f16"]
       scripts/bench-vs-llamacpp.py --suite [--threads 1,2] [--rounds 2] [-r 3]
       (defaults: the default model; a JSON copy of every run with --json FILE)

--suite runs the speed issue's table on files it makes when they are not
there yet (in ${XDG_CACHE_HOME:-~/.cache}/ruvllm/bench; about 10 GB):
SmolLM2-135M in Q4_0, Q4_K_M and Q8_0 (`ruvllm quantize` of the f16 that
`ruvllm dequant` makes of the default model: both programs read the same
file, so where its weights came from does not matter for speed) at pp512
and tg128, and a synthetic Llama-2-7B in Q4_0 (scripts/make-synthetic-
gguf.py, with numpy and gguf-py 0.19.0 from PyPI in a venv of its own
beside the files) and Q4_K_M (`ruvllm quantize --allow-requantize` of the
Q4_0) at pp128 and tg32 (a 7B at 512 tokens on one core takes minutes per
repetition).
"""
import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def llama_bench_path(given):
    if given:
        return given
    out = subprocess.run(["sh", os.path.join(ROOT, "scripts", "build-llama-bench.sh")],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return out.strip().splitlines()[-1]


def run_json(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"bench-vs-llamacpp: {' '.join(map(shlex.quote, cmd))} failed ({p.returncode}):\n"
                 + p.stderr[-2000:])
    return json.loads(p.stdout)


def one(prog, exe, model, threads, n_prompt, n_gen, reps, extra):
    """Samples (t/s, one per repetition) of one test by one program, and its JSON row."""
    if prog == "llama.cpp":
        cmd = [exe, "-m", model, "-t", str(threads), "-p", str(n_prompt), "-n", str(n_gen),
               "-r", str(reps), "-o", "json"] + extra
    else:
        cmd = [exe, "bench", "model", "-m", model, "-t", str(threads), "-p", str(n_prompt),
               "-n", str(n_gen), "-r", str(reps), "-o", "json"] + extra
    rows = run_json(cmd)
    if len(rows) != 1:
        sys.exit(f"bench-vs-llamacpp: {prog} gave {len(rows)} results for one test")
    return [float(x) for x in rows[0]["samples_ts"]], rows[0]


def sh(cmd, **kw):
    print("bench-vs-llamacpp: " + " ".join(map(shlex.quote, cmd)), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, **kw)


def suite_files(ruvllm, cache):
    """The issue's five files, made when missing: [(path, n_prompt, n_gen)]."""
    d = os.path.join(cache, "ruvllm", "bench")
    os.makedirs(d, exist_ok=True)
    default = os.path.join(cache, "ruvllm", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.isfile(default):
        sh(["sh", os.path.join(ROOT, "scripts", "fetch-model.sh")])
    f16 = os.path.join(d, "smollm2-135m-f16.gguf")
    if not os.path.isfile(f16):
        sh([ruvllm, "dequant", "-q", "--type", "f16", default, f16])
    out = []
    for q in ("Q4_0", "Q4_K_M", "Q8_0"):
        f = os.path.join(d, f"smollm2-135m-{q}.gguf")
        if not os.path.isfile(f):
            sh([ruvllm, "quantize", "-q", f16, f, q])
        out.append((f, 512, 128))
    q40 = os.path.join(d, "llama-7b-q4_0.gguf")
    if not os.path.isfile(q40):
        venv = os.path.join(d, "venv")
        py = os.path.join(venv, "bin", "python")
        if not os.path.isfile(py):
            sh([sys.executable, "-m", "venv", venv])
            sh([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                "numpy", "gguf==0.19.0"])
        sh([py, os.path.join(ROOT, "scripts", "make-synthetic-gguf.py"), "--shape", "llama-7b",
            "--type", "Q4_0", "--vocab-from", default, q40 + ".part"])
        os.replace(q40 + ".part", q40)
    q4km = os.path.join(d, "llama-7b-q4_k_m.gguf")
    if not os.path.isfile(q4km):
        sh([ruvllm, "quantize", "-q", "--allow-requantize", q40, q4km, "Q4_K_M"])
    out += [(q40, 128, 32), (q4km, 128, 32)]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    ap.add_argument("--model", action="append",
                    help="model file (repeatable; default: the default model in the cache)")
    ap.add_argument("--ruvllm", default=os.path.join(ROOT, "build", "ruvllm"))
    ap.add_argument("--llama-bench", help="llama-bench binary (default: scripts/build-llama-bench.sh's)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("-p", type=int, default=512, help="prompt tokens of the pp test (0: none)")
    ap.add_argument("-n", type=int, default=128, help="generated tokens of the tg test (0: none)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating runs of each test per program")
    ap.add_argument("-r", type=int, default=3, help="repetitions per run")
    ap.add_argument("--llama-args", default="", help="extra llama-bench arguments")
    ap.add_argument("--ruvllm-args", default="", help="extra `ruvllm bench model` arguments")
    ap.add_argument("--json", help="write every run's JSON rows here")
    ap.add_argument("--suite", action="store_true",
                    help="the speed issue's five files (made when missing) and test sizes")
    a = ap.parse_args()
    if a.suite and a.model:
        sys.exit("bench-vs-llamacpp: --suite chooses its own models")
    if a.suite:
        plan = suite_files(a.ruvllm, cache)
    else:
        models = a.model or [os.path.join(cache, "ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf")]
        for m in models:
            if not os.path.isfile(m):
                sys.exit(f"bench-vs-llamacpp: no model at {m} (make model)")
        plan = [(m, a.p, a.n) for m in models]
    lb = llama_bench_path(a.llama_bench)
    exes = {"llama.cpp": lb, "ruvllm": a.ruvllm}
    extras = {"llama.cpp": shlex.split(a.llama_args), "ruvllm": shlex.split(a.ruvllm_args)}
    threads = [int(x) for x in a.threads.split(",")]

    log = []
    first = {}
    print(f"<!-- {platform.node()} ({platform.machine()}), llama-bench {lb} {a.llama_args}, "
          f"{a.ruvllm} {a.ruvllm_args}; {a.rounds} rounds x {a.r} repetitions, alternating; medians -->")
    print("| model | threads | test | llama.cpp t/s | ruvllm t/s | ruvllm / llama.cpp |")
    print("|---|---:|---|---:|---:|---:|")
    for m, p_n, g_n in plan:
        tests = [(f"pp{p_n}", p_n, 0)] if p_n else []
        tests += [(f"tg{g_n}", 0, g_n)] if g_n else []
        for t in threads:
            for name, n_p, n_g in tests:
                samples = {"llama.cpp": [], "ruvllm": []}
                for rnd in range(a.rounds):
                    # alternate which program goes first, round by round
                    order = ["llama.cpp", "ruvllm"] if rnd % 2 == 0 else ["ruvllm", "llama.cpp"]
                    for prog in order:
                        s, row = one(prog, exes[prog], m, t, n_p, n_g, a.r, extras[prog])
                        samples[prog] += s
                        first.setdefault(prog, row)
                        log.append({"program": prog, "model": m, "threads": t, "test": name,
                                    "round": rnd + 1, "row": row})
                ref = statistics.median(samples["llama.cpp"])
                ours = statistics.median(samples["ruvllm"])
                print(f"| {os.path.basename(m)} | {t} | {name} | {ref:.1f} | {ours:.1f} | {ours / ref:.2f} |",
                      flush=True)
    lrow = first.get("llama.cpp", {})
    rrow = first.get("ruvllm", {})
    try:
        rv = subprocess.run([a.ruvllm, "--version"], stdout=subprocess.PIPE, text=True).stdout.split("\n")[0]
    except OSError:
        rv = "?"
    print(f"<!-- llama.cpp build {lrow.get('build_commit')} ({lrow.get('build_number')}); {rv}; "
          f"{rrow.get('cpu_info', lrow.get('cpu_info'))} -->")
    print(f"<!-- llama-bench: flash_attn {lrow.get('flash_attn')}, repack {lrow.get('repack')}, "
          f"KV {lrow.get('type_k')}/{lrow.get('type_v')}, n_batch {lrow.get('n_batch')}, "
          f"n_ubatch {lrow.get('n_ubatch')}, cpu {lrow.get('cpu_info')}; "
          f"ruvllm: isa {first.get('ruvllm', {}).get('isa')} -->")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(log, f, indent=1)


if __name__ == "__main__":
    main()
