#!/usr/bin/env python3
"""Write a `ruvllm bench ppl --kl-base` file from llama.cpp's logits
(llama-cpp-python 0.3.36), so that `ruvllm bench ppl --kl FILE` measures the
KL divergence of ruvllm's next-token distributions from llama.cpp's and how
often the top token agrees.

Tokens and windows are those of lib/tools/ppl.c and cmd/bench.c: the whole
text tokenized once (BOS in front only when the model adds one, special
tokens not parsed), cut into consecutive windows of N_CTX tokens, the first
token of each window replaced by BOS when the model adds one, positions
N_CTX/2 .. N_CTX-2 scored (N_CTX/2 - 1 rows per window). The file holds the
text's token ids, so `--kl` refuses it if ruvllm tokenizes differently.

File (little-endian; see `man ruvllm-bench`, LOGITS FILE):
  "RVLLOGP\\0", u32 version 1, n_vocab, n_ctx, first, n_windows, i32 bos,
  i32 tokens[n_windows*n_ctx], f32 log-softmax rows, u64 XXH3-64 of all
  bytes before it.

The file is 4 * n_vocab bytes per scored position (~50 MB per 512-token
window for a 49152-token vocabulary): write it outside the repository.

A model with a large vocabulary (Gemma 3: 262144 tokens, 1 MiB per
position) gets the compact form instead, --top K ("RVLTOPK\\0", version 1):
the same header fields plus k (u32) after n_windows and before bos, the
same tokens, then per scored position the log-probability of all tokens
outside the top K (f32, the tail), the top K ids (i32, most likely first)
and their log-probabilities (f32), and the XXH3-64 of all bytes before.
KL is then taken over the K tokens and the tail as one more outcome:
sum_i p_i (log p_i - log q_i) + p_tail (log p_tail - log q_tail), q_tail
being the other side's probability of the same tail (a lower bound of
the full KL, tight when the top K hold most of the mass); top-1 agreement
is exact. tests/test_llamacpp_kl.c reads this form; --variants measures
llama.cpp against itself the same way (flash attention on; flash
attention and a q8_0 KV cache) and writes OUT's .txt beside it: that is
the bar for ruvllm.

usage:
  tests/ref/kl_base_llamacpp.py MODEL TEXT N_CTX N_WINDOWS OUT.logp [--kv-f32] [--flash-attn]
      write the base file from llama.cpp
  tests/ref/kl_base_llamacpp.py MODEL TEXT N_CTX N_WINDOWS OUT.topk --top K [--variants]
      write the compact base file (and, with --variants, OUT.txt: llama.cpp's
      perplexity and its KL/top-1 against itself run other ways)
  tests/ref/kl_base_llamacpp.py MODEL TEXT N_CTX N_WINDOWS --compare BASE.logp [--kv-f32]
      a fresh llama.cpp pass against BASE (checks this script: 0 against
      its own output)
  tests/ref/kl_base_llamacpp.py --diff BASE.logp OTHER.logp
      KL(BASE || OTHER) of two files (e.g. one from `ruvllm bench ppl
      --kl-base`), broken down by position in the window and by window
"""
import argparse
import math
import os
import struct
import sys

import numpy as np
import xxhash

MAGIC = b"RVLLOGP\0"
VERSION = 1
HEADER = 32


def plain_cpu_backend():
    # the AMX/repacked buffer path crashes on the measuring machine (see
    # gen_llamacpp_goldens.py); the plain CPU path is what runs there
    import llama_cpp.llama_cpp as lc
    orig = lc.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    lc.llama_model_default_params = params


def log_softmax(row):
    r = row.astype(np.float64)
    m = r.max()
    lse = m + math.log(np.exp(r - m).sum())
    return (r - lse).astype(np.float32)


