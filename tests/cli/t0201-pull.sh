#!/bin/sh
# ruvllm pull: a GGUF file from the Hugging Face Hub's file API into the
# store, then run by name. The hub is tests/cli/hubserver.py on loopback
# over HTTPS (tests/cli/hub.sh): no test needs the internet.
. tests/cli/lib.sh
. tests/cli/hub.sh
TINY=tests/data/tiny/llama-linear.gguf
R=$HUB/test-org/Tiny-GGUF
mkdir -p "$R/sub"
cp "$TINY" "$R/tiny-llama-Q4_K_M.gguf"
head -c 1000 /dev/urandom >"$R/tiny-llama-Q8_0.gguf"
head -c 1000 /dev/urandom >"$R/tiny-llama-Q4_K.gguf"
head -c 1000 /dev/urandom >"$R/mmproj-tiny-Q4_K_M.gguf"
echo "readme" >"$R/README.md"
SHA=$(sha256sum "$TINY" | cut -d' ' -f1)

# the default quantization is Q4_K_M (llama.cpp's -hf): the file, its name, its manifest
run 0 ruvllm pull test-org/Tiny-GGUF
out_is_name() { assert "stdout is the name $1" "[ \"\$(cat \"$OUT\")\" = '$1' ]"; }
out_is_name "hf.co/test-org/Tiny-GGUF:Q4_K_M"
F=$TMP/store/hf.co/test-org/Tiny-GGUF/tiny-llama-Q4_K_M.gguf
assert "the file is in the store under hf.co/OWNER/REPO/" '[ -f "$F" ]'
assert "it is the hub's file, byte for byte" 'cmp -s "$F" "$TINY"'
assert "no .part is left" '[ ! -e "$F.part" ]'
err_has "sha256 $SHA verified"
assert "the manifest records name, repo, file, sha256, size, date" \
    'python3 -c "import json,sys; m=json.load(open(sys.argv[1])); sys.exit(not (m[\"name\"]==\"hf.co/test-org/Tiny-GGUF:Q4_K_M\" and m[\"repo\"]==\"test-org/Tiny-GGUF\" and m[\"file\"]==\"tiny-llama-Q4_K_M.gguf\" and m[\"sha256\"]==sys.argv[2] and m[\"size\"]==441664 and m[\"date\"].endswith(\"Z\")))" "$F.json" "$SHA"'
assert "the listing was asked with recursive=true" '[ "$(hub_count "GET /api/models/test-org/Tiny-GGUF/tree/main?recursive=true")" = 1 ]'
assert "the file came through resolve/main and its redirect" \
    '[ "$(hub_count "GET /test-org/Tiny-GGUF/resolve/main/tiny-llama-Q4_K_M.gguf")" = 1 ] && [ "$(hub_count "GET /cdn/test-org/Tiny-GGUF/tiny-llama-Q4_K_M.gguf")" = 1 ]'
err_lacks() { if grep -q -F -e "$1" "$ERR"; then not_ok "stderr has '$1'"; else ok "stderr lacks '$1'"; fi; }
err_lacks "%"   # no progress bar when stderr is not a terminal

# the pulled model runs by its name, its short name and a prefix, as the file does
run 0 ruvllm run --temp 0 -n 8 -m "$TINY" "Hello"
cp "$OUT" "$TMP/by-path.txt"
for name in hf.co/test-org/Tiny-GGUF:Q4_K_M test-org/tiny-gguf:q4_k_m test-org/Tiny; do
    run 0 ruvllm run --temp 0 -n 8 -m "$name" "Hello"
    assert "run -m $name gives the text run -m FILE gives" 'cmp -s "$OUT" "$TMP/by-path.txt"'
done

# ruvllm list shows it with the hub's sha256 as its id
run 0 ruvllm list
out_has "hf.co/test-org/Tiny-GGUF:Q4_K_M"
out_has "$(echo "$SHA" | cut -c1-12)"
run 0 ruvllm list --names
assert "list --names is the one name" '[ "$(cat "$OUT")" = "hf.co/test-org/Tiny-GGUF:Q4_K_M" ]'

# pulled again: up to date, nothing downloaded
run 0 ruvllm pull hf.co/test-org/Tiny-GGUF:Q4_K_M
err_has "up to date"
assert "nothing downloaded again" '[ "$(hub_count "GET /cdn/")" = 1 ]'

# a quant by name, case-insensitive, as a word of the file name (Q4_K is not Q4_K_M)
run 0 ruvllm pull test-org/Tiny-GGUF:q8_0
out_is_name "hf.co/test-org/Tiny-GGUF:Q8_0"
assert "the Q8_0 file" 'cmp -s "$TMP/store/hf.co/test-org/Tiny-GGUF/tiny-llama-Q8_0.gguf" "$R/tiny-llama-Q8_0.gguf"'
run 0 ruvllm pull test-org/Tiny-GGUF:Q4_K
assert "Q4_K takes tiny-llama-Q4_K.gguf, not the Q4_K_M file" 'cmp -s "$TMP/store/hf.co/test-org/Tiny-GGUF/tiny-llama-Q4_K.gguf" "$R/tiny-llama-Q4_K.gguf"'
# a file by its name; a file in a folder of the repository
cp "$TINY" "$R/sub/other.gguf"
run 0 ruvllm pull test-org/Tiny-GGUF:sub/other.gguf
assert "a file in a folder keeps its folder" 'cmp -s "$TMP/store/hf.co/test-org/Tiny-GGUF/sub/other.gguf" "$TINY"'
out_is_name "hf.co/test-org/Tiny-GGUF:other"

# a prefix that names several models is refused, listing them
run 1 ruvllm run -m test-org/Tiny "x"
err_has "ambiguous"
err_has "hf.co/test-org/Tiny-GGUF:Q8_0"

# HF_TOKEN goes as a bearer token; HF_ENDPOINT is read as huggingface_hub reads it
: >"$HUB_LOG"
rm -rf "$TMP/store"
HF_TOKEN=hf_test_token run 0 ruvllm pull test-org/Tiny-GGUF
assert "every request carried the token" '[ "$(hub_count "auth=Bearer hf_test_token")" = "$(wc -l <"$HUB_LOG")" ]'
rm -rf "$TMP/store"
HF_ENDPOINT=$RUVLLM_HF_ENDPOINT RUVLLM_HF_ENDPOINT= run 0 ruvllm pull test-org/Tiny-GGUF
# a paginated listing (Link: rel="next") is followed to its end
rm -rf "$TMP/store"
echo 2 >"$HUB/.page-size"
run 0 ruvllm pull test-org/Tiny-GGUF:Q8_0
assert "the Q8_0 file, listed on a later page" '[ -f "$TMP/store/hf.co/test-org/Tiny-GGUF/tiny-llama-Q8_0.gguf" ]'
rm "$HUB/.page-size"

finish
