#!/bin/sh
# `ruvllm bench model --profile`: per test, the time of each kind of op
# of the CPU forward pass (rvl_ctx_params.profile, RVL_PROF_KINDS in
# lib/ruvllm.h): a table per test after the results (md), a "profile"
# object per row (json: kind -> ms, share, us_per_token, calls). Every
# nanosecond of the backend's decode is in one kind ("other" takes the
# rest), so the shares add up to the test's time less the bench's own
# loop. Tiny tests, one repetition: nothing here depends on the speed.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi
PY=$(command -v python3) || skip_all "no python3 (reads the JSON)"

# md: the results table, then one profile block per test
run 0 ruvllm bench model -m "$MODEL" -t 1 -p 8 -n 2 -r 1 --profile
out_has "| llama 135M Q4_1 "
out_has "profile pp8, llama 135M Q4_1, 1 thread: "
out_has "profile tg2, llama 135M Q4_1, 1 thread: "
out_has "| op             |         ms |  share |   us/token |    calls |"
out_has "| mm_ffn_gate_up |"
out_has "| mm_output      |"
assert "md: a block per test, after the results table" \
    "[ \$(grep -c '^profile ' '$OUT') = 2 ] &&
     [ \$(grep -n '^profile pp8' '$OUT' | cut -d: -f1) -gt \$(grep -n ' tg2 ' '$OUT' | cut -d: -f1) ]"
assert "md: the decode test's attention is attn_decode, the prompt's attn_prefill" \
    "sed -n '/^profile pp8/,/^profile tg2/p' '$OUT' | grep -q '| attn_prefill ' &&
     ! sed -n '/^profile pp8/,/^profile tg2/p' '$OUT' | grep -q '| attn_decode ' &&
     sed -n '/^profile tg2/,\$p' '$OUT' | grep -q '| attn_decode '"
# without --profile: the table alone, as before
run 0 ruvllm bench model -m "$MODEL" -t 1 -p 8 -n 2 -r 1
out_lacks "profile"
out_lacks "mm_qkv"
run 0 ruvllm bench model -m "$MODEL" -t 1 -p 8 -n 0 -r 1 --json
out_lacks '"profile"'

# json at a depth, two threads, two repetitions: each row's profile
run 0 ruvllm bench model -m "$MODEL" -t 2 -p 40 -n 3 -d 64 -r 2 --profile --json
cat >"$TMP/check.py" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
bad = []
def need(cond, what):
    if not cond:
        bad.append(what)
need([r["test"] for r in rows] == ["pp40@d64", "tg3@d64"], "the tests: %s" % [r["test"] for r in rows])
for r in rows:
    p, t = r["profile"], r["test"]
    for k in ("embed", "norm", "act_quant", "mm_qkv", "rope", "kv_write", "mm_attn_out",
              "mm_ffn_gate_up", "act", "mm_ffn_down", "mm_output", "other"):
        need(k in p, "%s: no %s" % (t, k))
    for k, v in p.items():
        need(sorted(v) == ["calls", "ms", "share", "us_per_token"], "%s %s: fields %s" % (t, k, sorted(v)))
        need(v["calls"] >= 1 and v["ms"] >= 0, "%s %s: %s" % (t, k, v))
    for k in ("mm_qkv", "mm_attn_out", "mm_ffn_gate_up", "mm_ffn_down", "mm_output"):
        need(p.get(k, {}).get("ms", 0) > 0, "%s: %s is not timed" % (t, k))
    # 30 layers: one Q/K/V job, one output projection per chunk of 32 and layer
    chunks = -(-r["n_prompt"] // 32) if r["n_prompt"] else r["n_gen"]
    need(p["mm_qkv"]["calls"] == 30 * chunks, "%s: mm_qkv calls %d" % (t, p["mm_qkv"]["calls"]))
    need(p["mm_output"]["calls"] == (1 if r["n_prompt"] else r["n_gen"]),
         "%s: mm_output calls %d" % (t, p["mm_output"]["calls"]))
    attn = "attn_prefill" if r["n_prompt"] else "attn_decode"
    other = "attn_decode" if r["n_prompt"] else "attn_prefill"
    need(attn in p and p[attn]["ms"] > 0 and other not in p, "%s: attention %s" % (t, sorted(p)))
    for k in ("mm_moe_experts", "moe_route", "moe_load", "lora"):
        need(k not in p, "%s: %s in a dense model without adapters" % (t, k))
    share = sum(v["share"] for v in p.values())
    need(0.90 <= share <= 1.01, "%s: the shares sum to %.4f" % (t, share))
    ms = sum(v["ms"] for v in p.values())
    need(abs(ms - share * r["avg_ms"]) <= 0.01 * r["avg_ms"], "%s: ms %.3f, share %.4f of %.3f" % (t, ms, share, r["avg_ms"]))
    n = r["n_prompt"] + r["n_gen"]
    for k, v in p.items():
        need(abs(v["us_per_token"] * n / 1e3 - v["ms"]) <= 1e-6 * max(1, v["ms"]), "%s %s: per token" % (t, k))
print("\n".join(bad))
sys.exit(1 if bad else 0)
EOF
assert "json: every row's profile has the op kinds, matmuls timed, shares summing to 90-101%" \
    "'$PY' '$TMP/check.py' '$OUT' >'$TMP/why' 2>&1 || { sed 's/^/#   /' '$TMP/why'; false; }"

# a mixture of experts: its experts and router are kinds of their own
TINY=tests/data/tiny/qwen2moe.gguf
if [ -f "$TINY" ]; then
    run 0 ruvllm bench model -m "$TINY" -t 1 -p 8 -n 1 -r 1 --profile --json
    assert "json: a MoE model's profile has mm_moe_experts, mm_moe_shared, moe_route and moe_load" \
        "'$PY' -c 'import json,sys; p=json.load(open(sys.argv[1]))[0][\"profile\"]; sys.exit(not (all(p[k][\"ms\"] > 0 for k in (\"mm_moe_experts\", \"mm_moe_shared\", \"moe_route\")) and \"moe_load\" in p and \"mm_ffn_gate_up\" not in p))' '$OUT'"
fi

# bad combinations
run 2 ruvllm bench model -m "$MODEL" -p 8 -n 0 -r 1 --profile -o csv
err_has "--profile prints a table per test (-o md) or a \"profile\" object per row (-o json), not CSV"
out_empty
run 2 ruvllm bench kernels --profile --filter nothing
err_has "option '--profile' does not apply to 'bench kernels'"
finish
