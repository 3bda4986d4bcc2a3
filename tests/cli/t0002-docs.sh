#!/bin/sh
# Every command has a man page and completions, and they say what the
# option tables say (git's t0450 idea): man/ and completions/ are the
# generators' output, and every long option of --help is in the man page.
. tests/cli/lib.sh

assert "man/ruvllm.1 exists" "[ -f man/ruvllm.1 ]"
ruvllm __man >"$TMP/ruvllm.1"
assert "man/ruvllm.1 is current (make man)" "cmp -s man/ruvllm.1 '$TMP/ruvllm.1'"

for c in $(ruvllm __commands); do
    page=man/ruvllm-$c.1
    assert "$page exists" "[ -f $page ]"
    ruvllm __man "$c" >"$TMP/page"
    assert "$page is current (make man)" "cmp -s $page '$TMP/page'"
    # options in --help and in the man page's OPTIONS agree
    ruvllm "$c" --help | sed -n '/^options:/,/^$/p' | grep -o -E -e '--[a-z0-9][a-z0-9-]*' | sort -u >"$TMP/help-opts"
    sed -n '/^\.SH OPTIONS/,/^\.SH /p' "$page" | grep -o -E -e '\\-\\-[a-z0-9][a-z0-9\\-]*' |
        sed 's/\\//g' | sort -u >"$TMP/man-opts"
    assert "ruvllm-$c(1) OPTIONS match --help" "cmp -s '$TMP/help-opts' '$TMP/man-opts'"
    assert "bash completion covers $c" "grep -q -e '^    $c)' completions/ruvllm.bash"
    assert "zsh completion covers $c" "grep -q -e \"^_ruvllm_$(echo "$c" | tr - _)()\" completions/_ruvllm"
    assert "fish completion covers $c" "grep -q -e \"-a $c -d\" completions/ruvllm.fish"
    assert "ruvllm(1) lists $c" "grep -q -e 'ruvllm\\\\-$c' man/ruvllm.1"
done

for sh in bash zsh fish; do
    case $sh in bash) f=completions/ruvllm.bash ;; zsh) f=completions/_ruvllm ;; fish) f=completions/ruvllm.fish ;; esac
    ruvllm __completion "$sh" >"$TMP/compl"
    assert "$f is current (make completions)" "cmp -s $f '$TMP/compl'"
done

# the bash completion really completes
if command -v bash >/dev/null; then
    res=$(bash -c '. completions/ruvllm.bash; COMP_WORDS=(ruvllm in); COMP_CWORD=1; _ruvllm; echo "${COMPREPLY[*]}"')
    assert "bash completes 'ruvllm in' to info" "[ '$res' = info ]"
    res=$(bash -c '. completions/ruvllm.bash; COMP_WORDS=(ruvllm info --js); COMP_CWORD=2; _ruvllm; echo "${COMPREPLY[*]}"')
    assert "bash completes 'ruvllm info --js' to --json" "[ '$res' = --json ]"
fi
assert "zsh completion parses" "zsh -n completions/_ruvllm"
assert "fish completion parses" "fish --no-execute completions/ruvllm.fish"
finish
