#!/bin/sh
# ruvllm run --batch on many lines (a tiny model of tests/data/tiny): 10,000
# prompts come back in input order (past the window of 1,024 finished
# results waiting for an earlier one), the same with 1 or 8 sequences in
# flight and, --unordered, as a set; a 40 MB input is streamed, not read
# whole (bounded memory).
. tests/cli/lib.sh
M=tests/data/tiny/llama.gguf
field_of() { sed -n "s/.*\"$1\":\(\"[a-z]*\"\|[0-9]*\).*/\1/p"; }

seq 1 10000 | sed 's/^/Line number /' >"$TMP/many.txt"
run 0 ruvllm run -m "$M" --batch "$TMP/many.txt" -n 3 --temp 0.8 --seed 1 --parallel 8 -t 1
assert "10,000 results" "[ \$(wc -l <'$OUT') = 10000 ]"
assert "in input order" "[ \"\$(field_of id <'$OUT')\" = \"\$(seq 1 10000)\" ]"
assert "each a reply" "[ \$(grep -c '\"finish_reason\":\"\(length\|stop\)\",\"prompt_tokens\":[0-9]*,\"completion_tokens\":[1-3]}\$' '$OUT') = 10000 ]"
cp "$OUT" "$TMP/p8"
run 0 ruvllm run -m "$M" --batch "$TMP/many.txt" -n 3 --temp 0.8 --seed 1 --parallel 1 -t 1
assert "--parallel 1 = --parallel 8" "cmp -s '$OUT' '$TMP/p8'"
run 0 ruvllm run -m "$M" --batch "$TMP/many.txt" -n 3 --temp 0.8 --seed 1 --parallel 5 --unordered -t 1
assert "--unordered: the same set" "[ \"\$(sort '$OUT' | sha256sum)\" = \"\$(sort '$TMP/p8' | sha256sum)\" ]"

# 20,000 lines of 2 KB (their ids): the memory stays far below the input's 40 MB
id=$(head -c 2000 /dev/zero | tr '\0' 'x')
seq 1 20000 | sed "s/.*/{\"id\": \"$id&\", \"prompt\": \"Line &\"}/" >"$TMP/big.jsonl"
if ldd "$RUVLLM" 2>/dev/null | grep -q libasan; then
    ok "# SKIP the memory bound under AddressSanitizer (its quarantine keeps what is freed)"
elif /usr/bin/time -f %M true >/dev/null 2>&1; then
    /usr/bin/time -f '%M' -o "$TMP/rss" "$RUVLLM" run -m "$M" --batch "$TMP/big.jsonl" -n 2 \
        --temp 0 -t 1 --parallel 4 >"$OUT" 2>"$ERR"
    assert "20,000 results of the 40 MB input" "[ \$(wc -l <'$OUT') = 20000 ]"
    assert "max RSS $(cat "$TMP/rss") KB < 24 MB: the input is streamed" "[ \$(cat '$TMP/rss') -lt 24576 ]"
else
    ok "# SKIP no GNU time to measure the memory"
fi
finish
