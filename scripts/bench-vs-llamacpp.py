#!/usr/bin/env python3
"""Side-by-side speed of ruvllm and llama.cpp on the same machine, same
model, same threads, in the same run (interleaved, so both see the same
machine state).

llama.cpp comes from PyPI's llama-cpp-python (it builds llama.cpp from
source: `CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python==0.3.36`,
about 15 minutes on 2 cores). Its test mirrors llama-bench: pp = one batch
of N random prompt tokens from an empty cache, tg = N single-token decodes
from an empty cache, mean and standard deviation over repetitions after a
warm-up. ruvllm's numbers come from `ruvllm bench model -o json`.

llama.cpp is loaded with use_extra_bufts = false: on the machine these
numbers come from (a Xeon that reports AMX), llama.cpp's repacked/AMX
buffer path crashes in ggml_backend_amx_mul_mat, so its plain CPU path is
what can be measured there.

usage: scripts/bench-vs-llamacpp.py [--model M] [--threads 1,2] [-p 512] [-n 128] [-r 5]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time


def plain_cpu_backend():
    import llama_cpp.llama_cpp as lc
    orig = lc.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    lc.llama_model_default_params = params


def llamacpp_run(model, threads, n_prompt, n_gen, reps):
    from llama_cpp import Llama
    plain_cpu_backend()
    llm = Llama(model_path=model, n_ctx=max(n_prompt, n_gen) + 16, n_batch=max(n_prompt, 1),
                n_ubatch=max(n_prompt, 1), n_threads=threads, n_threads_batch=threads,
                verbose=False)
    rng = random.Random(1)
    n_vocab = llm.n_vocab()
    res = {}
    for test, n in (("pp", n_prompt), ("tg", n_gen)):
        if n == 0:
            continue
        speeds = []
        for rep in range(reps + 1):
            toks = [rng.randrange(n_vocab) for _ in range(n)]
            llm.reset()  # n_tokens = 0: the next eval starts at position 0
            t0 = time.perf_counter()
            if test == "pp":
                llm.eval(toks)
            else:
                for t in toks:
                    llm.eval([t])
            dt = time.perf_counter() - t0
            if rep > 0:
                speeds.append(n / dt)
        res[f"{test}{n}"] = (statistics.mean(speeds), statistics.stdev(speeds) if len(speeds) > 1 else 0.0)
    return res


def ruvllm_run(ruvllm, model, threads, n_prompt, n_gen, reps):
    out = subprocess.run([ruvllm, "bench", "model", "-m", model, "-t", str(threads), "-p", str(n_prompt),
                          "-n", str(n_gen), "-r", str(reps), "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    res = {}
    for row in json.loads(out):
        res[row["test"]] = (row["avg_ts"], row["stddev_ts"])
    return res


def main():
    ap = argparse.ArgumentParser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    ap.add_argument("--model", default=os.path.join(cache, "ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--ruvllm", default="build/ruvllm")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=5)
    a = ap.parse_args()

    import llama_cpp
    print(f"<!-- llama-cpp-python {llama_cpp.__version__}, {a.model}, -p {a.p} -n {a.n} -r {a.r} -->")
    print("| threads | test | llama.cpp t/s | ruvllm t/s | ruvllm / llama.cpp |")
    print("|---:|---|---:|---:|---:|")
    for t in [int(x) for x in a.threads.split(",")]:
        ref = llamacpp_run(a.model, t, a.p, a.n, a.r)
        ours = ruvllm_run(a.ruvllm, a.model, t, a.p, a.n, a.r)
        for test in ref:
            r, o = ref[test], ours.get(test, (float("nan"), 0))
            print(f"| {t} | {test} | {r[0]:.1f} ± {r[1]:.1f} | {o[0]:.1f} ± {o[1]:.1f} | {o[0] / r[0]:.2f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
