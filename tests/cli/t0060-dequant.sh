#!/bin/sh
# ruvllm dequant: every tensor of the default model (Q8_0 embeddings, Q4_1
# matrices, F32 norms) to f32/f16/bf16; metadata copied with
# general.file_type updated; the file runs; errors leave nothing at OUT.
# The values: every tensor's bytes are what gguf-py's dequantize makes of
# it (rounded to f16/bf16 by gguf-py's quantize), by the SHA-256 digests
# tests/ref/check_dequant.py --golden wrote to tests/ref/dequant/; that
# script also checks the values directly and the file in llama.cpp.
. tests/cli/lib.sh

MODEL=${RVL_DEQUANT_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi

# the tensor table of `ruvllm info`: "index name type ... bytes offset"
types() { ruvllm info --no-metadata "$1" | awk '$1 ~ /^[0-9]+$/ { print $2, $3 }'; }

for t in f32 f16 bf16; do
    run 0 ruvllm dequant --type $t "$MODEL" "$TMP/m-$t.gguf"
    err_has "ruvllm dequant: wrote $TMP/m-$t.gguf ($t)"
    out_empty
    T=$(echo $t | tr a-z A-Z)
    types "$MODEL" >"$TMP/in-types"
    types "$TMP/m-$t.gguf" >"$TMP/out-types"
    assert "$t: same tensors in the same order" \
        "[ \"\$(cut -d' ' -f1 $TMP/in-types)\" = \"\$(cut -d' ' -f1 $TMP/out-types)\" ]"
    assert "$t: 1-D tensors F32, matrices $T" \
        "! ruvllm info --no-metadata $TMP/m-$t.gguf | awk '\$1 ~ /^[0-9]+\$/ && ((\$3 != \"F32\" && \$5 != \"x\") || (\$3 != \"$T\" && \$5 == \"x\"))' | grep -q ."
    run 0 ruvllm info "$TMP/m-$t.gguf"
    case $t in f32) ft=0 ;; f16) ft=1 ;; bf16) ft=32 ;; esac
    assert "$t: general.file_type $ft" "grep -q -E 'general.file_type +u32 +$ft\$' $OUT"
    out_has "tokenizer.chat_template"
    out_has "tokenizer.ggml.merges"
    # the goldens are of the default model (RVL_DEQUANT_MODEL picks another)
    if [ -z "${RVL_DEQUANT_MODEL:-}" ]; then
        tensor_hashes "$TMP/m-$t.gguf" >"$TMP/m-$t.tsv"
        assert "$t: every tensor's data is gguf-py's (tests/ref/dequant/smollm2-$t.tsv)" \
            "cmp -s tests/ref/dequant/smollm2-$t.tsv $TMP/m-$t.tsv"
        if ! cmp -s "tests/ref/dequant/smollm2-$t.tsv" "$TMP/m-$t.tsv"; then
            diff "tests/ref/dequant/smollm2-$t.tsv" "$TMP/m-$t.tsv" | head -n 5 | sed 's/^/#   /'
        fi
    fi
done
# metadata identical apart from general.file_type
meta() { ruvllm info --all --no-tensors "$1" | sed '/^totals:/,$d' | grep -v -e general.file_type -e '^file:' -e '^format:'; }
meta "$MODEL" >"$TMP/meta-in"
meta "$TMP/m-f16.gguf" >"$TMP/meta-out"
assert "metadata copied (but general.file_type)" "cmp -s $TMP/meta-in $TMP/meta-out"

# the f32 file runs and gives the greedy text of the f16 one up to kernel
# rounding: check it generates text
run 0 ruvllm run -m "$TMP/m-f32.gguf" --temp 0 -n 8 -t 2 "The capital of France is"
assert "f32 model generates" "[ -s $OUT ]"
run 0 ruvllm run -m "$TMP/m-f16.gguf" --temp 0 -n 8 -t 2 "The capital of France is"
out_has "Paris"

# F16 -> F16 and F32 -> F32 copy tensors byte for byte
run 0 ruvllm dequant -q --type f16 "$TMP/m-f16.gguf" "$TMP/m-f16b.gguf"
out_empty
err_empty
assert "f16 -> f16 is a copy" "cmp -s $TMP/m-f16.gguf $TMP/m-f16b.gguf"
rm -f "$TMP/m-f16b.gguf" "$TMP/m-bf16.gguf"

# plain progress lines when stderr is not a terminal
run 0 ruvllm dequant --type f16 "$TMP/m-f32.gguf" "$TMP/again.gguf"
err_has "[ 272/ 272]"
err_has "F32    -> F16"
rm -f "$TMP/again.gguf"

