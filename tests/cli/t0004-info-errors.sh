#!/bin/sh
# ruvllm info on bad input: clear errors naming the file, exit 1, no crash;
# good files after bad ones are still shown.
. tests/cli/lib.sh
D=${RVL_SHARED_DATA:-../shared/data}
V=$D/tokenizers/ggml-vocab-gpt-2.gguf

run 1 ruvllm info "$TMP/nope.gguf"
err_has "ruvllm info: $TMP/nope.gguf: No such file or directory"
out_empty

printf 'hello world, not a model' >"$TMP/junk.bin"
run 1 ruvllm info "$TMP/junk.bin"
err_has "junk.bin: not a GGUF or safetensors file"

: >"$TMP/empty.gguf"
run 1 ruvllm info "$TMP/empty.gguf"
err_has "empty.gguf"

# a truncated real file: the error names the file and a byte offset
head -c 5000 "$V" >"$TMP/trunc.gguf"
run 1 ruvllm info "$TMP/trunc.gguf"
err_has "trunc.gguf"
err_has "byte"

# GGUF magic with a version from the future
printf 'GGUF\011\000\000\000' >"$TMP/v9.gguf"
head -c 64 /dev/zero >>"$TMP/v9.gguf"
run 1 ruvllm info "$TMP/v9.gguf"
err_has "version 9"

# a bad file among good ones: the good ones are printed, the status is 1
run 1 ruvllm info "$V" "$TMP/junk.bin" "$V"
assert "both good files shown" "[ \$(grep -c '^file: ' '$OUT') = 2 ]"

# --json on several files is one array
run 0 ruvllm info --json --no-tensors "$V" "$V"
assert "JSON array of 2" "[ \"\$(head -c1 '$OUT')\" = '[' ] && [ \$(grep -c '\"format\": \"gguf\"' '$OUT') = 2 ]"

# a vocab-only file: metadata, no tensors
run 0 ruvllm info "$V"
out_has "format: GGUF v3"
out_has "tokenizer.ggml.model"
out_has "tensors: 0"
run 0 ruvllm info --all --no-tensors "$V"
out_lacks "more]"
# safetensors: a file, and a Hugging Face directory holding model.safetensors
ST=tests/fuzz/corpus/safetensors/gen-valid-all-dtypes.safetensors
run 0 ruvllm info "$ST"
out_has "format: safetensors, 699 B"
out_has "BOOL"
out_has "totals: 10 tensors, 30 elements"
mkdir "$TMP/hf"
cp "$ST" "$TMP/hf/model.safetensors"
run 0 ruvllm info --json --no-metadata "$TMP/hf"
out_has '"format": "safetensors"'
out_has '"name": "t9"'
# a corrupt safetensors header names the file
printf '\020\000\000\000\000\000\000\000{"t":{"dtype":1}}' >"$TMP/bad.safetensors"
run 1 ruvllm info "$TMP/bad.safetensors"
err_has "bad.safetensors"
finish
