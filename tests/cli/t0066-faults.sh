#!/bin/sh
# Fault injection: every command that writes a file is sent INT, TERM, HUP,
# PIPE and KILL while it writes, and made to fill a small disk. Whatever
# happens, the destination is either what it was before (checksum) or the
# complete new file, never a part; no temporary is left (after KILL: none
# visible, and none after the next run); exit codes are the documented ones
# (130 when interrupted, 1 for a full disk, 0 when only the progress pipe
# closed). The signal is sent once the command has its output open (its
# /proc/PID/fd shows a file in the destination's directory), so it always
# lands mid-work, on a loaded machine too.
. tests/cli/lib.sh

MODEL=${RVL_FAULT_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi
D=$TMP/out
mkdir -p "$D"

sum() { if [ -e "$1" ]; then cksum <"$1"; else echo absent; fi; }
# every entry of $D but the destination $1 (hidden ones too)
strays() { ls -A "$D" | grep -v -x -F -e "$(basename "$1")" -e previous | tr '\n' ' '; }

# wait until process $1 has a file open in $D (its output), up to 20 s
wait_output() {
    i=0
    while [ $i -lt 400 ]; do
        ls -l "/proc/$1/fd" 2>/dev/null | grep -q -F -e "$D/" && return 0
        kill -0 "$1" 2>/dev/null || return 1
        sleep 0.05
        i=$((i + 1))
    done
    return 1
}

# case NAME DEST SIGNAL COMMAND...: run COMMAND in the background with DEST
# holding the previous contents, signal it mid-work, check the outcome
case_sig() {
    name=$1 dest=$2 sig=$3
    shift 3
    # a command that finished before the signal arrived (exit 0: a loaded
    # machine can stall this script between seeing the output open and
    # sending the signal) has not been tested: up to three tries
    tries=0
    while :; do
        tries=$((tries + 1))
        rm -rf "$dest"
        printf 'previous contents\n' >"$dest"
        before=$(sum "$dest")
        "$@" >"$TMP/o" 2>"$TMP/e" &
        pid=$!
        if ! wait_output $pid; then
            wait $pid
            not_ok "$name $sig: the output was never seen open (exit $?)"
            return
        fi
        kill -s "$sig" $pid
        wait $pid 2>/dev/null
        st=$?
        [ $st -eq 0 ] && [ $tries -lt 3 ] || break
        printf '# %s %s: finished before the signal (try %d); again\n' "$name" "$sig" $tries
    done
    case $sig in
    KILL) want=137 ;;
    *) want=130 ;;
    esac
    if [ $st -eq $want ]; then ok "$name $sig: exit $want"; else
        not_ok "$name $sig: exit $st, wanted $want"; sed 's/^/#   /' "$TMP/e" | head -5; fi
    assert "$name $sig: the destination is untouched" "[ \"$(sum "$dest")\" = \"$before\" ]"
    s=$(strays "$dest")
    assert "$name $sig: no temporary is visible ($s)" "[ -z \"$s\" ]"
}

# the same with the progress pipe closed: the work must complete
case_pipe() {
    name=$1 dest=$2 ref=$3
    shift 3
    rm -rf "$dest"
    printf 'previous contents\n' >"$dest"
    st=$( { "$@" 2>&1; echo "status $?" >"$TMP/st"; } | head -c 1 >/dev/null; cat "$TMP/st")
    assert "$name PIPE: completes ($st)" "[ '$st' = 'status 0' ]"
    assert "$name PIPE: the destination is the complete output" "[ \"$(sum "$dest")\" = \"$ref\" ]"
    s=$(strays "$dest")
    assert "$name PIPE: no temporary is visible ($s)" "[ -z \"$s\" ]"
}

# ---- quantize ------------------------------------------------------------
Q="$RUVLLM quantize -q --allow-requantize -t 1 $MODEL $D/q.gguf Q8_0"
run 0 $Q
REF_Q=$(sum "$D/q.gguf")
for sig in INT TERM HUP KILL; do
    case_sig quantize "$D/q.gguf" $sig $Q
done
case_pipe quantize "$D/q.gguf" "$REF_Q" "$RUVLLM" quantize --allow-requantize -t 1 "$MODEL" "$D/q.gguf" Q8_0
# after KILL: a later run leaves no temporary anywhere
run 0 $Q
s=$(strays "$D/q.gguf")
assert "quantize: after a KILL the next run leaves nothing ($s)" "[ -z \"$s\" ]"
rm -f "$D/q.gguf"

# ---- dequant (GGUF, and a safetensors directory) ------------------------
G="$RUVLLM dequant -q $MODEL $D/f16.gguf"
run 0 $G
REF_G=$(sum "$D/f16.gguf")
for sig in INT HUP KILL; do
    case_sig dequant "$D/f16.gguf" $sig $G
