#!/usr/bin/env python3
"""Perplexity of a GGUF model with llama.cpp (llama-cpp-python 0.3.36),
windowed like llama-perplexity and `ruvllm bench ppl`: consecutive windows
of n_ctx tokens, BOS in the first position when the model adds one, the
second half of each window scored (positions n_ctx/2 .. n_ctx-2 predict the
next token). Prints the running PPL per window and the final PPL with
llama-perplexity's error estimate. Used for the README's perplexity row,
and (`#` lines first: versions, the text's sha256, the arguments) for the
golden tests/ref/llamacpp-f32/ppl-c128.txt that
tests/cli/t0051-ppl-llamacpp.sh compares `ruvllm bench ppl` with.

usage: tests/ref/ppl_llamacpp.py MODEL TEXT N_CTX N_WINDOWS
"""
import hashlib
import math
import os
import platform
import sys

import numpy as np
import llama_cpp.llama_cpp as lc


def plain_cpu_backend():
    # the AMX/repacked buffer path crashes on the measuring machine (see
    # gen_llamacpp_goldens.py); the plain CPU path is what runs there
    orig = lc.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    lc.llama_model_default_params = params


def main():
    plain_cpu_backend()
    from llama_cpp import Llama
    path, text, n_ctx, windows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    raw = open(text, "rb").read()
    txt = raw.decode("utf-8")
    import llama_cpp
    print(f"# llama.cpp (llama-cpp-python {llama_cpp.__version__}), python {platform.python_version()}, "
          f"numpy {np.__version__}")
    print(f"# model {os.path.basename(path)}, n_ctx {n_ctx}, windows {windows}, second half of each scored")
    print(f"# text sha256 {hashlib.sha256(raw).hexdigest()}")
    llm = Llama(model_path=path, n_ctx=n_ctx, logits_all=True, verbose=False, n_threads=2,
                n_batch=n_ctx)
    add_bos = llm._model.add_bos_token() if hasattr(llm._model, "add_bos_token") else True
    toks = llm.tokenize(txt.encode(), add_bos=add_bos, special=False)
    bos = llm.token_bos()
    first = n_ctx // 2
    nll = nll2 = 0.0
    cnt = 0
    for i in range(min(windows, len(toks) // n_ctx)):
        w = toks[i * n_ctx:(i + 1) * n_ctx]
        if add_bos:
            w = [bos] + w[1:]
        llm.reset()
        llm.eval(w)
        lg = np.array(llm.scores[:n_ctx], dtype=np.float64)
        for j in range(first, n_ctx - 1):
            row = lg[j]
            m = row.max()
            v = m + math.log(np.exp(row - m).sum()) - row[w[j + 1]]
            nll += v
            nll2 += v * v
            cnt += 1
        print(i + 1, math.exp(nll / cnt), flush=True)
    mean = nll / cnt
    var = nll2 / cnt - mean * mean
    ppl = math.exp(mean)
    print("PPL %.4f +/- %.5f over %d tokens" % (ppl, ppl * math.sqrt(var / (cnt - 1)), cnt))


if __name__ == "__main__":
    main()
