#!/bin/sh
# tests/mutation.sh - does the suite notice when a feature breaks? Applies
# each mutation of tests/mutations.txt, one at a time, to a copy of the
# tree, rebuilds, runs the tests the mutation names, and reports it caught
# (some test failed) or survived (all passed). `make mutation` runs it; it
# is not part of `make check` (each mutation is a rebuild and a test run).
#
#   sh tests/mutation.sh [-o REPORT.md] [-k] [ID...]
#
# -o writes the report (markdown) there as well as to stdout; -k keeps the
# copy (its path is printed); IDs run only those mutations. Before any
# mutation the unmutated copy must pass every test named in the list: a
# test that fails anyway says nothing about a mutation.
#
# A mutation names its place by file and code, not by line number, so that
# it follows the code when lines move: `old` is a fixed string that must
# occur on exactly one line of the files `file` names (globs; with `all`,
# on every line where it occurs, at least one), and `new` replaces it
# there. Otherwise the run stops with "mutation does not apply", naming
# the mutation: the list must then be brought up to date with the code.
#
# Tests are named as tests/run.sh names them: test_NAME is
# $BUILD/tests/test_NAME (built for the mutation), tNNNN-NAME is
# tests/cli/tNNNN-NAME.sh (against $BUILD/ruvllm). Each test runs under
# `timeout` (RVL_MUTATION_TIMEOUT, default 900 s); a mutation that makes
# a test hang counts as caught by that test ("timeout"). A test that skips
# (exit 77) stops the run: the report would claim too much.
set -u
LIST=tests/mutations.txt
BUILD=${BUILD:-build}
TIMEOUT=${RVL_MUTATION_TIMEOUT:-900}
JOBS=${RVL_MUTATION_JOBS:-2}
report=""
keep=0
while [ $# -gt 0 ]; do
    case $1 in
    -o) report=$2; shift 2 ;;
    -k) keep=1; shift ;;
    -*) echo "usage: sh tests/mutation.sh [-o REPORT.md] [-k] [ID...]" >&2; exit 2 ;;
    *) break ;;
    esac
done
only=" $* "
root=$PWD
[ -f "$LIST" ] || { echo "mutation: run from the repository root ($LIST not found)" >&2; exit 2; }

die() { echo "mutation: $*" >&2; exit 1; }

# ---- the list: blocks of "key value" lines, one block per mutation ----
# Parsed into $W/m/<n>.<key> files (values kept byte for byte after the key
# and its run of blanks).
parse_list() {
    mkdir -p "$W/m"
    awk -v dir="$W/m" '
        function flush() { if (id != "") { n++; printf "%s", id > (dir "/" n ".id"); close(dir "/" n ".id") } }
        /^[ \t]*(#|$)/ { next }
        /^mutation[ \t]/ { flush(); id = $2; next }
        {
            line = $0
            sub(/^[ \t]+/, "", line)
            key = line; sub(/[ \t].*$/, "", key)
            val = line; sub(/^[^ \t]+[ \t]*/, "", val)
            if (id == "") { print "mutation: " FILENAME ": \"" key "\" before any mutation line" > "/dev/stderr"; exit 1 }
            f = dir "/" n + 1 "." key
            if (key == "test" || key == "file") { printf "%s ", val >> f } else { printf "%s", val > f }
            close(f)
        }
        END { flush(); print n > (dir "/count") }
    ' "$LIST" || exit 1
}

get() { # n key
    cat "$W/m/$1.$2" 2>/dev/null
}

# ---- applying one mutation to the copy ----
# Prints the mutated places (file:line) and changes the files; fails with
# "does not apply" when the code is not there exactly as the list says.
apply() { # n
    id=$(get "$1" id)
    old=$(get "$1" old)
    new=$(get "$1" new)
    all=0
    [ -f "$W/m/$1.all" ] && all=1
    [ -n "$old" ] || die "$id: no 'old' line"
    files=""
    for g in $(get "$1" file); do
        for f in $g; do
            [ -f "$f" ] && files="$files $f"
        done
    done
    [ -n "$files" ] || die "mutation does not apply: $id: no file matches '$(get "$1" file)'"
    # shellcheck disable=SC2086
    hits=$(OLD="$old" awk 'index($0, ENVIRON["OLD"]) { print FILENAME ":" FNR }' $files)
    nh=$(printf '%s' "$hits" | grep -c .)
    if [ "$nh" -eq 0 ]; then
        die "mutation does not apply: $id: '$old' is not in$files"
    fi
    if [ "$nh" -gt 1 ] && [ $all = 0 ]; then
        die "mutation does not apply: $id: '$old' is on $nh lines ($(echo $hits)); make it unique or say 'all'"
    fi
    for h in $hits; do
        f=${h%:*}
        cp "$f" "$W/orig/$(echo "$f" | tr / %)"
        OLD="$old" NEW="$new" awk '{
            i = index($0, ENVIRON["OLD"])
            if (i) $0 = substr($0, 1, i - 1) ENVIRON["NEW"] substr($0, i + length(ENVIRON["OLD"]))
            print
        }' "$f" >"$f.mut" && cat "$f.mut" >"$f" && rm -f "$f.mut"
    done
    echo "$hits"
}