class Base:
    """A base file, mapped and checked like lib/tools/ppl.c's base_open."""

    def __init__(self, path):
        self.path = path
        self.mm = np.memmap(path, dtype=np.uint8, mode="r")
        b = self.mm
        if len(b) < HEADER + 8 or bytes(b[:8]) != MAGIC:
            sys.exit(f"{path}: not a ruvllm logits file")
        ver, self.n_vocab, self.n_ctx, self.first, self.n_windows, self.bos = \
            struct.unpack("<5Ii", bytes(b[8:HEADER]))
        if ver != VERSION:
            sys.exit(f"{path}: version {ver}")
        self.rows = self.n_ctx - 1 - self.first
        ntok = self.n_windows * self.n_ctx
        want = HEADER + 4 * ntok + 4 * self.n_vocab * self.rows * self.n_windows + 8
        if len(b) != want:
            sys.exit(f"{path}: {len(b)} bytes, the header describes {want}")
        h = xxhash.xxh3_64()
        step = 1 << 26
        for o in range(0, want - 8, step):
            h.update(memoryview(b[o:min(o + step, want - 8)]))
        if h.intdigest() != struct.unpack("<Q", bytes(b[want - 8:]))[0]:
            sys.exit(f"{path}: checksum mismatch")
        self.tokens = np.frombuffer(b[HEADER:HEADER + 4 * ntok], dtype="<i4")
        self.lp = np.frombuffer(b[HEADER + 4 * ntok:want - 8], dtype="<f4").reshape(
            self.n_windows, self.rows, self.n_vocab)


# llama.cpp run other ways (--variants): name -> Llama() arguments. A
# quantized V cache needs flash attention.
GGML_TYPE_Q8_0 = 8
VARIANTS = [
    ("flash-attn", {"flash_attn": True}),
    ("q8_0-kv", {"flash_attn": True, "type_k": GGML_TYPE_Q8_0, "type_v": GGML_TYPE_Q8_0}),
]
TOPK_MAGIC = b"RVLTOPK\0"
TOPK_HEADER = 36


def llama_windows(model, text, n_ctx, n_windows, kv_f32, flash_attn=False, extra=None):
    """Yield (tokens of all windows, bos) then, per window, its scored log-probability rows."""
    plain_cpu_backend()
    from llama_cpp import Llama
    kv = {"type_k": 0, "type_v": 0} if kv_f32 else {}  # GGML_TYPE_F32
    if flash_attn:
        kv["flash_attn"] = True
    kv.update(extra or {})
    llm = Llama(model_path=model, n_ctx=n_ctx, n_batch=n_ctx, logits_all=True, verbose=False,
                n_threads=2, n_threads_batch=2, **kv)
    add_bos = llm._model.add_bos_token() if hasattr(llm._model, "add_bos_token") else True
    toks = llm.tokenize(open(text, "rb").read(), add_bos=add_bos, special=False)
    bos = llm.token_bos() if add_bos else -1
    nw = len(toks) // n_ctx
    if n_windows:
        nw = min(nw, n_windows)
    if nw == 0:
        sys.exit(f"{text}: {len(toks)} tokens, fewer than one window of {n_ctx}")
    print(f"{len(toks)} tokens; {nw} windows of {n_ctx}, bos {bos}, n_vocab {llm.n_vocab()}",
          file=sys.stderr)
    yield np.array(toks[:nw * n_ctx], dtype="<i4"), bos, llm.n_vocab(), nw
    first = n_ctx // 2
    for i in range(nw):
        w = toks[i * n_ctx:(i + 1) * n_ctx]
        if bos >= 0:
            w = [bos] + w[1:]
        llm.reset()
        llm.eval(w)
        sc = np.asarray(llm.scores[:n_ctx], dtype=np.float32)
        yield w, np.stack([log_softmax(sc[j]) for j in range(first, n_ctx - 1)])


def kl_rows(base, other):
    """KL(base || other) per row (float64), rows of log-probabilities."""
    b = base.astype(np.float64)
    o = other.astype(np.float64)
    pb = np.exp(b)
    k = np.where(np.isneginf(b), 0.0, pb * (b - o)).sum(axis=1)
    return np.maximum(k, 0.0)


