#!/bin/sh
# ruvllm bench: subcommands, options, output formats and errors. Nothing
# here asserts a speed: bench measures, tests do not time.
. tests/cli/lib.sh
D=${RVL_SHARED_DATA:-../shared/data}
MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
export RUVLLM_MODEL="$MODEL"
# small working set: the CLI is under test here, not the machine
SMALL="-r 1 --mem-size 64"

# --- subcommands ------------------------------------------------------
run 2 ruvllm bench
err_has "missing subcommand: kernels, model or ppl"
run 2 ruvllm bench kernal
err_has "'kernal' is not a bench subcommand; did you mean 'kernels'?"
run 2 ruvllm bench ppx
err_has "did you mean 'ppl'?"
run 2 ruvllm bench frobnicate
err_has "'frobnicate' is not a bench subcommand (kernels, model, ppl)"
run 2 ruvllm bench kernels extra
err_has "unexpected argument 'extra'"
run 0 ruvllm bench --help
out_has "usage: ruvllm bench kernels|model|ppl [options]"
out_has "--kl-base"

# --- option errors are usage errors (exit 2) ----------------------------
run 2 ruvllm bench kernels -p 5
err_has "option '--n-prompt' does not apply to 'bench kernels'"
run 2 ruvllm bench model --filter Q4_0
err_has "option '--filter' does not apply to 'bench model'"
run 2 ruvllm bench ppl -f x --isa ref
err_has "option '--isa' does not apply to 'bench ppl'"
run 2 ruvllm bench kernels -r 0
err_has "out of range"
run 2 ruvllm bench kernels -o xml
err_has "'xml' is not one of md|csv|json"
run 2 ruvllm bench kernels --json -o csv
err_has "--json and -o csv disagree"
run 2 ruvllm bench kernels --filter '('
err_has "is not a valid regular expression"
run 2 ruvllm bench kernels --isa avx3
err_has "--isa: unknown instruction set 'avx3'"
run 2 ruvllm bench kernels --tokens 0
run 2 ruvllm bench model -m "$MODEL" --synthetic llama-7b
err_has "give -m MODEL or --synthetic SHAPE, not both"
run 2 ruvllm bench model --type Q4_0
err_has "--type applies to --synthetic models"
run 2 ruvllm bench model --synthetic llama7b
err_has "did you mean 'llama-7b'?"
run 2 ruvllm bench model --synthetic smollm2-135m --type Q9_9
err_has "--type: unknown type 'Q9_9'"
run 2 ruvllm bench model -p 0 -n 0
err_has "leave nothing to measure"
run 2 ruvllm bench ppl
err_has "bench ppl needs the text"
run 2 ruvllm bench ppl -f x -o csv
err_has "not csv"
run 2 ruvllm bench ppl -f x -c 2
err_has "out of range"

# --- bench kernels ------------------------------------------------------
run 1 ruvllm bench kernels --filter nothing-matches-this
err_has "--filter 'nothing-matches-this' matches no benchmark"

run 0 ruvllm bench kernels --filter Q4_0 $SMALL
out_has "| op         | type    | isa    | shape              | source         | threads |         ms |      GB/s |   GFLOP/s | roofline   |"
out_has "| copy       |"
out_has "| triad      |"
out_has "| peak       | f32 fma |"
out_has "| gemv       | Q4_0    |"
out_has "11008x4096"
out_has "4096x11008"
out_has "| gemm       | Q4_0    |"
out_has "4096x4096 m64"
out_has "| quantize   | Q4_0    |"
out_has "| dequantize | Q4_0    |"
out_has "% bw"
out_has "% peak"
out_lacks "Q8_0"
# the int8 dot peak (AVX-512 VNNI): the roofline of the integer GEMMs
I8=0
if grep -q avx512_vnni /proc/cpuinfo 2>/dev/null && { [ -z "${RUVLLM_ISA:-}" ] || [ "$RUVLLM_ISA" = avx512 ]; }; then
    I8=1
    out_has "| peak       | int8 dp |"
    out_has "% peak i8"
fi
assert "one table row per line: 4 machine (+ int8 peak) + 8 kernel rows + header" \
    "[ \$(grep -c '^| ' '$OUT') = \$((14 + I8)) ]"

# a kernel row: 11 columns, a positive time; gemv the read bandwidth of its window
assert "gemv rows have the read GB/s of their window" \
    "awk -F'|' '/\\| gemv /{ n++; if (\$12 + 0 <= 0) bad = 1 } END { exit !(n == 3 && !bad) }' '$OUT'"
