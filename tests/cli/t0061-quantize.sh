#!/bin/sh
# ruvllm quantize on the tiny models of issue 18's families and issue 19's
# mixtures of experts (below), and
# on the default model: dequant to F16, then quantize to
# Q8_0, Q5_0, Q4_0 and Q4_K_M, and every tensor's type and bytes equal
# llama.cpp's llama_model_quantize on the same F16 file (SHA-256 prefixes
# in tests/ref/quantize/smollm2-TYPE.tsv, made by
# tests/ref/gen_quantize_goldens.py). The files run. Options, the summary,
# --dry-run, and bad input: usage errors exit 2, runtime errors 1, Ctrl-C
# 130, and nothing is ever left at OUT.
. tests/cli/lib.sh

MODEL=${RVL_QUANTIZE_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf}
REF=tests/ref/quantize

# name, type and sha256 prefix of every tensor (lib.sh)
hashes() { tensor_hashes "$@"; }

# issue 18's families and issue 19's mixtures of experts (mixtral,
# qwen3moe with llama.cpp's 8-expert rules, qwen2moe with a shared
# expert; 3-D ffn_*_exps quantized an expert at a time, routers kept;
# deepseek2/deepseek3 with MLA's attn_kv_a_mqa, attn_k_b, attn_v_b, shared
# experts, exp_probs_b; gpt-oss with biases and sinks, also from MXFP4
# experts; these also in MXFP4_MOE, which makes every 3-D tensor MXFP4
# where its rows allow, DeepSeek's attn_v_b too, as llama.cpp does): the
# F32 tiny models of tests/data/tiny through each
# mix give llama.cpp's types (its per-family rules, and its fallbacks for
# rows that are not whole K-quant blocks: these are 64 wide) and bytes
# (tests/ref/quantize/family-NAME.tsv: MIX, name, type, SHA-256 prefix;
# tests/ref/gen_quant_family_goldens.py)
for g in "$REF"/family-*.tsv; do
    [ -f "$g" ] || continue
    name=$(basename "$g" .tsv)
    name=${name#family-}
    : >"$TMP/fam.tsv"
    for q in $(cut -f1 "$g" | uniq); do
        run 0 ruvllm quantize -q -t 2 "tests/data/tiny/$name.gguf" "$TMP/fam.gguf" "$q"
        hashes "$TMP/fam.gguf" | sed "s/^/$q\t/" >>"$TMP/fam.tsv"
    done
    assert "$name: $(cut -f1 "$g" | uniq | tr '\n' ' ')types and bytes of every tensor equal llama.cpp's" \
        "cmp -s $g $TMP/fam.tsv"
    if ! cmp -s "$g" "$TMP/fam.tsv"; then
        diff "$g" "$TMP/fam.tsv" | head -n 5 | sed 's/^/#   /'
    fi
    rm -f "$TMP/fam.gguf"
done

if [ ! -f "$MODEL" ]; then
    echo "# the rest skipped: no model at $MODEL (make model)"
    finish
fi
F16=$TMP/f16.gguf
"$RUVLLM" dequant -q --type f16 "$MODEL" "$F16" || { echo "Bail out! dequant failed"; exit 1; }

for q in Q8_0 Q5_0 Q4_0 Q4_K_M; do
    run 0 ruvllm quantize -t 2 "$F16" "$TMP/$q.gguf" $q
    err_has "ruvllm quantize: wrote $TMP/$q.gguf ($q)"
    err_has "  tensors: "
    err_has "bpw) -> "
    out_empty
    hashes "$TMP/$q.gguf" >"$TMP/$q.tsv"
    assert "$q: types and bytes of all 272 tensors equal llama.cpp's" "cmp -s $REF/smollm2-$q.tsv $TMP/$q.tsv"
    if ! cmp -s "$REF/smollm2-$q.tsv" "$TMP/$q.tsv"; then
        diff "$REF/smollm2-$q.tsv" "$TMP/$q.tsv" | head -n 5 | sed 's/^/#   /'
    fi
done
run 0 ruvllm info "$TMP/Q4_K_M.gguf"
assert "general.file_type 15 (Q4_K_M)" "grep -q -E 'general.file_type +u32 +15\$' $OUT"
assert "general.quantization_version 2" "grep -q -E 'general.quantization_version +u32 +2\$' $OUT"
run 0 ruvllm run -m "$TMP/Q8_0.gguf" --temp 0 -n 8 -t 2 "The capital of France is"
out_has "Paris"
run 0 ruvllm run -m "$TMP/Q4_K_M.gguf" --temp 0 -n 8 -t 2 "The capital of France is"
assert "Q4_K_M generates" "[ -s $OUT ]"
rm -f "$TMP/Q5_0.gguf" "$TMP/Q4_0.gguf" "$TMP/Q4_K_M.gguf"

# a Hugging Face directory (written by dequant) goes back through quantize
# to the same tensors: the import restores names, Q/K row order, vocabulary
run 0 ruvllm dequant -q --format safetensors "$MODEL" "$TMP/hf"
run 0 ruvllm quantize -q -t 2 "$TMP/hf" "$TMP/hf-Q8_0.gguf" Q8_0
hashes "$TMP/hf-Q8_0.gguf" >"$TMP/hf-Q8_0.tsv"
assert "HF directory -> Q8_0: all 272 tensors equal llama.cpp's from the GGUF" \
    "cmp -s $REF/smollm2-Q8_0.tsv $TMP/hf-Q8_0.tsv"
run 0 ruvllm info "$TMP/hf-Q8_0.gguf"
out_has 'tokenizer.ggml.pre                           string           "smollm"'
out_has "tokenizer.chat_template"
out_has "[string; 48900]"
run 0 ruvllm run -m "$TMP/hf-Q8_0.gguf" --temp 0 -n 8 -t 2 "The capital of France is"
out_has "Paris"
assert "the import is not left behind" "! ls $TMP | grep -q import"
run 0 ruvllm dequant -q --type f16 "$TMP/hf/model.safetensors" "$TMP/hf-f16.gguf"
hashes "$TMP/hf-f16.gguf" | sort >"$TMP/a.tsv"
hashes "$F16" | sort >"$TMP/b.tsv"
assert "HF -> f16 GGUF has the tensors of GGUF -> f16" "cmp -s $TMP/a.tsv $TMP/b.tsv"
rm -f "$TMP/hf-Q8_0.gguf" "$TMP/hf-f16.gguf"
# broken directories
mkdir "$TMP/bad"
cp "$TMP/hf/model.safetensors" "$TMP/bad/"
run 1 ruvllm quantize "$TMP/bad" "$TMP/x.gguf" Q8_0
err_has "config.json: missing"
sed 's/LlamaForCausalLM/GPTNeoXForCausalLM/' "$TMP/hf/config.json" >"$TMP/bad/config.json"
run 1 ruvllm quantize "$TMP/bad" "$TMP/x.gguf" Q8_0
err_has "architecture 'GPTNeoXForCausalLM'"
cp "$TMP/hf/config.json" "$TMP/bad/"
printf '{"model": {"type": "BPE", "vocab": ' >"$TMP/bad/tokenizer.json"
run 1 ruvllm quantize "$TMP/bad" "$TMP/x.gguf" Q8_0
err_has "tokenizer.json: not valid JSON"
assert "nothing at OUT, no import left" "[ ! -e $TMP/x.gguf ] && ! ls $TMP | grep -q import"
rm -rf "$TMP/hf" "$TMP/bad"

# plain progress lines, then the summary
run 0 ruvllm quantize --stats "$F16" "$TMP/s.gguf" Q8_0
err_has "[ 272/ 272]"
err_has "F16    -> Q8_0"
err_has "rel. err"
err_has "  error:   RMSE"
run 0 ruvllm quantize --json -q "$F16" "$TMP/s.gguf" q8_0
out_has '"type": "Q8_0"'
out_has '"bytes_out": '
err_empty

# --dry-run: the plan and sizes, nothing written
run 0 ruvllm quantize --dry-run "$F16" "$TMP/dry.gguf" Q6_K
err_has "dry run (Q6_K), nothing written"
err_has "Q6_K"
assert "--dry-run writes nothing" "[ ! -e $TMP/dry.gguf ]"
run 0 ruvllm quantize --dry-run "$F16" Q4_K_M
err_has "fallback: 180 tensors"

# options
run 0 ruvllm quantize -q --pure --leave-output --tensor-type 'attn_(q|k)=q8_0' "$F16" "$TMP/o.gguf" Q4_0
run 0 ruvllm info --no-metadata "$TMP/o.gguf"
out_has "blk.0.attn_q.weight                  Q8_0"
out_has "blk.0.attn_v.weight                  Q4_0"
out_has "token_embd.weight                    Q4_0"
run 0 ruvllm quantize -q --token-embedding-type q8_0 "$F16" "$TMP/o.gguf" Q4_0
run 0 ruvllm info --no-metadata "$TMP/o.gguf"
out_has "token_embd.weight                    Q8_0"
run 0 ruvllm quantize -q "$F16" "$TMP/o.gguf" RVL_I4S_G64
run 0 ruvllm info "$TMP/o.gguf"
out_has "RVL_I4S_G64"
out_has "ruvllm.file_type"
run 0 ruvllm run -m "$TMP/o.gguf" --temp 0 -n 4 -t 2 "Hello"
rm -f "$TMP/o.gguf" "$TMP/s.gguf"

# requantizing needs --allow-requantize
run 1 ruvllm quantize "$MODEL" "$TMP/x.gguf" Q4_0
err_has "is already Q4_1"
err_has "--allow-requantize"
run 0 ruvllm quantize -q --allow-requantize "$MODEL" "$TMP/rq.gguf" Q8_0
rm -f "$TMP/rq.gguf"

# bad input: usage errors exit 2, runtime errors 1; nothing left at OUT
run 2 ruvllm quantize "$F16" "$TMP/x.gguf" Q4_K_X
err_has "'Q4_K_X' is not a quantization type; did you mean 'Q4_K_M'?"
err_has "Q5_K_M"
run 2 ruvllm quantize "$F16" "$TMP/x.gguf" IQ2_XXS
run 2 ruvllm quantize "$F16" Q4_0
err_has "expected IN OUT TYPE"
run 2 ruvllm quantize --output-tensor-type q9 "$F16" "$TMP/x.gguf" Q4_0
run 1 ruvllm quantize --tensor-type 'attn_(q=q8_0' "$F16" "$TMP/x.gguf" Q4_0
err_has "bad pattern"
run 1 ruvllm quantize "$F16" "$F16" Q4_0
err_has "output is the input file"
run 1 ruvllm quantize "$TMP/nosuch.gguf" "$TMP/x.gguf" Q4_0
printf 'GGUF\003\000\000\000\001\000\000\000\000\000\000\000\000\000\000\000' >"$TMP/corrupt.gguf"
run 1 ruvllm quantize "$TMP/corrupt.gguf" "$TMP/x.gguf" Q4_0
err_has "corrupt.gguf"
head -c 100000000 "$F16" >"$TMP/truncated.gguf"
run 1 ruvllm quantize "$TMP/truncated.gguf" "$TMP/x.gguf" Q4_0
err_has "truncated.gguf"
run 1 ruvllm quantize "$F16" "$TMP/x.gguf" Q2_K_S
err_has "needs an importance matrix"
run 1 ruvllm quantize --imatrix "$F16" "$F16" "$TMP/x.gguf" Q4_0
err_has "no imatrix entries"
assert "nothing at OUT after failures" "[ ! -e $TMP/x.gguf ]"
assert "no temporaries left" "! ls $TMP | grep -q '\.tmp\.'"

# Ctrl-C: exit 130, nothing at OUT (Q4_K_M with --stats on one thread takes seconds)
"$RUVLLM" quantize -q --stats -t 1 "$F16" "$TMP/int.gguf" Q4_K_M 2>"$ERR" &
pid=$!
wait_sigint_handler $pid
sleep 0.3
kill -INT $pid
wait $pid
st=$?
assert "interrupted quantize exits 130" "[ $st = 130 ]"
err_has "interrupted"
assert "interrupted: nothing at OUT" "[ ! -e $TMP/int.gguf ]"
assert "interrupted: no temporaries" "! ls $TMP | grep -q '\.tmp\.'"
finish