# Put the original files back, with a new time stamp so that make rebuilds
# what the mutation changed.
restore() {
    for o in "$W"/orig/*; do
        [ -f "$o" ] || continue
        f=$(basename "$o" | tr % /)
        cat "$o" >"$f"
        rm -f "$o"
    done
}

# ---- building and running the tests of one mutation ----
build_for() { # tests...
    targets="$BUILD/ruvllm"
    for t in "$@"; do
        case $t in test_*) targets="$targets $BUILD/tests/$t" ;; esac
    done
    # shellcheck disable=SC2086
    make -j"$JOBS" --no-print-directory $targets >"$W/build.log" 2>&1
}

# Runs each test; prints "name:status" per test (status: pass, fail,
# timeout, skip).
run_tests() { # tests...
    for t in "$@"; do
        case $t in
        test_*) cmd="$BUILD/tests/$t" ;;
        t[0-9]*) cmd="sh tests/cli/$t.sh" ;;
        *) die "unknown test '$t' (test_NAME or tNNNN-NAME)" ;;
        esac
        # shellcheck disable=SC2086
        RVL_SHARED_DATA=tests/data/shared RUVLLM="$W/tree/$BUILD/ruvllm" BUILD=$BUILD \
            timeout "$TIMEOUT" $cmd >"$W/logs/$cur.$t.log" 2>&1
        st=$?
        if [ $st = 0 ] && ! grep -q '^\[  SKIPPED \]' "$W/logs/$cur.$t.log"; then s=pass
        elif [ $st = 0 ] || [ $st = 77 ]; then s=skip
        elif [ $st = 124 ]; then s=timeout
        else s=fail
        fi
        echo "$t:$s"
    done
}

# ---- the copy ----
W=$(mktemp -d "${TMPDIR:-/tmp}/ruvllm-mutation.XXXXXX")
if [ $keep = 0 ]; then trap 'rm -rf "$W"' EXIT; else echo "mutation: copy in $W" >&2; fi
mkdir -p "$W/tree" "$W/orig" "$W/logs"
parse_list
git ls-files -z --cached --others --exclude-standard | xargs -0 sh -c 'for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' sh |
    tar --null -T - -cf - | tar -xf - -C "$W/tree" || die "cannot copy the tree"
# the objects already built, so that a mutation recompiles one file
[ -d "$BUILD" ] && cp -a "$BUILD" "$W/tree/" 2>/dev/null
cd "$W/tree" || exit 1

count=$(cat "$W/m/count")
# selected ID: true when no IDs were given or ID is one of them
selected() { [ "$only" = "  " ] || case "$only" in *" $1 "*) true ;; *) false ;; esac; }
all_tests=""
i=1
while [ "$i" -le "$count" ]; do
    selected "$(get $i id)" || { i=$((i + 1)); continue; }
    for t in $(get $i test); do
        case " $all_tests " in *" $t "*) ;; *) all_tests="$all_tests $t" ;; esac
    done
    i=$((i + 1))
done

# every mutation applies (and is put back) before anything is built, so a
# stale list fails in seconds, not after an hour
i=1
while [ "$i" -le "$count" ]; do
    apply $i >/dev/null || exit 1
    restore
    i=$((i + 1))
done

echo "mutation: building the unmutated copy and running its tests:$all_tests" >&2
cur=base
# shellcheck disable=SC2086
build_for $all_tests || { tail -n 30 "$W/build.log" >&2; die "the unmutated tree does not build"; }
# shellcheck disable=SC2086
base=$(run_tests $all_tests)
bad=$(echo "$base" | grep -v ':pass$')
if [ -n "$bad" ]; then
    for b in $bad; do
        tail -n 20 "$W/logs/base.${b%:*}.log" >&2
    done
    die "the unmutated tree does not pass:" $bad
fi

out=$W/report.md
rev=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
git -C "$root" diff --quiet HEAD 2>/dev/null || rev="$rev (with uncommitted changes)"
{
    echo "# Mutation testing"
    echo ""
    echo "Written by \`make mutation\` (tests/mutation.sh): each mutation of"
    echo "tests/mutations.txt is applied alone to a copy of the tree, which is rebuilt"
    echo "and made to run the tests the mutation names. A mutation is caught when one"
    echo "of them fails; every one must be. Where: the line the mutation changed."
    echo ""
    echo "Run at $rev on $(date -u +%Y-%m-%d) ($(uname -m), $(nproc) cores)."
    echo ""
    echo "| mutation | what it breaks | where | result | failing tests (of those run) |"
    echo "| --- | --- | --- | --- | --- |"
} >"$out"
caught=0
survived=0
i=1
while [ "$i" -le "$count" ]; do
    id=$(get $i id)
    if ! selected "$id"; then
        i=$((i + 1))
        continue
    fi
    cur=$id
    tests=$(get $i test)
    where=$(apply $i) || exit 1
    t0=$(date +%s)
    # shellcheck disable=SC2086
    if ! build_for $tests; then
        restore
        tail -n 30 "$W/build.log" >&2
        die "$id: the mutated tree does not build (a mutation must compile)"
    fi
    # shellcheck disable=SC2086
    res=$(run_tests $tests)
    restore
    if echo "$res" | grep -q ':skip$'; then
        die "$id: a test skipped: $(echo $res)"
    fi
    failing=$(echo "$res" | grep -v ':pass$' | sed 's/:fail$//; s/:timeout$/ (timeout)/' | tr '\n' ',' | sed 's/,$//; s/,/, /g')
    if [ -n "$failing" ]; then
        result=caught
        caught=$((caught + 1))
    else
        result=SURVIVED
        survived=$((survived + 1))
    fi
    printf '%-34s %-9s %4ss  %s\n' "$id" "$result" $(( $(date +%s) - t0 )) "${failing:-(all of: $(echo $tests) pass)}" >&2
    printf '| `%s` | %s | %s | %s | %s (of %s) |\n' "$id" "$(get $i what)" \
        "$(echo $where | sed 's/ /, /g')" "$result" "${failing:-none}" "$(echo $tests | sed 's/ /, /g')" >>"$out"
    i=$((i + 1))
done
echo "" >>"$out"
echo "$caught caught, $survived survived" >>"$out"

cd "$root" || exit 1
cat "$out"
[ -n "$report" ] && cp "$out" "$report"
[ "$survived" -eq 0 ]
