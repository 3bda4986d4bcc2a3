#!/bin/sh
# Nothing lost, nothing hangs, per command: outputs that are not regular
# files are refused and left as they are; conversation files are private
# and keep their mode; a FIFO where a file must be is refused at once;
# text inputs are bounded; option combinations that cannot work are
# refused up front; a second chat on one session file is turned away; a
# chat interrupted before its first reply exits 130 and says so once.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi
nl='
'
# a command that must fail at once, not hang: at most 20 s
quick() { [ "$1" = ruvllm ] && { shift; set -- "$RUVLLM" "$@"; }; timeout 20 "$@"; }

# ---- outputs that are not regular files --------------------------------
mkfifo "$TMP/fifo"
run 1 quick ruvllm run -m "$MODEL" -n 2 --prompt-cache "$TMP/fifo" "Hi"
err_has "$TMP/fifo: exists and is a FIFO; refusing to replace it"
assert "the FIFO is still a FIFO" "[ -p '$TMP/fifo' ]"
if [ "$(id -u)" = 0 ]; then
    mknod "$TMP/null" c 1 3
    NULLDEV=$TMP/null
else
    NULLDEV=/dev/null
fi
run 1 ruvllm run -m "$MODEL" -n 2 --prompt-cache "$NULLDEV" "Hi"
err_has "exists and is a character device"
out_empty
assert "the device is still a device" "[ -c '$NULLDEV' ]"
run 1 quick ruvllm quantize -q --allow-requantize "$MODEL" "$TMP/fifo" Q8_0
err_has "is a FIFO; refusing to replace it"
run 1 ruvllm dequant -q "$MODEL" "$NULLDEV"
err_has "is a character device"
run 1 quick ruvllm lora-merge -q "$MODEL" tests/data/lora/smol-r8 -o "$TMP/fifo"
err_has "is a FIFO"
assert "after all that, the FIFO is still a FIFO" "[ -p '$TMP/fifo' ]"
run_in "/save $TMP/fifo${nl}" 1 quick ruvllm chat -m "$MODEL" -n 2
err_has "is a FIFO"
assert "chat /save left the FIFO alone" "[ -p '$TMP/fifo' ]"

# ---- modes ---------------------------------------------------------------
umask 022
S=$TMP/conv.rvls
run_in "Hi${nl}" 0 ruvllm chat -m "$MODEL" -n 4 --seed 1 --session "$S"
assert "a new session file is private (0600)" "[ \"\$(stat -c %a '$S')\" = 600 ]"
chmod 640 "$S"
run_in "Again${nl}" 0 ruvllm chat -m "$MODEL" -n 4 --seed 1 --session "$S"
assert "a rewritten session keeps its mode (0640)" "[ \"\$(stat -c %a '$S')\" = 640 ]"
run 0 ruvllm run -m "$MODEL" -n 2 --prompt-cache "$TMP/cache.rvls" "Hi"
assert "a new prompt cache is private (0600)" "[ \"\$(stat -c %a '$TMP/cache.rvls')\" = 600 ]"
run 0 ruvllm dequant -q "$MODEL" "$TMP/model-f16.gguf"
assert "a model file is an ordinary file (0644 under umask 022)" \
    "[ \"\$(stat -c %a '$TMP/model-f16.gguf')\" = 644 ]"
rm -f "$TMP/model-f16.gguf"

# ---- the longest legal output name --------------------------------------
long=$(printf 'q%.0s' $(seq 1 250)).gguf
run 0 ruvllm dequant -q "$MODEL" "$TMP/$long"
assert "a 255-byte output name works" "[ -s '$TMP/$long' ]"
rm -f "$TMP/$long"

# ---- FIFOs where a file must be -----------------------------------------
run 1 quick ruvllm info "$TMP/fifo"
err_has "$TMP/fifo: is a FIFO, not a regular file"
run 1 quick ruvllm run -m "$TMP/fifo" -n 2 "Hi"
err_has "is a FIFO, not a regular file"
run 1 quick ruvllm kv-inspect "$TMP/fifo"
err_has "is a FIFO, not a regular file"
run 1 quick ruvllm quantize -q "$TMP/fifo" "$TMP/x.gguf" Q8_0
err_has "is a FIFO, not a regular file"
run_in "Hi${nl}" 1 quick ruvllm chat -m "$MODEL" -n 2 --session "$TMP/fifo"
err_has "is a FIFO"
run 1 quick ruvllm run -m "$MODEL" -n 2 --chat --chat-template "$TMP/fifo" "Hi"
err_has "is a FIFO"

