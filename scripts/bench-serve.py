#!/usr/bin/env python3
"""Load tests for OpenAI-compatible servers, and `ruvllm serve` beside
llama.cpp's llama-server on the same GGUF file (docs/serving.md). Standard
library only, so it runs anywhere.

    bench-serve.py load URL [--clients 4] [--seconds 20 | --requests N] [options]
        load one running server (any OpenAI-compatible endpoint)
    bench-serve.py compare [--model M] [--clients 1,4,16,64] [--servers ruvllm,llama]
                           [--batch] [--json OUT] [options]
        for each client count: start `ruvllm serve` and llama-server in turn
        with as many parallel slots as clients (--slots to fix it), the same
        threads and per-slot context (llama-server: -np N -c N*ctx), load
        each, stop it; with --batch also `ruvllm run --batch --parallel N` on
        the same prompts

Each client sends one streamed request after another (chat, or --api
completions; temperature 0; max_tokens; ignore_eos unless --no-ignore-eos,
so every answer is max_tokens long) until --seconds have passed (requests
started by then are finished) or --requests are done. Prompts are fixed:
--prompts FILE (one a line) or generated ones; client i's k-th request takes
prompt (i + k) mod the number of prompts, so a client's requests differ one
from the next. llama-server runs with its RAM prompt cache off (--cache-ram
0, unless --llama-ram-cache): the load repeats its prompts, which that cache
would answer without computing them; each slot still reuses the prefix its
last prompt shares with the next (cache_prompt), as it does for real traffic.

Reported per run: generated tokens/s (usage.completion_tokens of the good
answers over the wall time), requests/s, time to first token (first
non-empty content delta after the request is sent: median, p90, worst),
failed requests (connection errors, HTTP status != 200), garbled answers (an
event that is not "data: " + JSON, no [DONE] last, no finish_reason, no
usage, or text different from the same prompt's answer when it was the only
request, asked of the same server first), and the server's resident memory
sampled every second from /proc/PID/status (median over the first and the
last minute, or third of the run when shorter, and the maximum). The load
average is printed with the figures: they mean little on a loaded machine.

Output: a Markdown table on stdout; --json FILE gets every figure.
"""
import argparse
import http.client
import json
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.expanduser("~/.cache/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf")
TOPICS = ["a cat", "the sea", "a robot", "an old map", "a lighthouse", "a garden", "the moon",
          "a train", "a violin", "a mountain", "a library", "a storm", "a bakery", "a comet",
          "a river", "a clock"]


def fail(msg):
    sys.exit(f"bench-serve: {msg}")


# ---------------------------------------------------------------- one request

class Answer:
    """One streamed request as the client saw it."""
    __slots__ = ("ok", "error", "garbled", "ttft", "latency", "text", "tokens", "finish",
                 "prompt_n", "cache_n")

    def __init__(self):
        self.ok, self.error, self.garbled = False, None, None
        self.ttft = self.latency = None
        self.text, self.tokens, self.finish = "", 0, None
        self.prompt_n = self.cache_n = None


