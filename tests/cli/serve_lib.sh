# Shared by the serve tests (t0180, t0182): the default model, a server
# started in the background on a port of its own choosing (--port 0, named
# by its log), curl requests with their status, and checks of JSON bodies
# and event streams. Sourced after tests/cli/lib.sh.

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || skip_all "no model at $MODEL (make model)"
command -v curl >/dev/null || skip_all "no curl (scripts/bootstrap.sh installs it)"
command -v python3 >/dev/null || skip_all "no python3 (scripts/bootstrap.sh installs it)"

PIDS=""
trap 'for p in $PIDS; do kill -9 $p 2>/dev/null; done; rm -rf "$TMP"' EXIT

# start LOG ARGS...: a server in the background; PID and URL (empty when it
# did not come up within 60 s)
start() {
    log=$1
    shift
    "$RUVLLM" serve -m "$MODEL" --port 0 -t 2 "$@" 2>"$log" &
    PID=$!
    PIDS="$PIDS $PID"
    URL=""
    i=0
    while [ $i -lt 600 ] && [ -z "$URL" ] && kill -0 $PID 2>/dev/null; do
        sleep 0.1
        URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log")
        i=$((i + 1))
    done
}

# req METHOD PATH [BODY] [curl options...]: the answer's body in $OUT, its
# status in $CODE
req() {
    m=$1
    p=$2
    shift 2
    last="curl -X $m $p $*"
    if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
        b=$1
        shift
        CODE=$(curl -s -o "$OUT" -w '%{http_code}' -X "$m" -H 'Content-Type: application/json' \
            --data-binary "$b" "$@" "$URL$p")
    else
        CODE=$(curl -s -o "$OUT" -w '%{http_code}' -X "$m" "$@" "$URL$p")
    fi
}
code_is() { if [ "$CODE" = "$1" ]; then ok "$last: $1"; else not_ok "$last: status $CODE, wanted $1"; fi; }

# js EXPR: a Python expression over the JSON body in $OUT (as `j`), printed
js() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($1)" "$OUT" 2>/dev/null; }
# json_is EXPR VALUE
json_is() {
    v=$(js "$1")
    if [ "$v" = "$2" ]; then ok "$1 == $2"; else not_ok "$1 is '$v', wanted '$2'"; fi
}
# an error object as OpenAI's: {"error": {"message", "type", "param", "code"}}
error_is() { # TYPE PARAM
    json_is "sorted(j['error'].keys())" "['code', 'message', 'param', 'type']"
    json_is "j['error']['type']" "$1"
    json_is "j['error']['param']" "$2"
}

# sse: the concatenated text of the event stream in $OUT (chat deltas or
# completion texts); checks every event is "data: " JSON and the last [DONE]
sse() {
    python3 - "$OUT" <<'PY'
import json, sys
ev = [l[6:] for l in open(sys.argv[1], encoding="utf-8").read().split("\n\n") if l]
assert ev[-1] == "[DONE]", ev[-1]
text, fin = "", []
for e in ev[:-1]:
    c = json.loads(e)
    if not c["choices"]:
        continue
    ch = c["choices"][0]
    text += ch["delta"].get("content") or "" if "delta" in ch else ch["text"]
    if ch["finish_reason"]:
        fin.append(ch["finish_reason"])
print(json.dumps({"text": text, "finish": fin, "n": len(ev), "first": json.loads(ev[0]),
                  "last": json.loads(ev[-2])}))
PY
}