assert "gemv rows have a time and GB/s" \
    "awk -F'|' '/\\| gemv /{ n++; if (\$8 + 0 <= 0 || \$9 + 0 <= 0) bad = 1 } END { exit !(n == 3 && !bad) }' '$OUT'"

# the elementwise operations are the scalar reference loops
run 0 ruvllm bench kernels --filter 'rmsnorm|rope|softmax' $SMALL
out_has "| rmsnorm    | F32     | ref    |"
out_has "| rope       | F32     | ref    |"
out_has "| softmax    | F32     | ref    |"

# --isa: variants side by side, a column each; ref is always runnable
run 0 ruvllm bench kernels --isa all --tokens 4 --filter '(gemv|gemm) Q8_0 \S+ 4096x4096 |rmsnorm' $SMALL
out_has "| op         | type    | shape              | source         | threads | unit    |       ref |"
out_has " best roofline    |"
out_lacks "| isa "
out_has "| peak       | f32 fma | registers          | machine        |"
out_has "| gemv       | Q8_0    | 4096x4096          | llama-7b       |"
out_has "| gemm       | Q8_0    | 4096x4096 m4       | llama-7b       |"
out_has "| rmsnorm    | F32     | 512x4096           | -              |"
assert "--isa all: one row per kernel, whatever the variants" \
    "[ \$(grep -c '| gemv ' '$OUT') = 1 ] && [ \$(grep -c '| gemm ' '$OUT') = 1 ]"
assert "--isa all: the ref column has a value, the best a roofline fraction" \
    "awk -F'|' '/\\| gemv /{ n++; if (\$8 + 0 <= 0 || \$(NF-1) !~ /% bw/) bad = 1 } END { exit !(n == 1 && !bad) }' '$OUT'"
out_has "GFLOP/s"
out_has "% peak"
# csv keeps one record per measurement, with its isa
run 0 ruvllm bench kernels --isa all -o csv --filter 'gemv Q8_0 \S+ 4096x4096 ' $SMALL
out_has "gemv,Q8_0,ref,4096x4096,"
assert "csv --isa all: a record per variant, each variant once" \
    "[ \$(grep -c '^gemv,' '$OUT') -ge 1 ] && [ \$(grep -c '^gemv,' '$OUT') = \$(grep '^gemv,' '$OUT' | cut -d, -f3 | sort -u | wc -l) ]"
run 0 ruvllm bench kernels --isa ref,ref --filter 'gemv Q8_0 \S+ 4096x4096 ' $SMALL
assert "--isa lists each variant once" "[ \$(grep -c '| gemv ' '$OUT') = 1 ]"

# -m adds the model's own matrices, named by tensor
run 0 ruvllm bench kernels -m "$MODEL" --filter 'gemv .*(ffn_down|ffn_up)' $SMALL
out_has "| ffn_down "
out_has "| ffn_gate/ffn_up "
out_has "| 576x1536 "
out_has "| 1536x576 "
out_lacks "llama-7b"

# --json: one document with the machine and the results
run 0 ruvllm bench kernels --json --filter 'gemv Q4_K .* 4096x4096 ' $SMALL
for k in '"threads"' '"isa_selected"' '"llc_bytes"' '"working_set_bytes"' '"memory"' '"copy_gbs"' \
    '"triad_gbs"' '"read_gbs"' '"bw_gbs"' '"peak_gflops"' '"results"' '"op": "gemv"' '"type": "Q4_K"' \
    '"n": 4096' '"k": 4096' '"m": 1' '"median_ms"' '"gbs"' '"gflops"' '"roofline": "bw"' \
    '"roofline_fraction"' '"roofline_source": "read"' '"read_min_gbs"' '"read_max_gbs"' \
    '"roofline_fraction_stream"'; do
    out_has "$k"
done
assert "--json output ends with a closing brace" "[ \"\$(tail -n 1 '$OUT')\" = '}' ]"
# the GEMV's roofline is the read bandwidth measured between its own
# repetitions: a positive read_gbs, and the fraction is gbs over it
assert "--json: gemv roofline_fraction = gbs / read_gbs, read measured" \
    "awk -F'[:,]' '/\"gbs\"/{ g = \$2 } /\"roofline_fraction\"/{ f = \$2 } /\"read_gbs\"/{ r = \$2 } END { exit !(r > 0 && g > 0 && (f - g / r) < 1e-3 && (g / r - f) < 1e-3) }' '$OUT'"