def request_body(a, prompt):
    body = {"max_tokens": a.max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if a.ignore_eos:
        body["ignore_eos"] = True
    if a.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return json.dumps(body).encode()


def stream_once(url, a, prompt, timeout=3600):
    """Send one streamed request; check its framing and fields as it comes."""
    u = urllib.parse.urlsplit(url)
    path = (u.path.rstrip("/") or "") + ("/v1/chat/completions" if a.api == "chat"
                                          else "/v1/completions")
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if a.api_key:
        headers["Authorization"] = "Bearer " + a.api_key
    ans = Answer()
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    try:
        conn.request("POST", path, request_body(a, prompt), headers)
        r = conn.getresponse()
        if r.status != 200:
            ans.error = f"HTTP {r.status}: {r.read(300)!r}"
            return ans
        parts, usage, done, bad = [], None, False, None
        while True:
            line = r.readline()
            if not line:
                break
            line = line.decode("utf-8", "replace").rstrip("\r\n")
            if not line:
                continue
            if done:
                bad = bad or f"an event after [DONE]: {line[:80]!r}"
                continue
            if not line.startswith("data: "):
                bad = bad or f"not a data event: {line[:80]!r}"
                continue
            d = line[6:]
            if d == "[DONE]":
                done = True
                continue
            try:
                c = json.loads(d)
            except ValueError:
                bad = bad or f"not JSON: {d[:80]!r}"
                continue
            if "error" in c:
                ans.error = f"error event: {json.dumps(c['error'])[:200]}"
                return ans
            if c.get("usage"):
                usage = c["usage"]
            if "timings" in c:   # llama-server's: prompt tokens computed and reused
                ans.prompt_n = c["timings"].get("prompt_n")
                ans.cache_n = c["timings"].get("cache_n")
            for ch in c.get("choices") or []:
                piece = (ch.get("delta") or {}).get("content") if a.api == "chat" else ch.get("text")
                if piece:
                    if ans.ttft is None:
                        ans.ttft = time.monotonic() - t0
                    parts.append(piece)
                if ch.get("finish_reason"):
                    ans.finish = ch["finish_reason"]
        ans.latency = time.monotonic() - t0
        ans.text = "".join(parts)
        if not bad and not done:
            bad = "no data: [DONE] at the end"
        if not bad and ans.finish not in ("stop", "length"):
            bad = f"finish_reason {ans.finish!r}"
        if not bad and not (usage and isinstance(usage.get("completion_tokens"), int)):
            bad = "no usage.completion_tokens"
        ans.tokens = usage.get("completion_tokens", 0) if usage else 0
        ans.garbled = bad
        ans.ok = True
        return ans
    except (OSError, http.client.HTTPException) as e:
        ans.error = f"{type(e).__name__}: {e}"
        return ans
    finally:
        conn.close()


# ---------------------------------------------------------------- memory

class RssSampler(threading.Thread):
    """VmRSS of a process once a second."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.samples, self.stop = pid, [], threading.Event()

    def read(self):
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def run(self):
        t0 = time.monotonic()
        while not self.stop.is_set():
            v = self.read()
            if v is not None:
                self.samples.append((time.monotonic() - t0, v))
            self.stop.wait(1.0)

    def summary(self):
        if not self.samples:
            return None
        span = self.samples[-1][0]
        w = min(60.0, max(span / 3, 1.0))
        first = [v for t, v in self.samples if t <= w]
        last = [v for t, v in self.samples if t >= span - w]
        mib = lambda v: round(v / 2**20, 1)
        return {"window_s": round(w, 1), "first_mib": mib(statistics.median(first)),
                "last_mib": mib(statistics.median(last)),
                "max_mib": mib(max(v for _, v in self.samples)), "samples": len(self.samples)}


# ---------------------------------------------------------------- the load

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))] if xs else None


def references(url, a, prompts):
    """Each prompt's answer with no other request running (temperature 0)."""
    ref = {}
    for p in prompts:
        ans = stream_once(url, a, p)
        if not ans.ok or ans.garbled:
            fail(f"{url}: the single-client answer to {p!r} failed: {ans.error or ans.garbled}")
        ref[p] = ans.text
    return ref


def load(url, a, prompts, clients, ref=None, pid=None):
    """C clients for a.seconds (or a.requests in all); the figures."""
    lock = threading.Lock()
    answers = []
    issued = [0]
    t_end = time.monotonic() + a.seconds if not a.requests else None
    rss = RssSampler(pid) if pid else None

    def client(i):
        k = 0
        while True:
            with lock:
                if a.requests and issued[0] >= a.requests:
                    return
                issued[0] += 1
            if t_end and time.monotonic() >= t_end:
                return
            p = prompts[(i + k) % len(prompts)]
            ans = stream_once(url, a, p)
            if ans.ok and not ans.garbled and ref is not None and ans.text != ref.get(p):
                ans.garbled = "text differs from the single-client answer"
            with lock:
                answers.append((p, ans))
            k += 1

    if rss:
        rss.start()
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    th = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    if rss:
        rss.stop.set()
        rss.join()
    good = [x for _, x in answers if x.ok and not x.garbled]
    failed = [x for _, x in answers if not x.ok]
    garbled = [(p, x) for p, x in answers if x.ok and x.garbled]
    ttft = [x.ttft for x in good if x.ttft is not None]
    toks = sum(x.tokens for x in good)
    res = {
        "clients": clients, "seconds": round(wall, 2), "requests": len(answers),
        "good": len(good), "failed": len(failed), "garbled": len(garbled),
        "generated_tokens": toks, "tokens_per_s": round(toks / wall, 2) if wall else 0,
        "requests_per_s": round(len(good) / wall, 3) if wall else 0,
        "ttft_ms": {k: round(1e3 * v, 1) if v is not None else None for k, v in
                    (("median", statistics.median(ttft) if ttft else None),
                     ("p90", pct(ttft, 0.9)), ("max", max(ttft) if ttft else None))},
        "loadavg_before": round(load0, 2), "loadavg_after": round(os.getloadavg()[0], 2),
        "errors": sorted({x.error for x in failed})[:5],
        "garbled_examples": [{"prompt": p, "why": x.garbled, "text": x.text[:200]}
                             for p, x in garbled[:3]],
    }
    pn = [x.prompt_n for x in good if x.prompt_n is not None]
    if pn:   # llama-server reuses a slot's cached prompt prefix
        res["prompt_tokens_computed_median"] = statistics.median(pn)
        res["prompt_tokens_reused_median"] = statistics.median(
            [x.cache_n for x in good if x.cache_n is not None] or [0])
    if rss:
        res["rss"] = rss.summary()
    return res


# ---------------------------------------------------------------- the servers

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, log, timeout=1800):
    t_end = time.monotonic() + timeout
    u = urllib.parse.urlsplit(url)
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            log.seek(0)
            fail(f"the server exited ({proc.returncode}):\n{log.read()[-2000:]}")
        try:
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            c.close()
            if r.status == 200:
                return
        except OSError:
            pass
        time.sleep(0.25)
    fail(f"{url} not ready after {timeout} s")


