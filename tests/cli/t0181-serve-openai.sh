#!/bin/sh
# `ruvllm serve` as the endpoint of the official openai Python client
# (PyPI openai 3.51.0, installed by this test into a venv in the cache, as
# make model fetches the models: the one other thing make check fetches):
# whole and streamed chats, and four clients at once, whose greedy answers
# equal `ruvllm run --chat`'s for the same message. The client script is
# tests/ref/openai_client.py.
. tests/cli/lib.sh

OPENAI_VERSION=3.51.0
MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || skip_all "no model at $MODEL (make model)"
VENV=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/venv-openai-$OPENAI_VERSION

# the venv, made under a temporary name and renamed once complete
if ! "$VENV/bin/python" -c "import openai" 2>/dev/null; then
    rm -rf "$VENV.tmp"
    if ! python3 -m venv "$VENV.tmp" >&2 ||
        ! "$VENV.tmp/bin/pip" install --quiet --disable-pip-version-check "openai==$OPENAI_VERSION" >&2; then
        rm -rf "$VENV.tmp"
        echo "Bail out! cannot install openai==$OPENAI_VERSION from PyPI into $VENV"
        exit 1
    fi
    rm -rf "$VENV" && mv "$VENV.tmp" "$VENV"
fi

"$RUVLLM" serve -m "$MODEL" --port 0 -t 2 --parallel 4 -c 512 2>"$TMP/serve.log" &
PID=$!
trap 'kill -9 $PID 2>/dev/null; rm -rf "$TMP"' EXIT
URL=""
i=0
while [ $i -lt 600 ] && [ -z "$URL" ] && kill -0 $PID 2>/dev/null; do
    sleep 0.1
    URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$TMP/serve.log")
    i=$((i + 1))
done
assert "the server comes up" "[ -n '$URL' ]"

N=20
set -- "What is the capital of France?" "Name three colours." "Write a haiku about the sea." \
    "What is 2 + 2?"
run 0 "$VENV/bin/python" tests/ref/openai_client.py "$URL" $N "The capital of France is" "$@"
cp "$OUT" "$TMP/client.json"
# js EXPR: a Python expression over the client's output (as `j`)
js() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($1)" "$TMP/client.json"; }
assert "the client lists the model" "[ \"\$(js \"j['models']\")\" = \"['SmolLM2-135M-Instruct.Q4_1']\" ]"
for q in "$@"; do
    "$RUVLLM" run -m "$MODEL" -t 2 --chat --temp 0 -n $N "$q" >"$TMP/want.txt" 2>/dev/null
    for how in whole stream concurrent; do
        got=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['prompts'][sys.argv[2]]['$how']['text'] == open(sys.argv[3], encoding='utf-8').read())" \
            "$TMP/client.json" "$q" "$TMP/want.txt")
        assert "'$q' ($how) equals run --chat's answer" "[ '$got' = True ]"
    done
    same=$(python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['prompts'][sys.argv[2]]; print(p['stream']['finish'] == [p['whole']['finish']] and p['whole']['finish'] in ('stop', 'length'))" "$TMP/client.json" "$q")
    assert "'$q': one finish_reason, the same whole and streamed" "[ '$same' = True ]"
done
"$RUVLLM" run -m "$MODEL" -t 2 --temp 0 -n $N "The capital of France is" >"$TMP/want.txt" 2>/dev/null
got=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['completion']['text'] == open(sys.argv[2], encoding='utf-8').read())" "$TMP/client.json" "$TMP/want.txt")
assert "a text completion equals run's" "[ '$got' = True ] && [ -s '$TMP/want.txt' ]"
kill -TERM $PID
wait $PID
st=$?
assert "SIGTERM: exit 0 (got $st)" "[ $st = 0 ]"
finish