done
case_pipe dequant "$D/f16.gguf" "$REF_G" "$RUVLLM" dequant "$MODEL" "$D/f16.gguf"
rm -f "$D/f16.gguf"

for sig in INT TERM KILL; do
    tries=0
    while :; do # finished before the signal on a loaded machine: again (case_sig)
        tries=$((tries + 1))
        rm -rf "$D/st"
        "$RUVLLM" dequant -q --format safetensors "$MODEL" "$D/st" >"$TMP/o" 2>"$TMP/e" &
        pid=$!
        wait_output $pid
        kill -s $sig $pid
        wait $pid
        st=$?
        [ $st -eq 0 ] && [ $tries -lt 3 ] || break
        printf '# dequant --format safetensors %s: finished before the signal (try %d); again\n' \
            $sig $tries
    done
    [ $sig = KILL ] && want=137 || want=130
    assert "dequant --format safetensors $sig: exit $want ($st)" "[ $st -eq $want ]"
    assert "dequant --format safetensors $sig: nothing at OUT" "[ ! -e '$D/st' ]"
    [ $sig = KILL ] && run 0 ruvllm dequant -q --format safetensors "$MODEL" "$D/st2"
    s=$(ls -A "$D" | grep -v -x -e st2 | tr '\n' ' ')
    assert "dequant --format safetensors $sig: no temporary directory left ($s)" "[ -z \"$s\" ]"
    rm -rf "$D/st2"
done

# ---- lora-merge ----------------------------------------------------------
L="$RUVLLM lora-merge -q -t 1 $MODEL tests/data/lora/smol-r8 -o $D/merged.gguf"
for sig in INT TERM KILL; do
    case_sig lora-merge "$D/merged.gguf" $sig $L
done
rm -f "$D/merged.gguf"

# ---- bench's synthetic models (written to TMPDIR, hundreds of MB) ---------
mkdir -p "$TMP/synth"
for sig in INT KILL; do
    TMPDIR=$TMP/synth "$RUVLLM" bench model --synthetic smollm2-135m --type F16 -p 0 -n 1 -r 1 \
        >"$TMP/o" 2>"$TMP/e" &
    pid=$!
    i=0
    while [ $i -lt 400 ] && ! ls -l "/proc/$pid/fd" 2>/dev/null | grep -q -F -e "$TMP/synth/"; do
        sleep 0.05; i=$((i + 1)); done
    kill -s $sig $pid
    wait $pid 2>/dev/null
    st=$?
    [ $sig = KILL ] && want=137 || want=130
    assert "bench --synthetic $sig: exit $want ($st)" "[ $st -eq $want ]"
done
TMPDIR=$TMP/synth run 0 ruvllm bench model --synthetic smollm2-135m --type Q4_0 -p 0 -n 1 -r 1
s=$(ls -A "$TMP/synth" | tr '\n' ' ')
assert "bench --synthetic: nothing left in TMPDIR after INT, KILL and a run ($s)" "[ -z \"$s\" ]"

# ---- a full disk -----------------------------------------------------------
# a private mount namespace with a 24 MiB tmpfs (root only: CI is root)
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
    mkdir -p "$TMP/small"
    unshare -m sh -c "
        mount -t tmpfs -o size=24m tmpfs '$TMP/small' || exit 9
        printf 'previous contents\n' >'$TMP/small/q.gguf'
        '$RUVLLM' quantize -q --allow-requantize '$MODEL' '$TMP/small/q.gguf' Q8_0 2>'$TMP/e'
        echo \$? >'$TMP/st'
        cksum <'$TMP/small/q.gguf' >'$TMP/sum'
        ls -A '$TMP/small' >'$TMP/ls'
        '$RUVLLM' dequant -q --format safetensors '$MODEL' '$TMP/small/st' 2>'$TMP/e2'
        echo \$? >'$TMP/st2'
        ls -A '$TMP/small' >'$TMP/ls2'
    "
    assert "full disk: quantize exits 1" "[ \"$(cat "$TMP/st")\" = 1 ]"
    assert "full disk: the error says so" "grep -q 'No space left on device' '$TMP/e'"
    assert "full disk: the destination is untouched" \
        "[ \"$(cat "$TMP/sum")\" = \"$(printf 'previous contents\n' | cksum)\" ]"
    assert "full disk: no temporary is left ($(cat "$TMP/ls" | tr '\n' ' '))" "[ \"$(cat "$TMP/ls")\" = q.gguf ]"
    assert "full disk: dequant --format safetensors exits 1" "[ \"$(cat "$TMP/st2")\" = 1 ]"
    assert "full disk: dequant leaves no temporary directory" "[ \"$(cat "$TMP/ls2")\" = q.gguf ]"
else
    echo "# SKIP the full-disk cases need root (a tmpfs in a private mount namespace)"
fi
finish
