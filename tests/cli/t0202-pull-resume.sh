#!/bin/sh
# ruvllm pull over a connection that breaks: the .part stays, the next
# pull continues it with a Range request; a server that ignores Range
# restarts it cleanly; Ctrl-C leaves only the .part (exit 130).
. tests/cli/lib.sh
. tests/cli/hub.sh
R=$HUB/test-org/Big-GGUF
mkdir -p "$R"
head -c 3000000 /dev/urandom >"$R/big-Q4_K_M.gguf"
SHA=$(sha256sum "$R/big-Q4_K_M.gguf" | cut -d' ' -f1)
F=$TMP/store/hf.co/test-org/Big-GGUF/big-Q4_K_M.gguf

# the connection is cut after 1 MB: exit 1, the .part kept, nothing in the store
echo 1000000 >"$HUB/.cut"
run 1 ruvllm pull test-org/Big-GGUF
err_has "pull again to continue"
assert "the .part holds the first 1000000 bytes" '[ "$(wc -c <"$F.part")" = 1000000 ]'
assert "no file and no manifest at the destination" '[ ! -e "$F" ] && [ ! -e "$F.json" ]'
run 0 ruvllm list --names
out_empty

# pulled again: a Range request from byte 1000000, the file whole and verified
run 0 ruvllm pull test-org/Big-GGUF
assert "the second download asked for bytes=1000000-" '[ "$(hub_count "GET /cdn/test-org/Big-GGUF/big-Q4_K_M.gguf range=bytes=1000000-")" = 1 ]'
err_has "continued a partial download"
err_has "sha256 $SHA verified"
assert "the file is the hub's" 'cmp -s "$F" "$R/big-Q4_K_M.gguf"'
assert "the .part is gone" '[ ! -e "$F.part" ]'

# a server that ignores Range: 200 and the whole file, written from 0
rm -rf "$TMP/store"
echo 1000000 >"$HUB/.cut"
run 1 ruvllm pull test-org/Big-GGUF
touch "$HUB/.norange"
: >"$HUB_LOG"
run 0 ruvllm pull test-org/Big-GGUF
assert "the Range request was sent" '[ "$(hub_count "GET /cdn/test-org/Big-GGUF/big-Q4_K_M.gguf range=bytes=1000000-")" = 1 ]'
err_has "the server ignored the range: downloaded again"
assert "the file is the hub's, not the .part and the whole file one after the other" 'cmp -s "$F" "$R/big-Q4_K_M.gguf"'
rm "$HUB/.norange"

# a .part longer than the file (not a prefix of it) is started again
rm -rf "$TMP/store"
mkdir -p "$(dirname "$F")"
head -c 3500000 /dev/zero >"$F.part"
run 0 ruvllm pull test-org/Big-GGUF
assert "the file is the hub's" 'cmp -s "$F" "$R/big-Q4_K_M.gguf"'

# Ctrl-C during the download: exit 130, the .part left for the next pull
rm -rf "$TMP/store"
touch "$HUB/.slow"
"$RUVLLM" pull test-org/Big-GGUF >"$OUT" 2>"$ERR" &
pid=$!
wait_sigint_handler $pid
i=0
while [ ! -s "$F.part" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
kill -INT $pid
wait $pid
st=$?
assert "Ctrl-C: exit 130 (got $st)" '[ $st = 130 ]'
assert "Ctrl-C leaves the .part" '[ -s "$F.part" ]'
assert "and nothing at the destination" '[ ! -e "$F" ] && [ ! -e "$F.json" ]'
rm "$HUB/.slow"
run 0 ruvllm pull test-org/Big-GGUF
err_has "continued a partial download"

# on a terminal: a progress bar on stderr (script(1) gives it a pseudo-terminal)
if command -v script >/dev/null 2>&1; then
    rm -rf "$TMP/store"
    script -qec "\"$RUVLLM\" pull test-org/Big-GGUF" /dev/null >"$TMP/tty.out" 2>&1 </dev/null
    assert "a terminal gets the bar" 'grep -q -F "100% [##############################] 2.86 MiB / 2.86 MiB" "$TMP/tty.out"'
    assert "the bar is shown once at 100%" '[ "$(grep -o -F "100% [" "$TMP/tty.out" | wc -l)" = 1 ]'
fi
assert "then the next pull completes it" 'cmp -s "$F" "$R/big-Q4_K_M.gguf"'

finish
