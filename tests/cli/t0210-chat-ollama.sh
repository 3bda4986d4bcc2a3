#!/bin/sh
# `ruvllm chat` for ollama's users, from a script: ollama's interactive
# commands as aliases of ours (/bye, /clear, /?, /set system, /set
# parameter with ollama's names, /set verbose and /set quiet, /show),
# --verbose's timings after each reply (ollama run --verbose's fields), the
# marker of a reply stopped at -n, the answer to a misplaced argument, and
# plurals. The terminal side is tests/test_chat_pty.c.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi
nl='
'
chat() { ruvllm chat -m "$MODEL" -t 2 --temp 0 "$@"; }
# the number of lines of stderr starting with $1
err_count() { grep -c -e "^$1" "$ERR"; }

# ---- a misplaced argument: what to type instead ----
run 2 chat "Why is the sky blue?"
err_has "unexpected argument 'Why is the sky blue?'"
err_has "ruvllm run --chat 'Why is the sky blue?'"
run 2 chat Why is "it's" blue
err_has "ruvllm run --chat 'Why is it'\\''s blue'"
# one word: a message, or (ollama run NAME) a model's name
run 2 chat smollm2
err_has "ruvllm run --chat 'smollm2'; to chat with the model smollm2: ruvllm chat -m smollm2"
run 2 ruvllm chat "$MODEL"
err_has "looks like a model: give it with -m (ruvllm chat -m '$MODEL')"
out_empty

# ---- /set parameter with ollama's names; /show ----
run_in "/set parameter temperature 0.5${nl}/set parameter top_k 7${nl}/set parameter top_p 0.9${nl}/set parameter min_p 0.1${nl}/set parameter repeat_penalty 1.1${nl}/set parameter repeat_last_n 32${nl}/set parameter num_predict 5${nl}/set parameter seed 42${nl}/show parameters${nl}" 0 chat
err_has "(temperature = 0.5, as temp)"
err_has "(num_predict = 5, as max-tokens)"
for line in "temp               0.5" "top-k              7" "top-p              0.9" \
    "min-p              0.1" "repeat-penalty     1.1" "repeat-last-n      32" \
    "max-tokens         5" "seed               42"; do
    err_has "  $line"
done
out_empty
# what cannot change during a chat, and unknown names
run_in "/set parameter num_ctx 8192${nl}/set parameter num_thread 4${nl}/set parameter temprature 1${nl}/set parameter mirostat 1${nl}/set parameter top_k${nl}/set wordwrap${nl}/show modelfile${nl}/show nothing${nl}" 1 chat
err_has "/set parameter num_ctx: the context (4096 tokens) is allocated when the chat starts; to continue this chat in a larger one: /save FILE, then ruvllm chat -c N --session FILE"
err_has "/set parameter num_thread: the threads start with the chat; start it with -t N"
err_has "/set parameter: unknown parameter 'temprature'; did you mean 'temperature'?"
err_has "/set parameter: unknown parameter 'mirostat' (/set parameter lists them)"
err_has "/set parameter top_k needs a value"
err_has "/set wordwrap: not in ruvllm chat"
err_has "/show modelfile: ruvllm has no Modelfiles"
err_has "/show: unknown 'nothing'"
# ollama's /load MODEL: ours loads a session file, and says how to change models
run_in "/load smollm2${nl}" 1 chat
err_has "(/load takes a session file saved with /save; another model needs a new chat: ruvllm chat -m MODEL)"
# /show info: ollama's fields, from the file
run_in "/show info${nl}/show${nl}" 0 chat -c 512
assert "/show info and /show print the same" "[ \"\$(grep -c 'architecture         llama' \"\$ERR\")\" = 2 ]"
err_has "parameters           134.52M"
err_has "context length       8192"
err_has "embedding length     576"
err_has "quantization         Q4_1"
err_has "context size         512 tokens (-c)"

# ---- /set system TEXT (ollama) is /system TEXT; /clear is /reset; /bye is /exit ----
run_in "/set system Answer in French.${nl}/show system${nl}Hi${nl}/clear${nl}/stats${nl}/bye${nl}Never sent${nl}" 0 chat -n 4 --json
err_has "(system message set)"
err_has "system: Answer in French."
err_has "(a new conversation; the system message stays)"
err_has "messages   1 (0 exchanges)"
assert "one turn: none after /bye" "[ \"\$(wc -l <\"\$OUT\")\" = 1 ]"
out_lacks "Never sent"
# /? is /help, and lists ollama's names
run_in "/?${nl}" 0 chat
err_has "  /bye "
err_has "  /clear "
err_has "  /show [WHAT] "
err_has "As ollama: /set parameter NAME VALUE"

# ---- a reply stopped at -n says so (on stderr: stdout keeps the reply) ----
run_in "Write a long story about a cat.${nl}" 0 chat -n 5
err_has "[stopped at -n 5 tokens]"
out_lacks "[stopped"
run_in "Write a long story about a cat.${nl}" 0 chat -n 1
err_has "[stopped at -n 1 token]"
# a reply that ends by itself has no marker
run_in "Say hello.${nl}" 0 chat -n 200
assert "a finished reply has no marker" "! grep -q 'stopped at' \"\$ERR\""
# /set parameter stop: stop strings besides the template's
run_in "/set parameter stop 3${nl}Count from 1 to 10, separated by commas.${nl}" 0 chat -n 60
err_has "(stop: 1 string besides the template's)"
out_has "1, 2, "
out_lacks "4"

# ---- --verbose: ollama's fields after each reply; /set quiet, /set verbose ----
run_in "Say hello.${nl}Say hi.${nl}" 0 chat -n 4 --verbose
for f in "total duration:" "load duration:" "prompt eval count:" "prompt eval duration:" \
    "prompt eval rate:" "eval count:" "eval duration:" "eval rate:"; do
    assert "two replies, two '$f' lines" "[ \"\$(err_count '$f')\" = 2 ]"
done
err_has "eval count:           4 tokens"
err_has " tokens/s"
# the model loads once: the second reply's load duration is 0
assert "load duration: the first reply's only" "[ \"\$(grep 'load duration:' \"\$ERR\" | sed -n 2p)\" = 'load duration:        0.000ms' ]"
# the second turn reuses the first one's cache: ollama's prompt eval count is what was decoded
assert "the second prompt reuses tokens" "grep 'prompt cache:' \"\$ERR\" | sed -n 2p | grep -q ' [1-9][0-9]* tokens reused'"
run_in "Say hello.${nl}/set verbose${nl}Say hi.${nl}/set quiet${nl}Say bye.${nl}" 0 chat -n 4
err_has "(verbose: timings after each reply)"
err_has "(quiet: no timings after the replies)"
assert "one reply of three with timings" "[ \"\$(err_count 'eval rate:')\" = 1 ]"
run_in "Say hello.${nl}" 0 chat -n 4
assert "no timings without --verbose" "[ \"\$(err_count 'eval rate:')\" = 0 ]"

# ---- plurals ----
run_in "Hi${nl}/stats${nl}/save $TMP/s.rvls${nl}" 0 chat -n 1
err_has "messages   2 (1 exchange)"
err_has "session    1 turn, "
err_has "reply 1 token in "
err_has "(saved 2 messages and "
finish