class Server:
    """`ruvllm serve` or llama-server on a free port, stopped on exit."""

    def __init__(self, kind, a, model, slots):
        self.kind, self.port = kind, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        if kind == "ruvllm":
            self.cmd = [a.ruvllm, "serve", "-m", model, "--port", str(self.port),
                        "--parallel", str(slots), "-c", str(a.ctx), "-t", str(a.threads),
                        "--queue", str(max(64, 2 * slots))] + shlex.split(a.ruvllm_args)
        else:
            self.cmd = [a.llama_server, "-m", model, "--port", str(self.port), "-np", str(slots),
                        "-c", str(slots * a.ctx), "-t", str(a.threads), "--no-webui"] \
                       + ([] if a.llama_ram_cache else ["--cache-ram", "0"]) \
                       + shlex.split(a.llama_args)
        self.log = tempfile.TemporaryFile(mode="w+")

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        wait_ready(self.url, self.proc, self.log)
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def run_batch(a, model, prompts, parallel, ref):
    """`ruvllm run --batch` over len(prompts) lines: wall clock, tokens/s, and
    whether each text equals serve's single-client answer."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i, p in enumerate(prompts):
            line = {"id": i, "max_tokens": a.max_tokens}
            line["messages" if a.api == "chat" else "prompt"] = (
                [{"role": "user", "content": p}] if a.api == "chat" else p)
            f.write(json.dumps(line) + "\n")
        path = f.name
    cmd = [a.ruvllm, "run", "--batch", path, "-m", model, "--parallel", str(parallel),
           "-c", str(a.ctx), "-t", str(a.threads), "--temp", "0"] + \
          (["--ignore-eos"] if a.ignore_eos else []) + shlex.split(a.ruvllm_args_batch)
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    os.unlink(path)
    if p.returncode != 0:
        fail(f"{' '.join(map(shlex.quote, cmd))} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    rows = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    toks = sum(r.get("completion_tokens", 0) for r in rows)
    differ = sum(1 for r in rows if "error" in r or
                 (ref is not None and r.get("text") != ref.get(prompts[r["id"]])))
    return {"parallel": parallel, "prompts": len(prompts), "seconds": round(wall, 2),
            "generated_tokens": toks, "tokens_per_s": round(toks / wall, 2),
            "differ_from_serve": differ if ref is not None else None,
            "loadavg_after": round(os.getloadavg()[0], 2)}


# ---------------------------------------------------------------- output

def ms(v):
    return "-" if v is None else f"{v:.0f}"


def table(results):
    out = ["| server | clients | slots | requests | req/s | gen tok/s | TTFT median / p90 / worst ms "
           "| failed | garbled | RSS first / last / max MiB | load avg |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        t = r["ttft_ms"]
        m = r.get("rss")
        rss = f"{m['first_mib']:.0f} / {m['last_mib']:.0f} / {m['max_mib']:.0f}" if m else "-"
        out.append(f"| {r.get('server', '-')} | {r['clients']} | {r.get('slots', '-')} "
                   f"| {r['requests']} | {r['requests_per_s']:.2f} | {r['tokens_per_s']:.1f} "
                   f"| {ms(t['median'])} / {ms(t['p90'])} / {ms(t['max'])} | {r['failed']} "
                   f"| {r['garbled']} | {rss} | {r['loadavg_before']:.1f} |")
    return "\n".join(out)


def batch_table(batch, results):
    llama = {r["slots"]: r["tokens_per_s"] for r in results if r.get("server") == "llama-server"}
    serve = {r["slots"]: r["tokens_per_s"] for r in results if r.get("server") == "ruvllm"}
    out = ["| --parallel / slots | run --batch tok/s | prompts | differ | ruvllm serve tok/s "
           "| llama-server tok/s |", "|---:|---:|---:|---:|---:|---:|"]
    for b in batch:
        n = b["parallel"]
        f = lambda d: f"{d[n]:.1f}" if n in d else "-"
        diff = "-" if b["differ_from_serve"] is None else b["differ_from_serve"]
        out.append(f"| {n} | {b['tokens_per_s']:.1f} | {b['prompts']} | {diff} | {f(serve)} "
                   f"| {f(llama)} |")
    return "\n".join(out)


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "system": platform.platform(),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


# ---------------------------------------------------------------- main

def prompt_list(a):
    if a.prompts:
        with open(a.prompts) as f:
            ps = [l.rstrip("\n") for l in f if l.strip()]
        if not ps:
            fail(f"{a.prompts}: no prompts")
        return ps
    ps = [f"Write a short story about {t}." for t in TOPICS]
    return ps[:a.n_prompts]


def common_args(ap):
    ap.add_argument("--clients", default="4", help="client counts, comma-separated (default 4)")
    ap.add_argument("--seconds", type=float, default=20, help="per run (default 20)")
    ap.add_argument("--requests", type=int, default=0, help="per run, instead of --seconds")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--api", choices=["chat", "completions"], default="chat")
    ap.add_argument("--prompts", help="a file of prompts, one a line (default: generated)")
    ap.add_argument("--n-prompts", type=int, default=16, help="generated prompts (default 16)")
    ap.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                    help="let answers end at the end of generation")
    ap.add_argument("--no-check", dest="check", action="store_false",
                    help="do not compare texts with the single-client answers")
    ap.add_argument("--api-key", default=os.environ.get("RUVLLM_API_KEY"))
    ap.add_argument("--json", help="write every figure to this file")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    lp = sub.add_parser("load", help="load one running server")
    lp.add_argument("url", help="e.g. http://127.0.0.1:8080")
    lp.add_argument("--pid", type=int, help="the server's process, for its memory")
    common_args(lp)
    cp = sub.add_parser("compare", help="ruvllm serve beside llama-server")
    common_args(cp)
    cp.add_argument("--model", default=DEFAULT_MODEL)
    cp.add_argument("--servers", default="ruvllm,llama", help="ruvllm,llama (in this order)")
    cp.add_argument("--slots", type=int, default=0, help="parallel slots (default: = clients)")
    cp.add_argument("--ctx", type=int, default=512, help="context per slot (default 512)")
    cp.add_argument("--threads", type=int, default=os.cpu_count())
    cp.add_argument("--batch", action="store_true",
                    help="also ruvllm run --batch --parallel N for each client count N")
    cp.add_argument("--batch-prompts", type=int, default=0,
                    help="lines per run --batch (default: 2 x parallel, at least 16)")
    cp.add_argument("--ruvllm", default=os.path.join(ROOT, "build", "ruvllm"))
    cp.add_argument("--llama-server", help="default: scripts/build-llama-server.sh's")
    cp.add_argument("--ruvllm-args", default="", help="more arguments for ruvllm serve")
    cp.add_argument("--ruvllm-args-batch", default="", help="more arguments for run --batch")
    cp.add_argument("--llama-args", default="", help="more arguments for llama-server")
    cp.add_argument("--llama-ram-cache", action="store_true",
                    help="keep llama-server's RAM prompt cache (default: --cache-ram 0)")
    a = ap.parse_args()
    clients = [int(x) for x in a.clients.split(",")]
    prompts = prompt_list(a)
    out = {"machine": machine(), "args": {k: v for k, v in vars(a).items() if k != "api_key"},
           "runs": [], "batch": []}

    if a.mode == "load":
        ref = references(a.url, a, prompts) if a.check else None
        for c in clients:
            r = load(a.url, a, prompts, c, ref, a.pid)
            r["server"] = a.url
            out["runs"].append(r)
            print(f"bench-serve: {c} clients: {r['tokens_per_s']} tokens/s", file=sys.stderr)
    else:
        servers = [s.strip() for s in a.servers.split(",") if s.strip()]
        if "llama" in servers and not a.llama_server:
            a.llama_server = subprocess.run(
                ["sh", os.path.join(ROOT, "scripts", "build-llama-server.sh")], check=True,
                stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
        if not os.path.isfile(a.model):
            fail(f"{a.model}: no such model file")
        refs = {}
        for c in clients:
            slots = a.slots or c
            for kind in servers:
                name = "ruvllm" if kind == "ruvllm" else "llama-server"
                with Server(kind, a, a.model, slots) as srv:
                    if a.check and kind not in refs:
                        refs[kind] = references(srv.url, a, prompts)
                    r = load(srv.url, a, prompts, c, refs.get(kind), srv.proc.pid)
                r.update(server=name, slots=slots, command=" ".join(map(shlex.quote, srv.cmd)))
                out["runs"].append(r)
                print(f"bench-serve: {name}, {c} clients, {slots} slots: {r['tokens_per_s']} "
                      f"tokens/s, {r['failed']} failed, {r['garbled']} garbled", file=sys.stderr)
            if a.batch:
                n = max(a.batch_prompts or 2 * slots, 16 if not a.batch_prompts else 1)
                ps = [prompts[i % len(prompts)] for i in range(n)]
                b = run_batch(a, a.model, ps, slots, refs.get("ruvllm"))
                out["batch"].append(b)
                print(f"bench-serve: run --batch --parallel {slots}: {b['tokens_per_s']} tokens/s",
                      file=sys.stderr)

    m = out["machine"]
    print(f"{m['date']}, {m['cpu']} ({m['cpus']} CPUs), load average at start {m['loadavg'][0]}"
          f"; {a.api}, max_tokens {a.max_tokens}, temperature 0"
          f"{', ignore_eos' if a.ignore_eos else ''}, "
          f"{f'{a.requests} requests' if a.requests else f'{a.seconds:g} s'} per run\n")
    print(table(out["runs"]))
    if out["batch"]:
        print()
        print(batch_table(out["batch"], out["runs"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    bad = sum(r["failed"] + r["garbled"] for r in out["runs"] if r.get("server") != "llama-server")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
