#!/bin/sh
# ruvllm pull refuses what it cannot trust or find, with a sentence and an
# exit status, and leaves nothing in the store: a wrong sha256, a missing
# repository or file, no file for the quant, several files, split files, a
# certificate it does not trust, a name that is no repository.
. tests/cli/lib.sh
. tests/cli/hub.sh
R=$HUB/test-org/Tiny-GGUF
mkdir -p "$R"
head -c 200000 /dev/urandom >"$R/tiny-Q4_K_M.gguf"
head -c 1000 /dev/urandom >"$R/tiny-Q8_0.gguf"
store_empty() { assert "nothing in the store" '[ -z "$(find "$TMP/store" -type f 2>/dev/null)" ]'; }

# the hub's sha256 and the bytes disagree: refused, the download deleted
echo 0000000000000000000000000000000000000000000000000000000000000000 >"$HUB/.sha256-tiny-Q4_K_M.gguf"
run 1 ruvllm pull test-org/Tiny-GGUF
err_has "sha256 mismatch"
err_has "the hub's is 0000000000000000000000000000000000000000000000000000000000000000"
err_has "the file was deleted"
store_empty
run 0 ruvllm list --names
out_empty
rm "$HUB/.sha256-tiny-Q4_K_M.gguf"

# no such repository: 404, said with the repository's name
run 1 ruvllm pull test-org/No-Such-GGUF
err_has "test-org/No-Such-GGUF: no such model repository on $RUVLLM_HF_ENDPOINT"
err_has "HTTP 404"
store_empty

# the file listed but gone when fetched
touch "$HUB/.missing"
run 1 ruvllm pull test-org/Tiny-GGUF
err_has "resolve/main/tiny-Q4_K_M.gguf: HTTP 404: not found"
store_empty
rm "$HUB/.missing"

# no file for the quant: the files there are named
run 1 ruvllm pull test-org/Tiny-GGUF:Q5_K_S
err_has "test-org/Tiny-GGUF has no GGUF file for 'Q5_K_S'; its GGUF files: tiny-Q4_K_M.gguf, tiny-Q8_0.gguf"
# a quant is a word of the file name: Q4_K is not the Q4_K_M file
run 1 ruvllm pull test-org/Tiny-GGUF:Q4_K
err_has "has no GGUF file for 'Q4_K'"
# several files for one quant: refused, listing them, pointing at REPO:FILE
mkdir -p "$R/v2"
head -c 1000 /dev/urandom >"$R/v2/tiny-Q8_0.gguf"
run 1 ruvllm pull test-org/Tiny-GGUF:Q8_0
err_has "'Q8_0' matches 2 files (tiny-Q8_0.gguf, v2/tiny-Q8_0.gguf): give the file, test-org/Tiny-GGUF:FILE.gguf"
run 0 ruvllm pull test-org/Tiny-GGUF:v2/tiny-Q8_0.gguf
# split files: refused with what to do
R2=$HUB/test-org/Split-GGUF
mkdir -p "$R2"
head -c 1000 /dev/urandom >"$R2/big-Q4_K_M-00001-of-00002.gguf"
head -c 1000 /dev/urandom >"$R2/big-Q4_K_M-00002-of-00002.gguf"
run 1 ruvllm pull test-org/Split-GGUF
err_has "is split into several files"
err_has "llama-gguf-split --merge"
# a repository without GGUF files
mkdir -p "$HUB/test-org/Safetensors"
echo "{}" >"$HUB/test-org/Safetensors/config.json"
run 1 ruvllm pull test-org/Safetensors
err_has "test-org/Safetensors has no GGUF file"

# a certificate nobody vouches for: refused by TLS
rm -rf "$TMP/store"
RUVLLM_CA_BUNDLE= run 1 ruvllm pull test-org/Tiny-GGUF
err_has "$RUVLLM_HF_ENDPOINT/api/models/test-org/Tiny-GGUF/tree/main"
err_has "certificate"
store_empty

# not a repository name: a usage error
run 2 ruvllm pull tinyllama
err_has "'tinyllama' is not a Hugging Face model: give OWNER/REPO[:QUANT]"
run 2 ruvllm pull "test-org/../etc:Q4_K_M"
run 2 ruvllm pull "test-org/Tiny-GGUF:../../x.gguf"
run 2 ruvllm pull

finish
