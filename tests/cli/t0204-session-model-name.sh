#!/bin/sh
# Session files name the model that made them (its store name and path,
# beside the fingerprint): a file refused for another model says which one
# made it, and kv-inspect shows it.
. tests/cli/lib.sh
S=$TMP/store
export RUVLLM_MODELS=$S
unset RUVLLM_MODEL
mkdir -p "$S/hf.co/org/Tiny-GGUF" "$S/other"
cp tests/data/tiny/llama-linear.gguf "$S/hf.co/org/Tiny-GGUF/tiny-Q8_0.gguf"
printf '{"name": "hf.co/org/Tiny-GGUF:Q8_0", "repo": "org/Tiny-GGUF", "file": "tiny-Q8_0.gguf"}\n' \
    >"$S/hf.co/org/Tiny-GGUF/tiny-Q8_0.gguf.json"
cp tests/data/tiny/qwen2.gguf "$S/other/qwen.gguf"
P=$S/hf.co/org/Tiny-GGUF/tiny-Q8_0.gguf

run 0 ruvllm run --temp 0 -n 4 -m org/Tiny --prompt-cache "$TMP/pc.rvls" "Hello there"
assert "the session file is written" '[ -s "$TMP/pc.rvls" ]'
run 0 ruvllm run --temp 0 -n 4 -m org/Tiny --prompt-cache "$TMP/pc.rvls" "Hello there"
err_lacks() { if grep -q -F -e "$1" "$ERR"; then not_ok "stderr has '$1'"; else ok "stderr lacks '$1'"; fi; }
err_lacks "another model"

# another model: refused, naming the model that made the file and its path
# (run then goes on without it and saves its own: on a copy)
cp "$TMP/pc.rvls" "$TMP/copy.rvls"
run 0 ruvllm run --temp 0 -n 4 -m other/qwen --prompt-cache "$TMP/copy.rvls" "Hello there"
err_has "made for another model, hf.co/org/Tiny-GGUF:Q8_0 ($P)"

# kv-inspect shows the name and path; -m takes a store name; a mismatch names both
run 0 ruvllm kv-inspect "$TMP/pc.rvls"
out_has "made for    hf.co/org/Tiny-GGUF:Q8_0 ($P)"
run 0 ruvllm kv-inspect --json "$TMP/pc.rvls"
assert "kv-inspect --json: made_for {name, path}" \
    'python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(j[\"made_for\"] != {\"name\": \"hf.co/org/Tiny-GGUF:Q8_0\", \"path\": sys.argv[2]})" "$OUT" "$P"'
run 0 ruvllm kv-inspect -m org/Tiny-GGUF:Q8_0 "$TMP/pc.rvls"
out_has ": matches org/Tiny-GGUF:Q8_0"
run 1 ruvllm kv-inspect -m other/qwen "$TMP/pc.rvls"
err_has "made with another model, hf.co/org/Tiny-GGUF:Q8_0 ($P)"

# a model outside the store is named by its file name
cp tests/data/tiny/llama-linear.gguf "$TMP/loose.gguf"
run 0 ruvllm run --temp 0 -n 4 -m "$TMP/loose.gguf" --prompt-cache "$TMP/pc2.rvls" "Hi"
run 0 ruvllm kv-inspect "$TMP/pc2.rvls"
out_has "made for    loose ($TMP/loose.gguf)"

finish
