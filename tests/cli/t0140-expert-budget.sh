#!/bin/sh
# --expert-budget MIB: a mixture of experts whose experts do not fit in the
# budget still runs, reading them from the file as needed, and writes the
# same greedy text as with every expert resident (the tiny MoE models of
# tests/data/tiny: 192 to 768 KiB of experts, so budgets of a tenth of a
# MiB stream them); --stats says whether they were streamed, with the hit
# rate and the bytes read per token; bench model and chat's /stats report
# the same; values that are no budget are refused before anything runs,
# and a budget below the model's minimum names the minimum.
. tests/cli/lib.sh

T=tests/data/tiny
unset RUVLLM_EXPERT_BUDGET RUVLLM_EXPERT_PREFETCH

for m in mixtral qwen3moe qwen2moe; do
    run 0 ruvllm run -m $T/$m.gguf -n 24 --temp 0 --ignore-eos --stats "hello world"
    cp "$OUT" "$TMP/$m.resident"
    err_has "experts: resident"
    for t in 1 2; do
        run 0 ruvllm run -m $T/$m.gguf -n 24 --temp 0 --ignore-eos --stats -t $t \
            --expert-budget 0.1 "hello world"
        assert "$m, $t threads: streamed experts give the resident text" \
            "cmp -s '$OUT' '$TMP/$m.resident' && [ -s '$OUT' ]"
        err_has "experts: streamed, budget 102.4 KiB of"
        err_has "hit rate"
        err_has "KiB per token"
    done
    # without the read-ahead thread too
    RUVLLM_EXPERT_PREFETCH=0 run 0 ruvllm run -m $T/$m.gguf -n 24 --temp 0 --ignore-eos --stats \
        --expert-budget 0.1 "hello world"
    assert "$m: streamed without read-ahead gives the resident text" \
        "cmp -s '$OUT' '$TMP/$m.resident'"
    err_has "misses; 0 read ahead, 0 of them used"
done

# a budget that holds every expert: resident
run 0 ruvllm run -m $T/mixtral.gguf -n 4 --temp 0 --stats --expert-budget 1 "hello"
err_has "experts: resident, 192.0 KiB"
# the environment's budget, when no option gives one
RUVLLM_EXPERT_BUDGET=abc run 1 ruvllm run -m $T/mixtral.gguf -n 4 "hello"
err_has "RUVLLM_EXPERT_BUDGET: 'abc' is not a number of MiB"

# values that are no budget: usage errors before the model is opened
for v in 0 -1 1e30 lots ""; do
    run 2 ruvllm run -m $T/mixtral.gguf -n 4 --expert-budget "$v" "hello"
    err_has "--expert-budget"
    out_empty
done
# below the model's minimum (4 slots of 24 KiB): refused at open, naming it
run 1 ruvllm run -m $T/mixtral.gguf -n 4 --expert-budget 0.05 "hello"
err_has "ruvllm run: $T/mixtral.gguf: an expert budget of 0.05 MiB is below this model's minimum of 0.10 MiB (4 experts of 0.02 MiB"
out_empty

# a dense model has nothing to budget
run 0 ruvllm run -m $T/llama.gguf -n 4 --temp 0 --stats --expert-budget 0.1 "hello"
assert "no experts line for a dense model" "! grep -q experts '$ERR'"

# bench model and chat report the same
run 0 ruvllm bench model -m $T/qwen2moe.gguf -p 8 -n 8 -r 1 --expert-budget 0.1
err_has "experts (all tests and warm-ups): streamed"
err_has "hit rate"
run 2 ruvllm bench kernels --expert-budget 1
err_has "option '--expert-budget' does not apply to 'bench kernels'"
run_in "/stats
" 0 ruvllm chat -m $T/mixtral.gguf --expert-budget 0.1
err_has "experts    streamed"

finish
