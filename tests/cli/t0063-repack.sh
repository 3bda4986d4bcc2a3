#!/bin/sh
# Weights repacked at load (where the CPU has the AVX-512 VNNI kernels):
# Q4_0, IQ4_NL, Q5_0, Q8_0, Q4_K and Q6_K into the 16-row layout one kernel
# reads for prompts and decode (formats.h gemm16). The packed kernels sum a row's floats in another order than the
# row-major ones, so the scores differ by rounding only: `bench ppl`'s
# log-probabilities are no further from RUVLLM_REPACK=0's (the row-major
# path) than the scalar reference kernels' are (RUVLLM_ISA=ref), and the
# perplexity agrees to 1%. What must not differ by a bit: a prompt decoded
# in a batch with others (`run --batch`, tiles of several tokens) and
# alone (one token per step: nt = 1), and the text whatever the threads.
# Where the CPU has no packed kernel every run takes the row-major path and
# agrees trivially; the kernel test checks the packed kernels themselves.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
TEXT=${RVL_SHARED_DATA:-../shared/data}/text/wikitext-2-test.txt
if [ ! -f "$MODEL" ] || [ ! -f "$TEXT" ]; then
    skip_all "no model at $MODEL or no $TEXT"
fi
"$RUVLLM" dequant -q --type f16 "$MODEL" "$TMP/f16.gguf" || { echo "Bail out! dequant failed"; exit 1; }
head -c 6000 "$TEXT" >"$TMP/text.txt"
printf '%s\n' "The three primary colours are" "Once upon a time" "def fibonacci(n):" >"$TMP/prompts.txt"

jfield() { sed -n "s/.*\"$1\": *\\([-0-9.e]*\\).*/\\1/p" "$2" | head -n 1; }

# Q4_K_S: the ffn_down rows (1536 values) in Q4_K, the 576-value rows in
# Q5_0 (no K-quant fits them)
for q in Q4_0 IQ4_NL Q4_K_S Q8_0; do
    "$RUVLLM" quantize -q -t 2 "$TMP/f16.gguf" "$TMP/$q.gguf" $q 2>"$ERR" ||
        { not_ok "quantize $q"; continue; }
    PPL="bench ppl -m $TMP/$q.gguf -t 2 -c 128 --chunks 3 -f $TMP/text.txt"
    RUVLLM_REPACK=0 run 0 ruvllm $PPL --kl-base "$TMP/kl0.bin"
    run 0 ruvllm $PPL --kl "$TMP/kl0.bin" --json
    cp "$OUT" "$TMP/packed.json"
    RUVLLM_ISA=ref run 0 ruvllm $PPL --kl "$TMP/kl0.bin" --json
    cp "$OUT" "$TMP/ref.json"
    kp=$(jfield kl_mean "$TMP/packed.json") kr=$(jfield kl_mean "$TMP/ref.json")
    pp=$(jfield ppl "$TMP/packed.json") pb=$(jfield base_ppl "$TMP/packed.json")
    assert "$q: packed vs row-major KL ($kp) within twice the reference kernels' ($kr)" \
        "awk 'BEGIN { exit !($kp <= 2 * $kr + 1e-4 && $kp < 0.01) }'"
    assert "$q: packed perplexity $pp within 1% of row-major $pb" \
        "awk 'BEGIN { d = $pp - $pb; if (d < 0) d = -d; exit !(d <= 0.01 * $pb) }'"

    # decode in a batch (several tokens per matmul) = decode alone (one)
    run 0 ruvllm run --batch "$TMP/prompts.txt" -m "$TMP/$q.gguf" --temp 0 -n 24 --ignore-eos -t 2
    cp "$OUT" "$TMP/batch.jsonl"
    i=0
    while IFS= read -r p; do
        i=$((i + 1))
        "$RUVLLM" run --json -m "$TMP/$q.gguf" --temp 0 -n 24 --ignore-eos -t 2 "$p" \
            >"$TMP/alone.json" 2>/dev/null </dev/null
        a=$(sed -n 's/.*"text":"\([^"]*\)".*/\1/p' "$TMP/alone.json")
        b=$(sed -n "${i}p" "$TMP/batch.jsonl" | sed -n 's/.*"text":"\([^"]*\)".*/\1/p')
        assert "$q: prompt $i decoded in a batch gives its text alone" "[ -n \"\$a\" ] && [ \"\$a\" = \"\$b\" ]"
    done <"$TMP/prompts.txt"
    run 0 ruvllm run -m "$TMP/$q.gguf" -t 1 --temp 0 -n 24 --ignore-eos "Once upon a time"
    cp "$OUT" "$TMP/t1.txt"
    run 0 ruvllm run -m "$TMP/$q.gguf" -t 3 --temp 0 -n 24 --ignore-eos "Once upon a time"
    assert "$q: the same text on 1 and 3 threads" "cmp -s '$OUT' '$TMP/t1.txt'"
done
finish
