#!/bin/sh
# run's rough edges: --stats on lines of their own (after text without a
# final newline too) without a duplicated field; a context longer than the
# model's training length warns once with the RoPE scaling that would reach
# it; on a terminal, raw completion with a chat model says so once (not
# with --chat or --raw), and Ctrl-C while run waits for a prompt exits 130
# without a read error (driven through a pseudo-terminal, as a user at a
# keyboard: Ctrl-C is the byte 0x03 turned into SIGINT by the terminal).
. tests/cli/lib.sh
MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || skip_all "no default model at $MODEL (make model)"
export RUVLLM_MODEL="$MODEL"
P="The capital of France is"

# --stats, stdout and stderr in one file: the text, then the stats lines,
# each at the start of a line
"$RUVLLM" run --temp 0 -n 2 --stats "$P" >"$TMP/both" 2>&1 </dev/null
"$RUVLLM" run --temp 0 -n 2 "$P" >"$TMP/text" 2>&1 </dev/null
assert "the text ends without a newline (else this proves nothing)" \
    "[ \"\$(tail -c 1 '$TMP/text' | od -An -tx1 | tr -d ' ')\" != 0a ]"
assert "the first line is the text alone" "[ \"\$(head -n 1 '$TMP/both')\" = \"\$(cat '$TMP/text')\" ]"
assert "every other line is a stats line" "[ \$(tail -n +2 '$TMP/both' | grep -c -v '^ruvllm run: ') = 0 ]"
assert "the stats lines are there" "grep -q '^ruvllm run: load .* tok/s' '$TMP/both'"
assert "no 'reused' without --prompt-cache" "! grep -q reused '$TMP/both'"
# stdout alone carries no newline that was not generated
"$RUVLLM" run --temp 0 -n 2 --stats "$P" >"$TMP/out" 2>"$TMP/err" </dev/null
assert "stdout unchanged by --stats" "cmp -s '$TMP/out' '$TMP/text'"
assert "stderr starts with the stats (no blank line when apart)" "head -n 1 '$TMP/err' | grep -q '^ruvllm run: load '"
run 0 ruvllm run --temp 0 -n 3 --stats --prompt-cache "$TMP/pc" "$P"
run 0 ruvllm run --temp 0 -n 3 --stats --prompt-cache "$TMP/pc" "$P"
assert "with --prompt-cache 'reused' is said once" "[ \$(grep -o reused '$ERR' | wc -l) = 1 ]"
err_has "prompt tokens reused: "

# a context past the training length (SmolLM2: 8192)
run 0 ruvllm run -c 100000 --temp 0 -n 1 "$P"
err_has "warning: a context of 100000 tokens is longer than the 8192 this model was trained with"
err_has "add --rope-scaling yarn --rope-scale 12.21"
assert "said once" "[ \$(grep -c warning '$ERR') = 1 ]"
run 0 ruvllm run -c 8192 --temp 0 -n 1 "$P"
err_empty
run 0 ruvllm run -c 100000 --rope-scaling yarn --rope-scale 12.21 --temp 0 -n 1 "$P"
err_empty
run 0 ruvllm run -c 100000 --rope-scaling linear --rope-scale 4 --temp 0 -n 1 "$P"
err_has "--rope-scale 12.21"

# on a terminal
command -v python3 >/dev/null || { echo "# no python3: the terminal checks are skipped"; finish; }
cat >"$TMP/term.py" <<'PY'
# term.py OUT WAIT SEND CMD...: run CMD on a new pseudo-terminal (its
# stdin, stdout and stderr); once WAIT has been printed, type SEND; OUT
# gets everything printed; exits with CMD's status (60 s at most)
import os, pty, select, sys, time
out, wait, send, cmd = sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode(), sys.argv[4:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(cmd[0], cmd)
buf, sent, end = b"", not send, time.time() + 60
while time.time() < end:
    if not sent and wait in buf:
        time.sleep(0.3)
        os.write(fd, send.decode("unicode_escape").encode("latin1"))
        sent = True
    if select.select([fd], [], [], 0.2)[0]:
        try:
            d = os.read(fd, 4096)
        except OSError:
            break
        if not d:
            break
        buf += d
else:
    os.kill(pid, 9)
open(out, "wb").write(buf)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
PY
tty_run() { python3 "$TMP/term.py" "$TMP/tty" "$@"; }
tty_run "" "" "$RUVLLM" run --temp 0 -n 2 "$P"
assert "a terminal: raw completion says so" "grep -q 'note: completing the prompt as raw text; this model has a chat template: add --chat' '$TMP/tty'"
assert "once" "[ \$(grep -c 'note: completing' '$TMP/tty') = 1 ]"
for o in --chat --raw -no-cnv; do
    tty_run "" "" "$RUVLLM" run $o --temp 0 -n 2 "$P"
    assert "a terminal with $o: no note" "! grep -q 'note:' '$TMP/tty'"
done
run 0 ruvllm run --temp 0 -n 2 "$P"
assert "not a terminal: no note" "! grep -q 'note:' '$ERR'"
tty_run "" "" "$RUVLLM" run -m tests/data/tiny/llama.gguf --temp 0 -n 2 "$P"
assert "a model without a chat template: no note" "! grep -q 'note:' '$TMP/tty'"
# Ctrl-C while run waits for a prompt typed at the terminal
tty_run "end with Ctrl-D" '\x03' "$RUVLLM" run -n 2
st=$?
assert "Ctrl-C at the prompt exits 130 (got $st)" "[ $st = 130 ]"
assert "no read error" "! grep -q -i 'error' '$TMP/tty'"
# and a prompt typed there is used (its newline dropped; Ctrl-D ends it)
exp=$(ruvllm run --tokenize Hi </dev/null)
tty_run "end with Ctrl-D" 'Hi\n\x04' "$RUVLLM" run --tokenize
tr -d '\r' <"$TMP/tty" >"$TMP/tty-lines"
assert "a prompt typed at the terminal is read" "grep -q -x '$exp' '$TMP/tty-lines'"
finish