out_has '"huge_pages": false'

# Q4_0 (and the Q4_K GEMV above) on a variant with a packed decode kernel
# (AVX-512 VNNI) measures the packed layout, as the forward pass holds the
# weights; RUVLLM_REPACK=0 the row-major one; and both GEMV and GEMM run on
# packed weights
if grep -q avx512_vnni /proc/cpuinfo 2>/dev/null && [ -z "${RUVLLM_ISA:-}" ]; then
    out_has '"packed": true'
    run 0 ruvllm bench kernels --json --filter '(gemv|gemm) Q4_0 .* 4096x4096 ' --tokens 9 $SMALL
    assert "Q4_0 gemv and gemm on avx512: packed" "[ \$(grep -c '\"packed\": true' '$OUT') -eq 2 ]"
    RUVLLM_REPACK=0 run 0 ruvllm bench kernels --json --filter 'gemv Q4_0 .* 4096x4096 ' $SMALL
    out_has '"packed": false'
else
    out_has '"packed": false'
fi

run 0 ruvllm bench kernels -o json --filter 'gemv Q4_K .* 4096x4096 ' $SMALL
out_has '"results"'

# --huge-pages: asked for, and whether the kernel gave them is reported
# (the machine rows' source says "machine 2M" or "machine 4K?")
run 0 ruvllm bench kernels --huge-pages --json --filter 'gemv Q4_K .* 4096x4096 ' $SMALL
out_has '"huge_pages": true'
out_has '"huge_bytes": '
out_has '"roofline_fraction"'
run 0 ruvllm bench kernels --huge-pages --filter 'gemv Q4_K .* 4096x4096 ' $SMALL
assert "--huge-pages: the machine rows say which pages they got" \
    "grep -E -q '^\\| copy .*\\| machine (2M|4K\\?) ' '$OUT'"
run 2 ruvllm bench model --huge-pages -n 1
err_has "option '--huge-pages' does not apply to 'bench model'"

# -o csv: a header and one line per row
run 0 ruvllm bench kernels -o csv --filter 'gemv Q4_K .* 4096x4096 ' $SMALL
assert "csv header" "[ \"\$(head -n 1 '$OUT')\" = 'op,type,isa,shape,source,threads,median_ms,gbs,gflops,roofline_fraction,roofline,read_gbs' ]"
out_has "gemv,Q4_K,"
assert "csv: 3 machine rows + 1 kernel row + header" "[ \$(wc -l <'$OUT') = 5 ]"

# --- bench model --------------------------------------------------------
run 0 ruvllm bench model -p 16 -n 4 -r 1
out_has "| model "
out_has " size |"
out_has " params |"
out_has "| backend "
out_has " threads |"
out_has " test |"
out_has " t/s |"
out_has "| llama 135M Q4_1 "
out_has "pp16"
out_has "tg4"
out_has " ± "
run 0 ruvllm bench model -p 8 -n 0 -r 2 -o csv
assert "csv header" "[ \"\$(head -n 1 '$OUT')\" = 'model,model_size,model_n_params,backend,n_threads,test,n_prompt,n_gen,reps,avg_ts,stddev_ts,avg_ms,n_depth,type_k,type_v' ]"
out_has ",pp8,8,0,2,"
out_lacks "tg"
run 0 ruvllm bench model -p 0 -n 2 -r 2 -t 1 --json
for k in '"model": "llama 135M Q4_1"' '"model_size"' '"model_n_params"' '"n_threads": 1' '"test": "tg2"' \
    '"n_gen": 2' '"reps": 2' '"avg_ts"' '"stddev_ts"' '"samples_ts"'; do
    out_has "$k"
done
run 1 ruvllm bench model -m "$TMP/missing.gguf" -p 4 -n 1
err_has "missing.gguf"

# a synthetic model is written under TMPDIR and leaves nothing behind
mkdir -p "$TMP/synth"
run 0 env TMPDIR="$TMP/synth" "$RUVLLM" bench model --synthetic smollm2-135m --type Q8_0 -p 8 -n 2 -r 1
out_has "| smollm2-135m Q8_0 (synthetic) "
out_has "134.52 M"
err_has "writing a synthetic smollm2-135m Q8_0 model"
assert "the synthetic model's file is gone" "[ -z \"\$(ls -A '$TMP/synth')\" ]"

