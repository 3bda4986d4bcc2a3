#!/usr/bin/env python3
"""Load `ruvllm serve` (or any OpenAI-compatible server) from C concurrent
clients for a while and print what it did, as one JSON line: requests,
failures, generated tokens per second over the run, time to first token
(median and worst). Standard library only.

    serve_load.py BASE_URL CLIENTS SECONDS [MAX_TOKENS]

Each client streams one chat request after another (greedy, ignore_eos,
MAX_TOKENS tokens, default 64) and checks each answer: HTTP 200, every
event a JSON chunk, [DONE] last, usage.completion_tokens == MAX_TOKENS.
"""
import json
import sys
import threading
import time
import urllib.request


def one(base, max_tokens, k):
    body = json.dumps({"messages": [{"role": "user", "content": f"Tell me a story about {k}."}],
                       "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}}).encode()
    rq = urllib.request.Request(base + "/v1/chat/completions", data=body,
                                headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    ttft, usage, done = None, None, False
    with urllib.request.urlopen(rq, timeout=600) as r:
        if r.status != 200:
            raise RuntimeError(f"status {r.status}")
        for line in r:
            line = line.decode().rstrip("\n")
            if not line:
                continue
            if not line.startswith("data: "):
                raise RuntimeError(f"not an event: {line!r}")
            d = line[6:]
            if d == "[DONE]":
                done = True
                continue
            c = json.loads(d)
            if c.get("usage"):
                usage = c["usage"]
            elif ttft is None and c["choices"][0]["delta"].get("content"):
                ttft = time.monotonic() - t0
    if not done or not usage or usage["completion_tokens"] != max_tokens:
        raise RuntimeError(f"incomplete answer: done={done} usage={usage}")
    return ttft, usage["completion_tokens"]


def main():
    base, clients, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    max_tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    lock = threading.Lock()
    res = {"requests": 0, "failed": 0, "tokens": 0, "ttft": [], "errors": []}
    t_end = time.monotonic() + secs

    def client(i):
        k = 0
        while time.monotonic() < t_end:
            try:
                ttft, n = one(base, max_tokens, f"{i}-{k}")
                with lock:
                    res["requests"] += 1
                    res["tokens"] += n
                    res["ttft"].append(ttft or 0)
            except Exception as e:  # noqa: BLE001 - every failure counts
                with lock:
                    res["failed"] += 1
                    res["errors"].append(str(e)[:200])
            k += 1

    t0 = time.monotonic()
    th = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    tt = sorted(res["ttft"]) or [0]
    print(json.dumps({"clients": clients, "seconds": round(wall, 1), "requests": res["requests"],
                      "failed": res["failed"], "generated_tokens": res["tokens"],
                      "tokens_per_s": round(res["tokens"] / wall, 1),
                      "ttft_median_ms": round(1e3 * tt[len(tt) // 2]),
                      "ttft_max_ms": round(1e3 * tt[-1]), "errors": res["errors"][:3]}))


if __name__ == "__main__":
    main()