# ---- bounded text inputs ---------------------------------------------------
RUVLLM_MAX_INPUT=64K run 1 quick ruvllm run -m "$MODEL" -n 2 -f /dev/zero
err_has "/dev/zero: input larger than the limit of 64 KiB (set RUVLLM_MAX_INPUT=BYTES to raise it)"
RUVLLM_MAX_INPUT=64K run 1 quick sh -c "'$RUVLLM' run -m '$MODEL' -n 2 </dev/zero"
err_has "standard input: input larger than the limit of 64 KiB"
RUVLLM_MAX_INPUT=64K run 1 quick ruvllm bench ppl -m "$MODEL" -f /dev/zero
err_has "/dev/zero: input larger than the limit of 64 KiB"

# ---- combinations refused up front ----------------------------------------
run 2 ruvllm run -m "$MODEL" -c 64 --context-shift --keep 100 -n 4 "Hi"
err_has "--keep 100 leaves nothing for --context-shift to drop in a context of 64 tokens (keep at most 60"
err_lacks() { if grep -q -F -e "$1" "$ERR"; then not_ok "stderr has '$1'"; else ok "stderr lacks '$1'"; fi; }
err_lacks "use -c for a larger context or --context-shift"
for bad in inf nan 1e999 -5000; do
    run 1 ruvllm run -m "$MODEL" -n 2 --lora "tests/data/lora/smol-r8:$bad" "Hi"
    err_has "the scale $bad is not a finite number"
done
# a legal but absurd scale overflows the arithmetic: an error, not empty
# text and exit 0 (the overflow came out of the quantized matmuls as
# constant logits, and greedy decoding picked the end-of-text token)
run 1 ruvllm run -m "$MODEL" -n 8 --temp 0 --lora tests/data/lora/smol-r8:1000 "Hi"
err_has "the model's activations are not finite"
out_empty

# ---- one conversation per session file --------------------------------------
S2=$TMP/busy.rvls
mkfifo "$TMP/in"
"$RUVLLM" chat -m "$MODEL" -n 2 --session "$S2" <"$TMP/in" >/dev/null 2>&1 &
holder=$!
exec 7>"$TMP/in"     # the first chat waits for its first message
i=0
while [ $i -lt 200 ] && [ ! -e "$TMP/.busy.rvls.lock" ]; do sleep 0.05; i=$((i + 1)); done
sleep 0.5
run_in "Hi${nl}" 1 ruvllm chat -m "$MODEL" -n 2 --session "$S2"
err_has "$S2: in use by another ruvllm (pid $holder)"
exec 7>&-
wait $holder

# ---- a chat interrupted before its first reply ------------------------------
# a long prompt (decoding takes a while), SIGINT once the model is open:
# one "interrupted" line, exit 130, and the session still saved
S3=$TMP/int.rvls
long_msg=$(seq 1 700 | tr '\n' ' ')
printf '%s\n' "$long_msg" >"$TMP/msg"
"$RUVLLM" chat -m "$MODEL" -t 1 -n 8 --session "$S3" <"$TMP/msg" >"$OUT" 2>"$ERR" &
pid=$!
wait_sigint_handler $pid
i=0
# the model mapped (the file's descriptor is open only while it loads,
# which now takes a few milliseconds)
while [ $i -lt 200 ] && ! grep -q -F "$(basename "$MODEL")" "/proc/$pid/maps" 2>/dev/null; do
    sleep 0.05; i=$((i + 1)); done
sleep 0.3
kill -INT $pid
wait $pid
st=$?
assert "interrupted before the reply: exit 130 ($st)" "[ $st -eq 130 ]"
assert "interrupted before the reply: said once ($(grep -c interrupted "$ERR"))" \
    "[ \"\$(grep -c interrupted '$ERR')\" -eq 1 ]"
finish
