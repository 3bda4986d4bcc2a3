#!/bin/sh
# tests/run.sh - run every test: cmocka unit programs, fuzz-corpus replays,
# CLI tests. Prints one line per test program and a closing
# "N passed, N failed, N skipped" line; exits 1 if anything failed or
# skipped without being expected to.
# Run from the repository root (make check does).
#
# A test says it skipped (a missing model, tool or file) by exiting 77, as
# automake's harness reads it (tests/cli/lib.sh: skip_all), or, for a
# cmocka program, by calling skip(): cmocka then still exits 0 but prints
# "[  SKIPPED ]". A skipped test is not a passed one: it fails the run
# unless its name is in RVL_EXPECTED_SKIPS (space-separated, e.g.
# RVL_EXPECTED_SKIPS="t0040-neon-qemu test_metal_backend"; CI sets none).
set -u
BUILD=${BUILD:-build}
# the test data (llama.cpp's vocab-only GGUFs with their tokenizer cases,
# WikiText-2 test): a copy of ../shared/data in the repository, so that a
# clone anywhere (CI's fresh machine, /tmp/x) tests the same files
export RVL_SHARED_DATA=${RVL_SHARED_DATA:-tests/data/shared}
export RUVLLM=${RUVLLM:-$PWD/$BUILD/ruvllm}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
log=$BUILD/test-logs
mkdir -p "$log"

passed=0
failed=0
skipped=0
failures=""
unexpected=""

expected_skip() { # name
    for e in ${RVL_EXPECTED_SKIPS:-}; do
        [ "$e" = "$1" ] && return 0
    done
    return 1
}

run() { # name command...
    name=$1
    shift
    start=$(date +%s)
    "$@" >"$log/$name.log" 2>&1 </dev/null   # a test reads no input of the runner's
    st=$?
    if [ $st = 77 ] || { [ $st = 0 ] && grep -q '^\[  SKIPPED \]' "$log/$name.log"; }; then
        skipped=$((skipped + 1))
        if expected_skip "$name"; then
            printf 'skip    %-34s (%ss, expected)\n' "$name" $(( $(date +%s) - start ))
        else
            unexpected="$unexpected $name"
            printf 'SKIPPED %-34s (%ss)\n' "$name" $(( $(date +%s) - start ))
        fi
        # why: a TAP "# SKIP" plan, cmocka's skipped tests and their messages
        grep -e '# SKIP' -e '^\[  SKIPPED \] [a-z]' -e 'skipped' "$log/$name.log" | head -n 5 | sed 's/^/    | /'
    elif [ $st = 0 ]; then
        passed=$((passed + 1))
        printf 'ok      %-34s (%ss)\n' "$name" $(( $(date +%s) - start ))
    else
        failed=$((failed + 1))
        failures="$failures $name"
        printf 'FAILED  %-34s (%ss)\n' "$name" $(( $(date +%s) - start ))
        tail -n 40 "$log/$name.log" | sed 's/^/    | /'
    fi
}

for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    run "$(basename "$t")" "$t"
done

for r in "$BUILD"/tests/replay_*; do
    [ -x "$r" ] || continue
    n=$(basename "$r")
    n=${n#replay_}
    if [ -d "tests/fuzz/corpus/$n" ]; then
        run "fuzz-replay-$n" "$r" "tests/fuzz/corpus/$n"
    else
        failed=$((failed + 1))
        failures="$failures fuzz-replay-$n"
        echo "FAILED  fuzz-replay-$n: no corpus tests/fuzz/corpus/$n"
    fi
done

# the same corpora under ASan+UBSan (make check builds these)
if [ -n "${ASAN_REPLAY_DIR:-}" ]; then
    for r in "$ASAN_REPLAY_DIR"/replay_*; do
        [ -x "$r" ] || continue
        n=$(basename "$r")
        n=${n#replay_}
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 run "asan-fuzz-replay-$n" "$r" "tests/fuzz/corpus/$n"
    done
fi

for t in tests/cli/t*.sh; do
    [ -f "$t" ] || continue
    run "$(basename "$t" .sh)" sh "$t"
done

echo
[ -n "$failures" ] && echo "failed:$failures (logs in $log/)"
[ -n "$unexpected" ] && echo "skipped, not in RVL_EXPECTED_SKIPS:$unexpected (logs in $log/)"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ -z "$unexpected" ]