# --format safetensors: a Hugging Face directory (tests/ref/check_dequant_hf.py
# loads it in transformers)
run 0 ruvllm dequant --format safetensors "$MODEL" "$TMP/hf"
err_has "ruvllm dequant: wrote $TMP/hf (f16)"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
    assert "hf: $f written" "[ -s $TMP/hf/$f ]"
done
assert "hf: config names the architecture" "grep -q LlamaForCausalLM $TMP/hf/config.json"
assert "hf: tied embeddings" "grep -q '\"tie_word_embeddings\":.*true' $TMP/hf/config.json"
assert "hf: chat template copied" "grep -q chat_template $TMP/hf/tokenizer_config.json"
assert "hf: merges copied" "grep -q '\"merges\"' $TMP/hf/tokenizer.json"
assert "hf: no temporary directory left" "! ls $TMP | grep -q 'hf\.tmp'"
run 0 ruvllm info --no-metadata "$TMP/hf"
out_has "model.layers.0.self_attn.q_proj.weight"
out_has "model.embed_tokens.weight"
out_has "272 tensors"
run 1 ruvllm dequant --format safetensors "$MODEL" "$TMP/hf"
err_has "directory is not empty"
run 1 ruvllm dequant --format safetensors "$MODEL" "$TMP/m-f16.gguf"
err_has "is not a directory"
run 1 ruvllm dequant --format safetensors "$RVL_SHARED_DATA/tokenizers/ggml-vocab-falcon.gguf" "$TMP/hf2"
err_has "architecture falcon"
assert "unsupported architecture leaves nothing" "[ ! -e $TMP/hf2 ] && ! ls $TMP | grep -q 'hf2\.tmp'"
rm -rf "$TMP/hf"

# errors: usage 2, runtime 1; nothing left at OUT, no temporaries
run 2 ruvllm dequant "$MODEL"
err_has "missing argument"
run 2 ruvllm dequant --type q4_0 "$MODEL" "$TMP/x.gguf"
run 1 ruvllm dequant "$MODEL" "$MODEL"
err_has "output is the input file"
ln -s "$MODEL" "$TMP/link.gguf"
run 1 ruvllm dequant "$TMP/link.gguf" "$MODEL"
err_has "output is the input file"
run 1 ruvllm dequant "$TMP/nosuch.gguf" "$TMP/x.gguf"
err_has "nosuch.gguf"
printf 'GGUF\003\000\000\000\377\377\377\377\377\377\377\377' >"$TMP/corrupt.gguf"
run 1 ruvllm dequant "$TMP/corrupt.gguf" "$TMP/x.gguf"
err_has "ruvllm dequant: $TMP/corrupt.gguf"
head -c 50000000 "$TMP/m-f16.gguf" >"$TMP/truncated.gguf"
run 1 ruvllm dequant "$TMP/truncated.gguf" "$TMP/x.gguf"
err_has "truncated.gguf"
run 1 ruvllm dequant "$MODEL" "$TMP/nodir/x.gguf"
assert "nothing at OUT after failures" "[ ! -e $TMP/x.gguf ]"
assert "no temporaries left" "! ls $TMP | grep -q '\.tmp\.'"

# Ctrl-C: exit 130, nothing at OUT. Deterministic: stderr is a FIFO whose
# buffer a filler has already filled, so dequant blocks writing its first
# progress line, before the first tensor is converted, and stays blocked
# until the signal has been sent; only then is the FIFO drained.
mkfifo "$TMP/fifo"
exec 3<>"$TMP/fifo"                 # a reader: the opens below do not block
dd if=/dev/zero bs=4096 count=1024 2>/dev/null >&3 &
filler=$!
# full once the filler has written and sleeps (its only blocking call)
i=0
while [ $i -lt 200 ]; do
    state=$(cut -d' ' -f3 /proc/$filler/stat 2>/dev/null)
    wrote=$(sed -n 's/^wchar: //p' /proc/$filler/io 2>/dev/null)
    [ "$state" = S ] && [ "${wrote:-0}" -ge 4096 ] && break
    sleep 0.1
    i=$((i + 1))
done
"$RUVLLM" dequant --type f32 "$TMP/m-f16.gguf" "$TMP/int.gguf" 2>"$TMP/fifo" 3>&- &
pid=$!
wait_sigint_handler $pid
kill -INT $pid
tr -d '\000' <"$TMP/fifo" >"$ERR" 3>&- &
drain=$!
exec 3>&-
wait $pid
st=$?
wait $filler $drain
assert "interrupted dequant exits 130 (got $st)" "[ $st = 130 ]"
assert "interrupted: nothing at OUT" "[ ! -e $TMP/int.gguf ]"
assert "interrupted: no temporaries" "! ls $TMP | grep -q '\.tmp\.'"
finish
