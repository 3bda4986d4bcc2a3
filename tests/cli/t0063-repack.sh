#!/bin/sh
# Q4_0, IQ4_NL and Q4_K weights run from the packed decode layout (formats.h
# gemv8; model.c packs them at load where the CPU has the AVX-512 VNNI
# kernel): greedy text and every scored log-probability of `bench ppl`
# (prompt processing, which unpacks each group for the tiles) are the same
# bits as with RUVLLM_REPACK=0, the row-major path. Where the CPU has no
# packed kernel both runs take the row-major path and agree trivially; the
# kernel test checks the packed kernel itself on every variant that runs.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
TEXT=${RVL_SHARED_DATA:-../shared/data}/text/wikitext-2-test.txt
if [ ! -f "$MODEL" ] || [ ! -f "$TEXT" ]; then
    skip_all "no model at $MODEL or no $TEXT"
fi
"$RUVLLM" dequant -q --type f16 "$MODEL" "$TMP/f16.gguf" || { echo "Bail out! dequant failed"; exit 1; }
head -c 6000 "$TEXT" >"$TMP/text.txt"

# Q4_K_S: the ffn_down rows (1536 values) in Q4_K (576-value rows are no
# K-quant)
for q in Q4_0 IQ4_NL Q4_K_S; do
    "$RUVLLM" quantize -q -t 2 "$TMP/f16.gguf" "$TMP/$q.gguf" $q 2>"$ERR" ||
        { not_ok "quantize $q"; continue; }
    for r in 1 0; do
        RUVLLM_REPACK=$r run 0 ruvllm run -m "$TMP/$q.gguf" -t 2 --temp 0 -n 40 --ignore-eos \
            "The three primary colours are"
        cp "$OUT" "$TMP/run$r.txt"
        RUVLLM_REPACK=$r run 0 ruvllm bench ppl -m "$TMP/$q.gguf" -t 2 -c 128 --chunks 3 \
            -f "$TMP/text.txt" --kl-base "$TMP/kl$r.bin"
    done
    assert "$q: greedy text generated" "[ \$(wc -c <$TMP/run1.txt) -gt 40 ]"
    assert "$q: packed and row-major weights generate the same text" "cmp -s $TMP/run1.txt $TMP/run0.txt"
    assert "$q: packed and row-major weights score the same log-probabilities, bit for bit" \
        "cmp -s $TMP/kl1.bin $TMP/kl0.bin"
done
finish
