#!/bin/sh
# MXFP4 (gpt-oss's expert format) through the CLI, on the tiny Mixtral
# (tests/data/tiny/mixtral.gguf, F32, 4 experts per layer):
#  - `ruvllm quantize ... MXFP4_MOE` writes llama.cpp's file: every
#    tensor's type and bytes (MXFP4 expert tensors, Q8_0 for the rest)
#    equal llama_model_quantize's with LLAMA_FTYPE_MOSTLY_MXFP4_MOE
#    (tests/ref/quantize/mxfp4-mixtral.tsv, from
#    tests/ref/gen_mxfp4_quantize_goldens.py);
#  - --tensor-type sets MXFP4 on chosen tensors of any mix;
#  - `ruvllm dequant --type f32` of that file gives gguf-py's floats
#    (mxfp4-mixtral-f32.tsv);
#  - the MXFP4 model runs (the experts through the MXFP4 . Q8_0 dot).
. tests/cli/lib.sh
REF=tests/ref/quantize
SRC=tests/data/tiny/mixtral.gguf

run 0 ruvllm quantize -t 2 "$SRC" "$TMP/mx.gguf" MXFP4_MOE
err_has "ruvllm quantize: wrote $TMP/mx.gguf (MXFP4_MOE)"
tensor_hashes "$TMP/mx.gguf" >"$TMP/mx.tsv"
grep -v '^#' "$REF/mxfp4-mixtral.tsv" >"$TMP/want.tsv"
assert "MXFP4_MOE: types and bytes of all 23 tensors equal llama.cpp's" "cmp -s $TMP/want.tsv $TMP/mx.tsv"
if ! cmp -s "$TMP/want.tsv" "$TMP/mx.tsv"; then
    diff "$TMP/want.tsv" "$TMP/mx.tsv" | head -n 5 | sed 's/^/#   /'
fi
assert "six MXFP4 expert tensors" "[ \$(grep -c '_exps.weight	MXFP4	' $TMP/mx.tsv) -eq 6 ]"
run 0 ruvllm info "$TMP/mx.gguf"
assert "general.file_type 38 (MXFP4_MOE)" "grep -q -E 'general.file_type +u32 +38\$' $OUT"

# per tensor, in another mix
run 0 ruvllm quantize -q -t 2 --tensor-type 'attn_q=MXFP4' "$SRC" "$TMP/q8.gguf" Q8_0
tensor_hashes "$TMP/q8.gguf" >"$TMP/q8.tsv"
assert "--tensor-type attn_q=MXFP4: the attn_q tensors" \
    "[ \$(grep -c 'attn_q.weight	MXFP4	' $TMP/q8.tsv) -eq 2 ]"
assert "--tensor-type attn_q=MXFP4: nothing else" "[ \$(grep -c '	MXFP4	' $TMP/q8.tsv) -eq 2 ]"

run 0 ruvllm dequant -q --type f32 "$TMP/mx.gguf" "$TMP/f32.gguf"
tensor_hashes "$TMP/f32.gguf" >"$TMP/f32.tsv"
grep -v '^#' "$REF/mxfp4-mixtral-f32.tsv" >"$TMP/want32.tsv"
assert "dequant of MXFP4_MOE: every tensor is gguf-py's float32" "cmp -s $TMP/want32.tsv $TMP/f32.tsv"
if ! cmp -s "$TMP/want32.tsv" "$TMP/f32.tsv"; then
    diff "$TMP/want32.tsv" "$TMP/f32.tsv" | head -n 5 | sed 's/^/#   /'
fi

run 0 ruvllm run -m "$TMP/mx.gguf" --temp 0 -n 8 -t 2 "hello"
assert "the MXFP4 model generates" "[ -s $OUT ]"
finish
