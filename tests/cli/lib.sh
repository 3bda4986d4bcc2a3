# tests/cli/lib.sh - a tiny TAP harness for command-line tests.
#
#   . tests/cli/lib.sh
#   run 2 ruvllm infoo              # expect exit status 2
#   err_has "did you mean 'info'"   # assertions on the last run
#   out_is ""                       # exact stdout
#   finish
#   skip_all "no model at $MODEL"   # instead: nothing can run (exit 77)
#
# RUVLLM is the binary under test (tests/run.sh sets it).
set -u
: "${RUVLLM:=$PWD/build/ruvllm}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ruvllm-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
OUT=$TMP/stdout
ERR=$TMP/stderr
: >"$OUT"
: >"$ERR"
n=0
nfail=0
last=""

ruvllm() { "$RUVLLM" "$@"; }

ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() {
    n=$((n + 1))
    nfail=$((nfail + 1))
    echo "not ok $n - $*"
    echo "#   command: $last"
    sed 's/^/#   stdout: /' "$OUT" | head -n 15
    sed 's/^/#   stderr: /' "$ERR" | head -n 15
}

# run EXPECTED_STATUS COMMAND...
run() {
    want=$1
    shift
    last="$*"
    "$@" >"$OUT" 2>"$ERR" </dev/null
    got=$?
    if [ "$got" = "$want" ]; then ok "exit $want: $last"; else not_ok "exit $got, wanted $want: $last"; fi
}

# run_in INPUT EXPECTED_STATUS COMMAND...: like run with INPUT on stdin
run_in() {
    input=$1
    want=$2
    shift 2
    last="$*"
    printf '%s' "$input" | "$@" >"$OUT" 2>"$ERR"
    got=$?
    if [ "$got" = "$want" ]; then ok "exit $want: $last"; else not_ok "exit $got, wanted $want: $last"; fi
}

out_has() { if grep -q -F -e "$1" "$OUT"; then ok "stdout has '$1'"; else not_ok "stdout lacks '$1'"; fi; }
err_has() { if grep -q -F -e "$1" "$ERR"; then ok "stderr has '$1'"; else not_ok "stderr lacks '$1'"; fi; }
out_lacks() { if grep -q -F -e "$1" "$OUT"; then not_ok "stdout has '$1'"; else ok "stdout lacks '$1'"; fi; }
out_empty() { if [ -s "$OUT" ]; then not_ok "stdout not empty"; else ok "stdout empty"; fi; }
err_empty() { if [ -s "$ERR" ]; then not_ok "stderr not empty"; else ok "stderr empty"; fi; }
# assert DESCRIPTION SHELL-CONDITION
assert() { if eval "$2"; then ok "$1"; else not_ok "$1"; fi; }

# Wait (up to 20 s) until process $1 catches SIGINT (bit 2 of SigCgt in
# /proc/PID/status): a background job of a non-interactive shell starts
# with SIGINT ignored, so a Ctrl-C sent before ruvllm installed its handler
# would be lost, on a loaded machine especially.
wait_sigint_handler() {
    i=0
    while [ $i -lt 200 ]; do
        m=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null)
        [ -z "$m" ] && return 1   # gone
        [ $(( 0x$m & 2 )) -ne 0 ] && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# tensor_hashes FILE: per tensor of a GGUF file, in file order, its name,
# type and the first 16 hex digits of the SHA-256 of its data (from the
# "... bytes offset" columns of `ruvllm info`'s tensor table)
tensor_hashes() {
    ruvllm info --no-metadata "$1" | awk '$1 ~ /^[0-9]+$/ { print $2, $3, $(NF-1), $NF }' |
    while read -r name type bytes off; do
        h=$(tail -c +$((off + 1)) "$1" | head -c "$bytes" | sha256sum | cut -c1-16)
        printf '%s\t%s\t%s\n' "$name" "$type" "$h"
    done
}

# skip_all REASON: nothing here can run (no model, no tool): say so in TAP
# and exit 77, which tests/run.sh counts as a skip, not a pass
skip_all() {
    echo "1..0 # SKIP $*"
    exit 77
}

finish() {
    echo "1..$n"
    [ "$nfail" -eq 0 ] || { echo "# $nfail of $n failed"; exit 1; }
    exit 0
}
