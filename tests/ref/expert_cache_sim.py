#!/usr/bin/env python3
"""expert_cache_sim.py - hit rates of expert-cache eviction policies on
synthetic routing traces (the measurement behind lib/engine/experts.c's
choice of LRU). Not run by `make check`; standard library only.

    python3 tests/ref/expert_cache_sim.py [--tokens N] [--seed S]

Trace: decode of N tokens through a model of Qwen3-30B-A3B's routing shape
(48 layers, 128 experts, top-8), the experts of one token looked up layer
after layer as the forward pass does. Each layer's router is modelled by
  - popularity: expert ranks drawn from a Zipf law of exponent `zipf` over
    a random permutation per layer (0: uniform; published per-layer load
    counts of Mixtral and Qwen-MoE look like 0.5-1.0);
  - temporal locality: each of a token's k choices is, with probability
    `reuse`, one the previous token made in that layer (Mixtral's paper
    reports consecutive tokens sharing experts well above chance);
  - drift: every `phase` tokens a quarter of each layer's ranks are
    reshuffled (a change of topic), which is what aging must follow.
A cache of C experts (a fraction of 48 x 128) is simulated under LRU, LRU-2, LFU
with aging (counts halved every C lookups, least count evicted, ties by
recency; counts halved every C lookups, "LFU-1", or every 16 C, "LFU-16",
or never, "LFU-inf": kept for experts out of the cache too), and Belady's
optimal policy (the bound no online policy beats).
"""
import argparse
import heapq
import random
from collections import OrderedDict

L, E, K = 48, 128, 8


def trace(n_tok, zipf, reuse, phase, rng):
    ranks = [rng.sample(range(E), E) for _ in range(L)]  # rank -> expert
    w = [1.0 / (r + 1) ** zipf for r in range(E)]
    prev = [[] for _ in range(L)]
    out = []
    for t in range(n_tok):
        if phase and t and t % phase == 0:
            for l in range(L):
                idx = rng.sample(range(E), E // 4)
                vals = [ranks[l][i] for i in idx]
                rng.shuffle(vals)
                for i, v in zip(idx, vals):
                    ranks[l][i] = v
        for l in range(L):
            chosen = []
            while len(chosen) < K:
                if prev[l] and rng.random() < reuse:
                    e = rng.choice(prev[l])
                else:
                    e = ranks[l][rng.choices(range(E), weights=w)[0]]
                if e not in chosen:
                    chosen.append(e)
            prev[l] = chosen
            out.extend(l * E + e for e in chosen)
    return out


def lru(tr, cap):
    c, hits = OrderedDict(), 0
    for k in tr:
        if k in c:
            hits += 1
            c.move_to_end(k)
        else:
            if len(c) >= cap:
                c.popitem(last=False)
            c[k] = True
    return hits / len(tr)


def lfu_aging(tr, cap, period):
    cnt, last, heap, hits = {}, {}, [], 0
    inside = set()
    for i, k in enumerate(tr):
        if i and i % period == 0:  # aging: halve every count, rebuild the heap
            for q in cnt:
                cnt[q] //= 2
            heap = [(cnt[q], last[q], q) for q in inside]
            heapq.heapify(heap)
        if k in inside:
            hits += 1
        elif len(inside) >= cap:
            while True:
                c, lu, q = heapq.heappop(heap)
                if q in inside and c == cnt[q] and lu == last[q]:
                    inside.remove(q)
                    break
        inside.add(k)
        cnt[k] = cnt.get(k, 0) + 1
        last[k] = i
        heapq.heappush(heap, (cnt[k], i, k))
    return hits / len(tr)


def lru2(tr, cap):
    """LRU-2 (O'Neil et al.): evict the expert whose second-last use is
    oldest (one used once: oldest of all, by its last use)."""
    hist, inside, heap, hits = {}, set(), [], 0
    for i, k in enumerate(tr):
        if k in inside:
            hits += 1
        elif len(inside) >= cap:
            while True:
                key, q = heapq.heappop(heap)
                if q in inside and key == prio(hist[q]):
                    inside.remove(q)
                    break
        h = hist.get(k, (-1, -1))
        hist[k] = (h[1], i)
        inside.add(k)
        heapq.heappush(heap, (prio(hist[k]), k))
    return hits / len(tr)


def prio(h):
    return (h[0], h[1]) if h[0] >= 0 else (-1, h[1])


def belady(tr, cap):
    nxt, seen = [0] * len(tr), {}
    for i in range(len(tr) - 1, -1, -1):
        nxt[i] = seen.get(tr[i], len(tr) + i)
        seen[tr[i]] = i
    inside, heap, hits, nu = set(), [], 0, {}
    for i, k in enumerate(tr):
        if k in inside:
            hits += 1
        elif len(inside) >= cap:
            while True:
                d, q = heapq.heappop(heap)
                if q in inside and nu[q] == -d:
                    inside.remove(q)
                    break
        inside.add(k)
        nu[k] = nxt[i]
        heapq.heappush(heap, (-nxt[i], k))
    return hits / len(tr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    print("tokens %d, %d layers x %d experts, top-%d; hit rates (%%)" % (a.tokens, L, E, K))
    print("%-34s %6s %6s %6s %6s %6s %6s %6s" % ("trace", "budget", "LRU", "LRU-2", "LFU-1",
                                                 "LFU-16", "LFU-inf", "OPT"))
    for zipf, reuse, phase in [(0.0, 0.0, 0), (0.6, 0.0, 0), (1.0, 0.0, 0), (0.6, 0.3, 0),
                               (1.0, 0.3, 100), (0.6, 0.5, 100)]:
        tr = trace(a.tokens, zipf, reuse, phase, random.Random(a.seed))
        for frac in (0.25, 0.5, 0.75):
            cap = int(L * E * frac)
            name = "zipf %.1f reuse %.1f drift %s" % (zipf, reuse, phase or "none")
            print("%-34s %5d%% %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f" % (
                name, frac * 100, 100 * lru(tr, cap), 100 * lru2(tr, cap),
                100 * lfu_aging(tr, cap, cap),
                100 * lfu_aging(tr, cap, 16 * cap), 100 * lfu_aging(tr, cap, len(tr) + 1),
                100 * belady(tr, cap)), flush=True)


if __name__ == "__main__":
    main()