def summary(name, kls, same, nll_a, nll_b):
    kls = np.asarray(kls)
    n = len(kls)
    print(f"{name}: {n} positions")
    print(f"  PPL base {math.exp(np.mean(nll_a)):.4f}  other {math.exp(np.mean(nll_b)):.4f}")
    print(f"  KL mean {kls.mean():.6f} +/- {kls.std(ddof=1) / math.sqrt(n) if n > 1 else 0:.6f}"
          f"  max {kls.max():.6f}")
    qs = [50, 90, 95, 99, 99.9]
    print("  KL percentiles " + "  ".join(f"p{q} {np.percentile(kls, q):.6f}" for q in qs))
    print(f"  same top token {100 * np.mean(same):.3f} %  ({int(np.sum(~np.asarray(same)))} differ)")


def write(a):
    gen = llama_windows(a.model, a.text, a.n_ctx, a.n_windows, a.kv_f32, a.flash_attn)
    tokens, bos, n_vocab, nw = next(gen)
    first = a.n_ctx // 2
    tmp = a.out + ".tmp"
    h = xxhash.xxh3_64()
    with open(tmp, "wb") as f:
        def put(buf):
            h.update(buf)
            f.write(buf)
        put(MAGIC + struct.pack("<5Ii", VERSION, n_vocab, a.n_ctx, first, nw, bos))
        put(tokens.tobytes())
        nll = []
        for i, (w, lp) in enumerate(gen):
            put(np.ascontiguousarray(lp, dtype="<f4").tobytes())
            nll.extend(-lp[j - first, w[j + 1]] for j in range(first, a.n_ctx - 1))
            print(f"[{i + 1}/{nw}] PPL {math.exp(np.mean(nll)):.4f}", file=sys.stderr, flush=True)
        f.write(struct.pack("<Q", h.intdigest()))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, a.out)
    print(f"llama.cpp PPL {math.exp(np.mean(nll)):.4f} over {len(nll)} tokens; wrote {a.out}")


def compare(a):
    base = Base(a.compare)
    gen = llama_windows(a.model, a.text, a.n_ctx, a.n_windows, a.kv_f32, a.flash_attn)
    tokens, bos, n_vocab, nw = next(gen)
    if (base.n_ctx, base.n_vocab, base.bos) != (a.n_ctx, n_vocab, bos) or nw > base.n_windows \
            or not np.array_equal(base.tokens[:len(tokens)], tokens):
        sys.exit(f"{a.compare}: made on other tokens/windows")
    kls, same, na, nb = [], [], [], []
    for i, (w, lp) in enumerate(gen):
        b = base.lp[i]
        kls.extend(kl_rows(b, lp))
        same.extend(b.argmax(axis=1) == lp.argmax(axis=1))
        tgt = np.array(w[base.first + 1:], dtype=np.int64)
        na.extend(-b[np.arange(base.rows), tgt])
        nb.extend(-lp[np.arange(base.rows), tgt])
    summary(f"{a.compare} vs a fresh llama.cpp pass", kls, same, na, nb)


