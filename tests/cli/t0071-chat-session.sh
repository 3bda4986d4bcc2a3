#!/bin/sh
# `ruvllm chat` sessions: a conversation saved (--session, /save), the
# program restarted (or /load) and the conversation continued gives the
# same next reply as an uninterrupted run with the same seed, without
# decoding the earlier turns again; settings travel with the session;
# damaged or mismatched session files are refused.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi
nl='
'
# sampled (temperature 0.8), not greedy: the seed matters
chat() { ruvllm chat -m "$MODEL" -t 2 --seed 7 -n 24 "$@"; }
S=$TMP/s.rvls

# the uninterrupted run
run_in "Hi${nl}Name a color.${nl}Why that one?${nl}" 0 chat
cp "$OUT" "$TMP/full"
assert "three replies" "[ \"\$(grep -c '^\$' \"\$TMP/full\")\" -ge 3 ]"

# two turns saved in a session, the program restarted, the third turn
run_in "Hi${nl}Name a color.${nl}" 0 chat --session "$S"
cp "$OUT" "$TMP/part1"
assert "the session file exists" "[ -s \"\$S\" ]"
cp "$S" "$TMP/s2.rvls"
run_in "Why that one?${nl}" 0 chat --session "$S"
# nothing on stderr but the marker of a reply stopped at -n
assert "stderr: no message but the -n marker" "! grep -v -F '[stopped at -n ' \"\$ERR\" | grep -q ."
cat "$TMP/part1" "$OUT" >"$TMP/joined"
assert "restarted from the session: the same replies as the uninterrupted run" \
    "cmp -s \"\$TMP/joined\" \"\$TMP/full\""

# the earlier turns came from the cache, not decoded again
run_in "Why that one?${nl}" 0 chat --session "$TMP/s2.rvls" --json
assert "the third turn reuses the saved cache" \
    "grep -q '\"cached_tokens\":[1-9][0-9]' \"\$OUT\""
third=$(awk 'BEGIN{RS=""} NR==3' "$TMP/full")
out_has "$(printf '%s' "$third" | head -n 1 | cut -c1-30)"

# /save and /load in one run: the reply after /load is the one after /save
run_in "Hi${nl}/save $TMP/a.rvls${nl}Name a color.${nl}/load $TMP/a.rvls${nl}Name a color.${nl}/stats${nl}" 0 chat --json
err_has "(saved 2 messages and"
err_has "(loaded 2 messages and"
err_has "messages   4 (2 exchanges)"
assert "after /load the same reply again" \
    "[ \"\$(sed -n 2p \"\$OUT\" | sed 's/\"prompt_tokens\".*//')\" = \"\$(sed -n 3p \"\$OUT\" | sed 's/\"prompt_tokens\".*//')\" ]"

# settings travel with the session; the command line wins
run_in "/set temp 0.25${nl}/set top-k 7${nl}" 0 chat --session "$TMP/set.rvls" --system "Be brief."
run_in "/set${nl}/system${nl}" 0 chat --session "$TMP/set.rvls"
err_has "  temp               0.25"
err_has "  top-k              7"
err_has "  seed               7"
err_has "system: Be brief."
run_in "/set${nl}" 0 chat --session "$TMP/set.rvls" --temp 0.5
err_has "  temp               0.5"
err_has "  top-k              7"

# bad session files: refused with the reason, nothing half-loaded
printf 'not a session' >"$TMP/junk.rvls"
run_in "Hi${nl}" 1 chat --session "$TMP/junk.rvls"
err_has "junk.rvls"
out_empty
run_in "/load $TMP/junk.rvls${nl}/stats${nl}" 1 chat
err_has "/load: "
err_has "messages   0 (0 exchanges)"
head -c 3000 "$TMP/s2.rvls" >"$TMP/cut.rvls"
run_in "/load $TMP/cut.rvls${nl}" 1 chat
err_has "cut.rvls"
# another KV element type
run_in "Hi${nl}" 1 chat --kv-type f32 --session "$TMP/s2.rvls"
err_has "s2.rvls"
finish
