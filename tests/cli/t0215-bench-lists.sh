#!/bin/sh
# `ruvllm bench model` takes llama-bench's lists: -m (repeatable and
# comma-separated), -t, -p, -n, -d and the KV formats; one row per
# combination, in llama-bench's order of loops (model, K and V format,
# threads, depth, then the pp tests and the tg tests); each model labelled
# by its file type (general.file_type: a Q4_K_M file is "Q4_K_M", though
# most of SmolLM2-135M's tensors are Q5_0 in it). Tiny tests, one
# repetition: nothing here is timed.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi
# the rows of a csv run, without the header: "label,threads,test,type_k,type_v"
rows() { tail -n +2 "$OUT" | awk -F, '{ print $1 "," $5 "," $6 "," $14 "," $15 }'; }
rows_are() {
    if [ "$(rows)" = "$1" ]; then ok "rows: $(rows | tr '\n' ' ')"; else
        not_ok "rows are not as expected"; rows | sed 's/^/#   got: /'; echo "$1" | sed 's/^/#   want: /'; fi
}

# a Q4_K_M file of the default model (requantized: fine for a label)
run 0 ruvllm quantize --allow-requantize "$MODEL" "$TMP/q4km.gguf" Q4_K_M
assert "the Q4_K_M file is mostly Q5_0 (the fallback for 576-wide rows)" \
    "ruvllm info --no-metadata '$TMP/q4km.gguf' | grep -c ' Q5_0 ' | awk '{ exit !(\$1 > 90) }'"

# two -m: both models, the first first, each labelled by its file type
run 0 ruvllm bench model -m "$MODEL" -m "$TMP/q4km.gguf" -t 1 -p 4 -n 0 -r 1 -o csv
rows_are '"llama 135M Q4_1",1,pp4,f16,f16
"llama 135M Q4_K_M",1,pp4,f16,f16'
# the same as one comma-separated -m
run 0 ruvllm bench model -m "$MODEL,$TMP/q4km.gguf" -t 1 -p 4 -n 0 -r 1 -o csv
rows_are '"llama 135M Q4_1",1,pp4,f16,f16
"llama 135M Q4_K_M",1,pp4,f16,f16'
# the markdown table labels it too
run 0 ruvllm bench model -m "$TMP/q4km.gguf" -t 1 -p 0 -n 1 -r 1
out_has "| llama 135M Q4_K_M "
out_lacks "Q5_0"

# threads x (pp list, then tg list): llama-bench's order
run 0 ruvllm bench model -m "$MODEL" -t 1,2 -p 4,8 -n 1,2 -r 1 -o csv
rows_are '"llama 135M Q4_1",1,pp4,f16,f16
"llama 135M Q4_1",1,pp8,f16,f16
"llama 135M Q4_1",1,tg1,f16,f16
"llama 135M Q4_1",1,tg2,f16,f16
"llama 135M Q4_1",2,pp4,f16,f16
"llama 135M Q4_1",2,pp8,f16,f16
"llama 135M Q4_1",2,tg1,f16,f16
"llama 135M Q4_1",2,tg2,f16,f16'
# repeated -p adds to the list (does not replace it)
run 0 ruvllm bench model -m "$MODEL" -t 1 -p 4 -p 8 -n 0 -r 1 -o csv
rows_are '"llama 135M Q4_1",1,pp4,f16,f16
"llama 135M Q4_1",1,pp8,f16,f16'

# depths: each test at each depth
run 0 ruvllm bench model -m "$MODEL" -t 1 -p 4 -n 1 -d 0,8 -r 1 -o csv
rows_are '"llama 135M Q4_1",1,pp4,f16,f16
"llama 135M Q4_1",1,tg1,f16,f16
"llama 135M Q4_1",1,pp4@d8,f16,f16
"llama 135M Q4_1",1,tg1@d8,f16,f16'

# --kv-type's list: K and V alike, outside threads
run 0 ruvllm bench model -m "$MODEL" -t 1,2 -p 4 -n 0 --kv-type f16,q8 -r 1 -o csv
rows_are '"llama 135M Q4_1",1,pp4,f16,f16
"llama 135M Q4_1",2,pp4,f16,f16
"llama 135M Q4_1",1,pp4,q8,q8
"llama 135M Q4_1",2,pp4,q8,q8'
# K and V lists: crossed, K outermost
run 0 ruvllm bench model -m "$MODEL" -t 1 -p 4 -n 0 --kv-type-k f16,q8 --kv-type-v f16,q8 -r 1 -o csv
rows_are '"llama 135M Q4_1",1,pp4,f16,f16
"llama 135M Q4_1",1,pp4,f16,q8
"llama 135M Q4_1",1,pp4,q8,f16
"llama 135M Q4_1",1,pp4,q8,q8'
# the table gets type_k and type_v columns when a KV format is given
run 0 ruvllm bench model -m "$MODEL" -t 1 -p 4 -n 0 --kv-type q8 -r 1
out_has " type_k | type_v |"
out_has " q8     | q8     |"
# json: one object per row with the depth and the formats
run 0 ruvllm bench model -m "$MODEL" -t 1 -p 4 -n 1 -d 8 --kv-type q8 -r 1 --json
assert "json: two rows" "[ \$(grep -c '\"test\"' '$OUT') = 2 ]"
out_has '"n_depth": 8'
out_has '"type_k": "q8"'
out_has '"test": "tg1@d8"'

# bad lists
run 2 ruvllm bench model -m "$MODEL" -t 1,x -p 4 -n 0
err_has "--threads: 'x' is not an integer"
run 2 ruvllm bench model -m "$MODEL" -p 4,,8 -n 0
err_has "--n-prompt: an empty item in '4,,8'"
run 2 ruvllm bench model -m "$MODEL" -p 4 -n 0 --kv-type f16,q9
err_has "--kv-type: 'q9' is not one of f16|f32|q8|q4|tq4|tq3|tiered"
run 2 ruvllm bench model -m "$MODEL" -p 0,0 -n 0
err_has "-p 0 and -n 0 leave nothing to measure"
# a missing second model: said before anything is measured
run 1 ruvllm bench model -m "$MODEL" -m "$TMP/missing.gguf" -p 4 -n 0 -r 1
err_has "missing.gguf"
out_empty
# kernels and ppl take one value
run 2 ruvllm bench kernels -t 1,2 --filter nothing
err_has "--threads: 'bench kernels' takes one value"
run 2 ruvllm bench ppl -m "$MODEL" -m "$MODEL" -f /dev/null
err_has "--model: 'bench ppl' takes one value"
finish