def diff(a):
    A, B = Base(a.diff[0]), Base(a.diff[1])
    if (A.n_vocab, A.n_ctx, A.bos) != (B.n_vocab, B.n_ctx, B.bos) or \
            not np.array_equal(A.tokens[:min(len(A.tokens), len(B.tokens))],
                               B.tokens[:min(len(A.tokens), len(B.tokens))]):
        sys.exit("the two files were made on different tokens or windows")
    nw = min(A.n_windows, B.n_windows)
    K = np.zeros((nw, A.rows))
    S = np.zeros((nw, A.rows), dtype=bool)
    na, nb = [], []
    for i in range(nw):
        a_, b_ = A.lp[i], B.lp[i]
        K[i] = kl_rows(a_, b_)
        S[i] = a_.argmax(axis=1) == b_.argmax(axis=1)
        w = A.tokens[i * A.n_ctx:(i + 1) * A.n_ctx]
        tgt = w[A.first + 1:].astype(np.int64)
        na.extend(-a_[np.arange(A.rows), tgt])
        nb.extend(-b_[np.arange(A.rows), tgt])
    summary(f"KL({a.diff[0]} || {a.diff[1]})", K.ravel(), S.ravel(), na, nb)
    print("  by window: " + " ".join(f"{k:.5f}" for k in K.mean(axis=1)))
    edges = np.linspace(0, A.rows, 9).astype(int)
    print("  by position in window (window position: mean KL, same top %):")
    for lo, hi in zip(edges[:-1], edges[1:]):
        print(f"    {A.first + lo:4d}..{A.first + hi - 1:4d}: {K[:, lo:hi].mean():.6f}"
              f"  {100 * S[:, lo:hi].mean():.2f}")
    flat = np.argsort(K.ravel())[::-1][:10]
    print("  largest: " + ", ".join(
        f"w{f // A.rows}@{A.first + f % A.rows}={K.ravel()[f]:.4f}" for f in flat))
    # top-token disagreements: how close the base's top two were
    dis = np.argwhere(~S)
    if len(dis):
        margins = []
        for wi, r in dis:
            row = np.sort(A.lp[wi, r])[-2:]
            margins.append(row[1] - row[0])
        margins = np.array(margins)
        print(f"  disagreements: base top-2 log-prob margin median {np.median(margins):.4f}, "
              f"max {margins.max():.4f}, < 0.05 in {np.mean(margins < 0.05) * 100:.0f} %")


def topk_row(lp, k):
    """(log p of the tail, top-k ids, their log-probabilities) of one row."""
    ids = np.argsort(-lp, kind="stable")[:k]
    rest = np.delete(lp.astype(np.float64), ids)
    m = rest.max()
    tail = m + math.log(np.exp(rest - m).sum())
    return tail, ids.astype("<i4"), lp[ids].astype("<f4")


def kl_topk(tail, ids, top, other):
    """KL over the top-k tokens and the tail as one outcome (see the file's
    doc) of a base row (tail, ids, top) from a full log-probability row."""
    o = other.astype(np.float64)
    t = top.astype(np.float64)
    kl = float((np.exp(t) * (t - o[ids])).sum())
    q_tail = np.exp(np.delete(o, ids)).sum()  # the tail summed, not 1 - the top
    kl += math.exp(tail) * (tail - math.log(max(q_tail, 1e-300)))
    return max(kl, 0.0)