# --- bench ppl ----------------------------------------------------------
head -c 6000 "$D/text/wikitext-2-test.txt" >"$TMP/wiki.txt"
head -c 6000 "$D/text/wikitext-2-test.txt" | tr 'a-z' 'b-za' >"$TMP/other.txt"

run 0 ruvllm bench ppl -f "$TMP/wiki.txt" -c 64 --chunks 2
out_has "PPL = "
out_has "(62 tokens in 2 windows of 64)"
err_has "2 windows of 64, each scored on its last 31"
err_has "[2/2] PPL "
assert "PPL is a finite number above 1" \
    "awk '/^PPL = /{ exit !(\$3 + 0 > 1 && \$3 + 0 < 1e6) }' '$OUT'"

run 0 ruvllm bench ppl -f "$TMP/wiki.txt" -c 64 --chunks 1 --json
for k in '"n_ctx": 64' '"windows": 1' '"tokens_scored": 31' '"ppl"' '"ppl_err"'; do
    out_has "$k"
done
out_lacks '"kl_mean"'

run 1 ruvllm bench ppl -f "$TMP/wiki.txt" -c 100000
err_has "fewer than one window of 100000"
run 1 ruvllm bench ppl -f "$TMP/no-such-text.txt"
err_has "no-such-text.txt: No such file or directory"

# --kl-base then --kl on the same model: the same distribution, exactly
run 0 ruvllm bench ppl -f "$TMP/wiki.txt" -c 64 --chunks 2 --kl-base "$TMP/base.logp"
err_has "saved the log-probabilities to"
assert "the base file exists" "[ -s '$TMP/base.logp' ]"
assert "no temporary file is left" "[ -z \"\$(ls '$TMP' | grep '\\.tmp\\.')\" ]"
run 0 ruvllm bench ppl --kl "$TMP/base.logp" --json
out_has '"windows": 2'
out_has '"same_top": 1,'
assert "KL divergence of a model with itself < 1e-6" \
    "awk -F': ' '/\"kl_mean\"/{ sub(\",\", \"\", \$2); f = 1; ok = (\$2 + 0 < 1e-6) } END { exit !(f && ok) }' '$OUT'"
assert "same PPL as the base" \
    "awk -F': ' '/\"ppl\"/{ sub(\",\", \"\", \$2); p = \$2 } /\"base_ppl\"/{ sub(\",\", \"\", \$2); b = \$2 } END { exit !(p == b) }' '$OUT'"
run 0 ruvllm bench ppl -f "$TMP/wiki.txt" --kl "$TMP/base.logp" --chunks 1
out_has "KL divergence: mean 0.000000"
out_has "same top token: 100.000"
out_has "(31 tokens in 1 windows of 64)"

# the base file must fit the text, the window and the model
run 1 ruvllm bench ppl -f "$TMP/other.txt" --kl "$TMP/base.logp"
err_has "was computed on a different text"
run 1 ruvllm bench ppl --kl "$TMP/base.logp" -c 128
err_has "made with windows of 64 tokens, not 128"

# damaged base files are refused with a clear error
head -c 1000 "$TMP/base.logp" >"$TMP/trunc.logp"
run 1 ruvllm bench ppl --kl "$TMP/trunc.logp"
err_has "trunc.logp: truncated: the header describes"
cp "$TMP/base.logp" "$TMP/flip.logp"
printf '\177' | dd of="$TMP/flip.logp" bs=1 seek=100000 conv=notrunc 2>/dev/null
run 1 ruvllm bench ppl --kl "$TMP/flip.logp"
err_has "flip.logp: checksum mismatch"
head -c 5000 /dev/zero >"$TMP/zero.logp"
run 1 ruvllm bench ppl --kl "$TMP/zero.logp"
err_has "zero.logp: not a ruvllm logits file"
printf 'RVLLOGP' >"$TMP/short.logp"
run 1 ruvllm bench ppl --kl "$TMP/short.logp"
err_has "shorter than the header"
run 2 ruvllm bench ppl -f "$TMP/wiki.txt" --kl "$TMP/base.logp" --kl-base "$TMP/base.logp"
err_has "name the same file"

# a failed run leaves no base file behind
run 1 ruvllm bench ppl -f "$TMP/wiki.txt" -c 64 --chunks 1 --kl-base "$TMP/no-such-dir/x.logp"
assert "no base file in a missing directory" "[ ! -e '$TMP/no-such-dir/x.logp' ]"
finish
