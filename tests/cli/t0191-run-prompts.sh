#!/bin/sh
# run's prompt sources: one trailing newline of standard input or -f is
# not part of the prompt (llama.cpp drops one from -f), so a question typed
# through a pipe asks what the same question as an argument asks; a prompt
# argument with standard input (a pipe or a file) or -f is one prompt, the
# material, a blank line, then the argument (ollama run puts standard input
# first too); never a source silently dropped.
. tests/cli/lib.sh
MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || skip_all "no default model at $MODEL (make model)"
export RUVLLM_MODEL="$MODEL"
toks() { sed -n 's/.*"tokens":\[\([0-9,]*\)\].*/\1/p' "$OUT"; }
ptoks() { sed -n 's/.*"prompt_tokens":\[\([0-9,]*\)\].*/\1/p' "$OUT"; }

# a question through a pipe = the same question as an argument: the same
# prompt tokens and, greedy, the same reply
run 0 ruvllm run --chat --temp 0 -n 12 --json "question?"
arg_p=$(ptoks)
arg_t=$(toks)
run_in "question?
" 0 ruvllm run --chat --temp 0 -n 12 --json
assert "stdin 'question?' and a newline: the prompt of the argument" "[ '$(ptoks)' = '$arg_p' ]"
assert "stdin 'question?' and a newline: the reply of the argument" "[ '$(toks)' = '$arg_t' ]"
printf 'question?\n' >"$TMP/q.txt"
run 0 ruvllm run --chat --temp 0 -n 12 --json -f "$TMP/q.txt"
assert "-f with a final newline: the prompt of the argument" "[ '$(ptoks)' = '$arg_p' ]"
assert "-f with a final newline: the reply of the argument" "[ '$(toks)' = '$arg_t' ]"
run_in "question?" 0 ruvllm run --chat --temp 0 -n 12 --json -
assert "'run -' reads standard input" "[ '$(ptoks)' = '$arg_p' ]"
# only one newline goes: the others are the text's
run 0 ruvllm run --tokenize "a
"
cp "$OUT" "$TMP/a-nl"
printf 'a\n\n' | ruvllm run --tokenize >"$OUT" 2>"$ERR"
assert "of 'a' and two newlines one newline is dropped" "cmp -s '$OUT' '$TMP/a-nl'"
run 0 ruvllm run --tokenize "a"
cp "$OUT" "$TMP/a"
printf 'a\r\n' | ruvllm run --tokenize >"$OUT" 2>"$ERR"
assert "... and not a carriage return before it" "! cmp -s '$OUT' '$TMP/a'"

# standard input and an argument: the material, a blank line, the instruction
run 0 ruvllm run --tokenize "notes

summarize"
cp "$OUT" "$TMP/joined"
run_in "notes
" 0 ruvllm run --tokenize summarize
assert "echo notes | run summarize: notes, a blank line, summarize" "cmp -s '$OUT' '$TMP/joined'"
run_in "notes
" 0 ruvllm run --tokenize -p summarize
assert "echo notes | run -p summarize: the same" "cmp -s '$OUT' '$TMP/joined'"
printf 'notes\n' >"$TMP/notes.txt"
ruvllm run --tokenize summarize <"$TMP/notes.txt" >"$OUT" 2>"$ERR"
assert "run summarize < FILE: the same" "cmp -s '$OUT' '$TMP/joined'"
run 0 ruvllm run --tokenize -f "$TMP/notes.txt" summarize
assert "run -f FILE summarize: the same" "cmp -s '$OUT' '$TMP/joined'"
# generation sees the joined prompt too (not only --tokenize)
run_in "notes
" 0 ruvllm run --temp 0 -n 2 --json summarize
assert "the generated run's prompt is the joined one" \
    "[ '$(ptoks)' = \"\$(tr ' ' ',' <'$TMP/joined')\" ]"
# nothing on standard input: the argument alone
run 0 ruvllm run --tokenize summarize
cp "$OUT" "$TMP/alone"
run_in "" 0 ruvllm run --tokenize summarize
assert "an empty pipe: the argument alone" "cmp -s '$OUT' '$TMP/alone'"
run_in "
" 0 ruvllm run --tokenize summarize
assert "a pipe with one newline: the argument alone" "cmp -s '$OUT' '$TMP/alone'"
assert "/dev/null is not read as material (run gives it)" "[ \"\$(ruvllm run --tokenize summarize </dev/null)\" = \"\$(cat '$OUT')\" ]"
# two prompts and two sources are usage errors
run 2 ruvllm run -p a b
err_has "give the prompt once"
run 2 ruvllm run -f "$TMP/notes.txt" -
err_has "not both"
run 2 ruvllm run --batch - -p summarize
err_has "--batch cannot be combined with -p"
run 2 ruvllm run --chat --raw summarize
err_has "--chat and --raw disagree"
finish