def write_topk(a):
    gen = llama_windows(a.model, a.text, a.n_ctx, a.n_windows, a.kv_f32)
    tokens, bos, n_vocab, nw = next(gen)
    first = a.n_ctx // 2
    h = xxhash.xxh3_64()
    rows, nll = [], []
    buf = [TOPK_MAGIC + struct.pack("<6Ii", VERSION, n_vocab, a.n_ctx, first, nw, a.top, bos),
           tokens.tobytes()]
    for i, (w, lp) in enumerate(gen):
        for j in range(lp.shape[0]):
            tail, ids, top = topk_row(lp[j], a.top)
            rows.append((tail, ids, top))
            buf.append(struct.pack("<f", tail) + ids.tobytes() + top.tobytes())
        nll.extend(-lp[j - first, w[j + 1]] for j in range(first, a.n_ctx - 1))
        print(f"[{i + 1}/{nw}] PPL {math.exp(np.mean(nll)):.4f}", file=sys.stderr, flush=True)
    data = b"".join(buf)
    h.update(data)
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data + struct.pack("<Q", h.intdigest()))
    os.replace(tmp, a.out)
    ppl = math.exp(np.mean(nll))
    print(f"llama.cpp PPL {ppl:.4f} over {len(nll)} tokens; wrote {a.out}")
    per = len(nll) // nw
    win_ppl = [math.exp(np.mean(nll[i * per:(i + 1) * per])) for i in range(nw)]
    if not a.variants:
        return
    import hashlib
    import platform
    import llama_cpp
    raw = open(a.text, "rb").read()
    lines = [f"# llama.cpp (llama-cpp-python {llama_cpp.__version__}), python {platform.python_version()}, "
             f"numpy {np.__version__}; made by tests/ref/kl_base_llamacpp.py --top {a.top} --variants",
             f"# model {os.path.basename(a.model)}, text sha256 {hashlib.sha256(raw).hexdigest()}, "
             f"n_ctx {a.n_ctx}, windows {nw}, positions {a.n_ctx // 2}..{a.n_ctx - 2} of each scored, "
             f"threads 2, weights in plain CPU buffers",
             "# base: f16 KV, no flash attention (the .topk file); variants: KL over the top "
             f"{a.top} + tail against the base, the share of positions with the base's top token, PPL",
             f"base ppl {ppl:.6f} tokens {len(nll)}"]
    lines += [f"base window {i + 1} ppl {p:.6f}" for i, p in enumerate(win_ppl)]
    for name, extra in VARIANTS:
        g = llama_windows(a.model, a.text, a.n_ctx, a.n_windows, False, extra=extra)
        next(g)
        kls, same, vn, r = [], [], [], 0
        for w, lp in g:
            for j in range(lp.shape[0]):
                tail, ids, top = rows[r]
                r += 1
                kls.append(kl_topk(tail, ids, top, lp[j]))
                same.append(int(np.argmax(lp[j])) == int(ids[0]))
            vn.extend(-lp[j - first, w[j + 1]] for j in range(first, a.n_ctx - 1))
        kls, same, vn = np.array(kls), np.array(same), np.array(vn)
        line = (f"{name} kl_mean {kls.mean():.6g} kl_max {kls.max():.6g} same_top {same.mean():.6f} "
                f"ppl {math.exp(vn.mean()):.6f}")
        print(line, file=sys.stderr)
        lines.append(line)
        # per window too: a run over fewer windows (under the sanitizers) has its own bar
        per = len(kls) // nw
        for i in range(nw):
            sl = slice(i * per, (i + 1) * per)
            lines.append(f"{name} window {i + 1} kl_mean {kls[sl].mean():.6g} same_top {same[sl].mean():.6f}"
                         f" ppl {math.exp(vn[sl].mean()):.6f}")
    txt = os.path.splitext(a.out)[0] + ".txt"
    with open(txt, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {txt}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("args", nargs="*", help="MODEL TEXT N_CTX N_WINDOWS [OUT]")
    ap.add_argument("--kv-f32", action="store_true", help="f32 KV cache in llama.cpp (default f16)")
    ap.add_argument("--flash-attn", action="store_true", help="llama.cpp's flash attention (default off)")
    ap.add_argument("--compare", metavar="BASE", help="compare a fresh llama.cpp pass with BASE")
    ap.add_argument("--diff", nargs=2, metavar=("BASE", "OTHER"), help="compare two files")
    ap.add_argument("--top", type=int, default=0, help="write the compact form: the top K of each row")
    ap.add_argument("--variants", action="store_true",
                    help="with --top: llama.cpp against itself (flash attention, q8_0 KV) into OUT.txt")
    a = ap.parse_args()
    if a.diff:
        return diff(a)
    need = 4 if a.compare else 5
    if len(a.args) != need:
        ap.error("give MODEL TEXT N_CTX N_WINDOWS" + ("" if a.compare else " OUT"))
    a.model, a.text, a.n_ctx, a.n_windows = a.args[0], a.args[1], int(a.args[2]), int(a.args[3])
    if a.compare:
        return compare(a)
    a.out = a.args[4]
    if a.top:
        return write_topk(a)
    write(a)


if __name__ == "__main__":
    main()
