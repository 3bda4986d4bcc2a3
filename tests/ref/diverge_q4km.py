#!/usr/bin/env python3
"""Why ruvllm and llama.cpp part ways on the Q4_K_M round trip (issue 6):
greedy agreement, near-tie margins, logit distances and a per-layer
comparison, ruvllm against llama.cpp and llama.cpp against itself.

    python3 tests/ref/diverge_q4km.py [--gguf FILE | --type Q4_K_M] [--tokens 24]
                                      [--layers PROMPT_NO] [--dump BIN] [--keep DIR]

Without --gguf it makes the issue's file: the default model -> `ruvllm
dequant --type f16` -> `ruvllm quantize ... TYPE` (in a temporary
directory, or --keep DIR). The ruvllm side is tests/ref/diverge_dump.c,
compiled here against build/libruvllm.a (`make build/libruvllm.a` first),
or --dump BIN (e.g. an experimental build). Prompts: the three of
check_quantize_roundtrip.py and the 16 of tests/ref/llamacpp/prompts/
(chatml with special tokens), tokenized by llama.cpp and given to both as
ids. Configurations, each compared with llama.cpp's default (non-flash
attention, f16 KV cache, 2 threads), which is what check_quantize_roundtrip
.py runs:

  ruvllm          `ruvllm run`'s defaults: f16 KV cache, flash-style
                  attention with f32 probabilities, Q8_0/Q8_K activations
  lc-flash        llama.cpp with flash_attn=True
  lc-kvf32        llama.cpp with an f32 KV cache (type_k = type_v = F32)
  lc-1thread      llama.cpp with 1 thread (a control: same arithmetic)

Per configuration: free-running greedy texts identical to llama.cpp's
over --tokens tokens (and, where not, the first differing step with both
sides' top-2 margins); teacher-forced on llama.cpp's tokens, the steps
whose argmax agrees, the largest and the median per-step max |logit
difference| and the median centered RMS difference (softmax ignores a
per-row constant). --layers N adds, for prompt N teacher-forced, the
relative L2 difference of every traced tensor (rvl_ctx_set_trace;
llama.cpp's cb_eval) at the step where the free-running outputs first
differ, layer by layer.

Versions: Python 3.11.7, numpy 2.4.6, llama-cpp-python 0.3.36 (libggml
0.25.3), gguf 0.19.0. llama.cpp runs with use_extra_bufts=False (its AMX
path crashes on the measuring machine). Check only; nothing is written to
the repository. About 20 minutes on 2 shared cores for all prompts and
configurations; `--prompts 2 --layers 2 --configs ''` about 1 minute.
Results: tests/ref/README.md.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np
import llama_cpp.llama_cpp as lc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                     "ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf")
ISSUE_PROMPTS = ["The capital of France is", "def fib(n):", "Once upon a time"]
LIBS = ["-lzstd", "-lxxhash", "-lreadline", "-lpcre2-8", "-lutf8proc", "-lcjson", "-lm", "-pthread"]


class GgmlTensor(ctypes.Structure):
    """struct ggml_tensor of libggml 0.25.3 (include/ggml.h)."""
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64),
                ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8)]


TRACE = {"on": False, "pos0": 0, "nt": 1, "rec": []}


def _cb_eval(t, ask, ud):
    if ask:
        return TRACE["on"]        # only then does the scheduler stop after each node
    if not TRACE["on"]:
        return True
    tt = ctypes.cast(t, ctypes.POINTER(GgmlTensor)).contents
    name = tt.name.decode()
    if tt.type != 0 or not tt.data or " (" in name:     # f32 results only, no views
        return True
    ne, nb = list(tt.ne), list(tt.nb)
    ext = sum((ne[i] - 1) * nb[i] for i in range(4)) + 4
    buf = (ctypes.c_char * ext).from_address(tt.data)
    a = np.lib.stride_tricks.as_strided(np.frombuffer(buf, dtype=np.float32), shape=ne[::-1],
                                        strides=nb[::-1]).copy()
    TRACE["rec"].append((name, TRACE["pos0"], TRACE["nt"], a))
    return True


CB = lc.ggml_backend_sched_eval_callback(_cb_eval)


def patch_llama():
    """use_extra_bufts = False (Llama() does not pass it on) and the eval
    callback, via the default-parameter functions Llama() calls."""
    mp, cp = lc.llama_model_default_params, lc.llama_context_default_params

    def model_params():
        p = mp()
        p.use_extra_bufts = False
        return p

    def ctx_params():
        p = cp()
        p.cb_eval = CB
        p.cb_eval_user_data = None
        return p
    lc.llama_model_default_params = model_params
    lc.llama_context_default_params = ctx_params


def lc_open(path, flash=False, kv_f32=False, threads=2):
    import llama_cpp
    kw = {"type_k": 0, "type_v": 0} if kv_f32 else {}
    return llama_cpp.Llama(model_path=path, n_ctx=512, n_batch=512, verbose=False, use_extra_bufts=False,
                           n_threads=threads, n_threads_batch=threads, flash_attn=flash, logits_all=True, **kw)


def lc_steps(llm, ids, n_prompt, n_gen):
    """Prompt as one batch, then one token per eval: ids[n] while given,
    else the argmax. Returns (sequence, logit rows of the n_gen steps)."""
    llm.reset()
    seq = list(ids[:n_prompt])
    TRACE["pos0"], TRACE["nt"] = 0, n_prompt
    llm.eval(seq)
    rows = []
    for s in range(n_gen):
        r = np.array(llm.scores[len(seq) - 1], dtype=np.float32)
        rows.append(r)
        t = ids[len(seq)] if len(seq) < len(ids) else int(r.argmax())
        seq.append(t)
        if s + 1 < n_gen:
            TRACE["pos0"], TRACE["nt"] = len(seq) - 1, 1
            llm.eval([t])
    return seq, np.array(rows)


def rv_steps(dump, path, ids, n_prompt, n_gen, tmp, trace=None):
    idf, out = os.path.join(tmp, "ids.txt"), os.path.join(tmp, "logits.bin")
    with open(idf, "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    cmd = [dump, path, idf, out, str(n_prompt), str(n_gen)] + ([trace] if trace else [])
    subprocess.run(cmd, check=True)
    seq = list(map(int, open(out + ".ids").read().split()))
    return seq, np.fromfile(out, dtype=np.float32).reshape(n_gen, -1)


def top2(r):
    o = np.argsort(-r)[:2]
    return int(o[0]), int(o[1]), float(r[o[0]] - r[o[1]])


def first_diff(a, b, n_prompt):
    for i in range(n_prompt, min(len(a), len(b))):
        if a[i] != b[i]:
            return i - n_prompt
    return -1


def load_rv_trace(path):
    d, b, o = {}, open(path, "rb").read(), 0
    while o < len(b):
        name = b[o:o + 16].split(b"\0")[0].decode()
        layer, pos, n = (int(v) for v in np.frombuffer(b[o + 16:o + 28], np.int32))
        o += 28
        d[(name, layer, pos)] = np.frombuffer(b[o:o + 4 * n], np.float32)
        o += 4 * n
    return d


def lc_trace_dict(rec):
    d = {}
    for name, pos0, nt, a in rec:
        base, layer = (name.rsplit("-", 1)[0], int(name.rsplit("-", 1)[1])) if "-" in name else (name, -1)
        a = a.reshape(-1)
        if base in ("kq", "kq_soft_max", "kqv") or a.size % nt:
            continue
        for t, row in enumerate(a.reshape(nt, -1)):
            d[(base, layer, pos0 + t)] = row     # later ones win: Qcur/Kcur after RoPE
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ruvllm", default=os.path.join(ROOT, "build/ruvllm"))
    ap.add_argument("--gguf", help="compare on this file instead of making the round trip")
    ap.add_argument("--type", default="Q4_K_M")
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--layers", type=int, default=-1, help="per-layer table for this prompt number")
    ap.add_argument("--dump", help="a prebuilt diverge_dump binary")
    ap.add_argument("--prompts", help="only these prompt numbers (comma-separated)")
    ap.add_argument("--keep", help="directory for the files (kept)")
    ap.add_argument("--configs", default="lc-flash,lc-kvf32,lc-1thread",
                    help="llama.cpp configurations besides the reference (comma-separated; '' for none)")
    a = ap.parse_args()
    patch_llama()
    tmp = a.keep or tempfile.mkdtemp(prefix="diverge_")
    os.makedirs(tmp, exist_ok=True)
    path = a.gguf
    if not path:
        f16, path = os.path.join(tmp, "f16.gguf"), os.path.join(tmp, a.type + ".gguf")
        subprocess.run([a.ruvllm, "dequant", "-q", "--type", "f16", MODEL, f16], check=True)
        subprocess.run([a.ruvllm, "quantize", "-q", "-t", "2", f16, path, a.type], check=True)
    dump = a.dump
    if not dump:
        dump = os.path.join(tmp, "diverge_dump")
        subprocess.run(["cc", "-O2", "-std=gnu11", "-I" + os.path.join(ROOT, "lib"), "-o", dump,
                        os.path.join(ROOT, "tests/ref/diverge_dump.c"),
                        os.path.join(ROOT, "build/libruvllm.a")] + LIBS, check=True)

    pdir = os.path.join(ROOT, "tests/ref/llamacpp/prompts")
    prompts = [(f"issue-{i}", p, False) for i, p in enumerate(ISSUE_PROMPTS)]
    for fn in sorted(os.listdir(pdir)):
        prompts.append((fn[:-4], open(os.path.join(pdir, fn), "rb").read().decode(), fn == "chatml.txt"))

    n = a.tokens
    only = {int(v) for v in a.prompts.split(",")} if a.prompts else None
    n_run = len(only) if only else len(prompts)
    ref = lc_open(path)
    make = {"lc-flash": lambda: lc_open(path, flash=True), "lc-kvf32": lambda: lc_open(path, kv_f32=True),
            "lc-1thread": lambda: lc_open(path, threads=1)}
    others = {k: make[k]() for k in a.configs.split(",") if k}
    if a.layers >= 0 and "lc-flash" not in others:
        others["lc-flash"] = make["lc-flash"]()
    names = ["ruvllm"] + list(others)
    stat = {k: {"same": 0, "tf_agree": 0, "tf_steps": 0, "maxd": [], "crms": [], "flip_margins": []}
            for k in names}
    print(f"file {path}; {n_run} prompts x {n} tokens; reference: llama.cpp non-flash, f16 KV, 2 threads")
    print("free-running first difference: step, llama.cpp's token/runner-up/margin, then the other's")
    layer_case = None
    for pi, (pname, text, special) in enumerate(prompts):
        if only is not None and pi not in only:
            continue
        ids = ref.tokenize(text.encode(), add_bos=False, special=special)
        np_ = len(ids)
        rseq, rrows = lc_steps(ref, ids, np_, n)
        line = [f"{pi:2d} {pname:12s}"]
        for k in names:
            if k == "ruvllm":
                gseq, grows = rv_steps(dump, path, ids, np_, n, tmp)
                _, frows = rv_steps(dump, path, rseq, np_, n, tmp)
            else:
                gseq, grows = lc_steps(others[k], ids, np_, n)
                _, frows = lc_steps(others[k], rseq, np_, n)
            st = stat[k]
            d = first_diff(rseq, gseq, np_)
            if d < 0:
                st["same"] += 1
                line.append(f"{k}: same")
            else:
                a1, a2, am = top2(rrows[d])
                b1, b2, bm = top2(grows[d])
                line.append(f"{k}: step {d} {a1}/{a2}/{am:.3f} vs {b1}/{b2}/{bm:.3f}")
                if k == "ruvllm" and layer_case is None and pi == a.layers:
                    layer_case = (ids, rseq, np_, d)
            for s in range(n):
                st["tf_steps"] += 1
                if int(frows[s].argmax()) == int(rrows[s].argmax()):
                    st["tf_agree"] += 1
                else:
                    st["flip_margins"].append(top2(rrows[s])[2])
                dd = frows[s].astype(np.float64) - rrows[s]
                st["maxd"].append(np.abs(dd).max())
                st["crms"].append((dd - dd.mean()).std())
        print("  ".join(line), flush=True)
    print()
    print(f"{'config':12s} {'same text':>10s} {'teacher-forced argmax agrees':>30s} "
          f"{'max|dlogit| max/median':>24s} {'centered RMS median':>20s}  margins where argmax differs")
    for k in names:
        st = stat[k]
        fm = " ".join(f"{m:.3f}" for m in sorted(st["flip_margins"]))
        print(f"{k:12s} {st['same']:>4d}/{n_run:<5d} {st['tf_agree']:>19d}/{st['tf_steps']:<10d} "
              f"{max(st['maxd']):>11.3f}/{np.median(st['maxd']):<12.3f} {np.median(st['crms']):>20.4f}  {fm}")

    if a.layers >= 0:
        if layer_case is None:
            ids = ref.tokenize(prompts[a.layers][1].encode(), add_bos=False, special=prompts[a.layers][2])
            rseq, _ = lc_steps(ref, ids, len(ids), n)
            layer_case = (ids, rseq, len(ids), n - 1)
        ids, rseq, np_, d = layer_case
        pos = np_ - 1 + d          # the position whose logits differ
        tr = os.path.join(tmp, "trace.bin")
        rv_steps(dump, path, rseq, np_, d + 1, tmp, trace=tr)
        R = load_rv_trace(tr)
        TRACE["on"], TRACE["rec"] = True, []
        lc_steps(ref, rseq, np_, d + 1)
        A = lc_trace_dict(TRACE["rec"])
        TRACE["rec"] = []
        lc_steps(others["lc-flash"], rseq, np_, d + 1)
        B = lc_trace_dict(TRACE["rec"])
        TRACE["on"] = False
        ops = ["attn_norm", "Qcur", "Kcur", "Vcur", "kqv_out", "attn_out", "ffn_inp", "ffn_norm",
               "ffn_gate", "ffn_up", "ffn_swiglu", "ffn_out", "l_out"]
        print(f"\nprompt {a.layers}, position {pos} (step {d}): relative L2 difference from llama.cpp "
              "non-flash, ruvllm / llama.cpp flash")

        def rel(x, y):
            return np.linalg.norm(x.astype(np.float64) - y) / np.linalg.norm(y)
        for layer in range(max(k[1] for k in A) + 1):
            cells = []
            for op in ops:
                k = (op, layer, pos)
                if k in A and k in R and k in B:
                    cells.append(f"{op} {rel(R[k], A[k]):.1e}/{rel(B[k], A[k]):.1e}")
            print(f"{layer:2d} " + "  ".join(cells))
        k = ("result_norm", -1, pos)
        if k in A and k in R:
            print(f"result_norm {rel(R[k], A[k]):.1e}/{rel(B[k], A[k]):.1e}")
        local_errors(path, {"llama.cpp": A, "llama.cpp-flash": B, "ruvllm": R}, pos + 1)
    return 0


def f16(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float64)


def q8_0(x, x86):
    """Q8_0 activations as the dot products see them (d rounded to f16):
    ggml's reference (quantize_row_q8_0_ref: id = 1/d, roundf) or ggml-cpu's
    x86 one (id = 127/amax, round to nearest even)."""
    x = np.asarray(x, np.float32).reshape(-1, 32)
    amax = np.abs(x).max(1)
    d = (amax / np.float32(127)).astype(np.float32)
    safe = np.where(amax != 0, amax, np.float32(1))
    if x86:
        idv = np.where(amax != 0, np.float32(127) / safe, 0).astype(np.float32)
        q = np.rint((x * idv[:, None]).astype(np.float32))
    else:
        idv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
        v = (x * idv[:, None]).astype(np.float32)
        q = np.sign(v) * np.floor(np.abs(v) + 0.5)
    return (f16(d)[:, None] * q).reshape(-1)


def q8_K(x):
    """Q8_K (quantize_row_q8_K_ref, which x86 uses too)."""
    out = []
    for b in np.asarray(x, np.float32).reshape(-1, 256):
        mx = b[int(np.argmax(np.abs(b)))]
        if mx == 0:
            out.append(np.zeros(256))
            continue
        isc = np.float32(-127.0) / mx
        out.append(np.float64(np.float32(1) / isc) * np.minimum(127, np.rint((isc * b).astype(np.float32))))
    return np.concatenate(out)


def local_errors(path, impls, npos):
    """Each implementation's op against a float64 evaluation of the same op
    on that implementation's own input: a kernel that computes what it
    means to is within float rounding (~1e-7); a different rounding rule
    shows as a larger error for one emulation and not the other."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    W, TY = {}, {}
    for t in GGUFReader(path).tensors:
        TY[t.name] = t.tensor_type.name
        W[t.name] = (np.array(t.data, np.float64) if TY[t.name] == "F32"
                     else dequantize(t.data, t.tensor_type).astype(np.float64))
    n_layer = 1 + max(int(k.split(".")[1]) for k in W if k.startswith("blk."))

    def act(w, x, x86):
        return q8_K(x) if TY[w].endswith("_K") else q8_0(x, x86)

    def rel(x, y):
        return float(np.linalg.norm(np.asarray(x, np.float64) - y) / np.linalg.norm(y))
    res = {}
    for who, T in impls.items():
        for layer in range(n_layer):
            b = f"blk.{layer}."
            for p in range(npos):
                def g(n):
                    return T[(n, layer, p)].astype(np.float64)
                mm = [("Vcur", "attn_v", "attn_norm"), ("ffn_gate", "ffn_gate", "ffn_norm"),
                      ("ffn_up", "ffn_up", "ffn_norm"), ("attn_out", "attn_output", "kqv_out"),
                      ("ffn_out", "ffn_down", "ffn_swiglu")]
                for out, w, inp in mm:
                    w = b + w + ".weight"
                    tags = ["ref", "x86"] if not TY[w].endswith("_K") else ["ref"]
                    for tag in tags:
                        key = (f"{out} ({TY[w]} x {'Q8_K' if TY[w].endswith('_K') else 'Q8_0'})", tag)
                        res.setdefault((who,) + key, []).append(rel(g(out), W[w] @ act(w, g(inp), tag == "x86")))
                q = g("Qcur").reshape(-1, 64)
                K = np.stack([T[("Kcur", layer, j)] for j in range(p + 1)]).reshape(p + 1, -1, 64)
                V = np.stack([T[("Vcur", layer, j)] for j in range(p + 1)]).reshape(p + 1, -1, 64)
                grp = q.shape[0] // K.shape[1]
                for tag in ("f16 q/k/v, f32 P", "f16 q/k/v, f16 P"):
                    outs = []
                    for h in range(q.shape[0]):
                        kk, vv = f16(K[:, h // grp]), f16(V[:, h // grp])
                        sc = kk @ f16(q[h]) / 8.0
                        P = np.exp(sc - sc.max())
                        P /= P.sum()
                        if "f16 P" in tag:
                            P = f16(P)
                        outs.append(P @ vv)
                    res.setdefault((who, "kqv_out (attention)", tag), []).append(rel(g("kqv_out"), np.concatenate(outs)))
    whos = list(impls)
    print(f"\nlocal error of each op on its own input, positions 0..{npos - 1}, all layers: mean / max "
          "relative L2 against a float64 evaluation with the given rounding")
    print(f"{'op':34s} {'emulation':17s} " + " ".join(f"{w:>22s}" for w in whos))
    for op, tag in sorted({(k[1], k[2]) for k in res}):
        print(f"{op:34s} {tag:17s} " + " ".join(
            f"{np.mean(res[(w, op, tag)]):10.1e} {np.max(res[(w, op, tag)]):10.1e} " for w in whos))


if __name__ == "__main__":
    sys.exit(main())
