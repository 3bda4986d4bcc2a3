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
    sed -n '/^\.SH OPTIONS/,/^\.SH /p' "$page" | grep -o -E -e '\\-\\-[a-z0-9]([a-z0-9]|\\-)*' |
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

# an option's argument name stays in the tag (".TP" then the option line), and
# examples keep their quotes (a text line in font escapes, not a .B macro)
assert "ruvllm-run(1) tags -m with its argument" \
    "grep -q -F -x -e '\\fB\\-m\\fR, \\fB\\-\\-model\\fR \\fIFILE\\fR' man/ruvllm-run.1"
assert "ruvllm-run(1)'s example keeps its quotes" \
    "grep -q -F -e '\\fBruvllm run \\-n 32 \"The capital of France is\"\\fR' man/ruvllm-run.1"
if command -v man >/dev/null; then
    MANWIDTH=200 man -l man/ruvllm-run.1 2>/dev/null >"$TMP/run.txt"
    assert "man -l renders '-m, --model FILE' on one line" \
        "grep -q -E -e '^ +-m, --model FILE\$' '$TMP/run.txt'"
    assert "man -l renders the example with its quotes" \
        "grep -q -F -e 'ruvllm run -n 32 \"The capital of France is\"' '$TMP/run.txt'"
fi

# the bash completion really completes: drive _ruvllm as bash would
bash_complete() { # CWORD WORD...: what bash offers for WORD[CWORD]
    cword=$1
    shift
    bash -c '. completions/ruvllm.bash; COMP_WORDS=("$@"); COMP_CWORD='"$cword"'; _ruvllm; echo "${COMPREPLY[*]}"' bash "$@"
}
res=$(bash_complete 1 ruvllm in)
assert "bash completes 'ruvllm in' to info" "[ '$res' = info ]"
res=$(bash_complete 2 ruvllm info --js)
assert "bash completes 'ruvllm info --js' to --json" "[ '$res' = --json ]"
res=$(bash_complete 2 ruvllm bench "")
assert "bash completes 'ruvllm bench ' to its sub-commands ($res)" "[ '$res' = 'kernels model ppl' ]"
res=$(bash_complete 2 ruvllm help "")
assert "bash completes 'ruvllm help ' to the commands" \
    "[ '$res' = '$(ruvllm __commands | tr '\n' ' ')help' ]"
res=$(bash_complete 4 ruvllm quantize in.gguf out.gguf Q4_K)
assert "bash completes 'quantize IN OUT Q4_K' to the Q4_K types ($res)" "[ '$res' = 'Q4_K_M Q4_K_S Q4_K' ]"
res=$(bash_complete 6 ruvllm quantize -t 2 in.gguf out.gguf IQ4)
assert "bash skips an option's value when counting quantize's arguments ($res)" "[ '$res' = 'IQ4_NL IQ4_XS' ]"
res=$(bash_complete 3 ruvllm run --kv-type "")
assert "bash completes --kv-type to the KV cache types ($res)" "[ '$res' = 'f16 f32 q8 q4 tq4 tq3 tiered' ]"
res=$(bash_complete 3 ruvllm run -ctk tq)
assert "bash completes llama.cpp's -ctk to the KV cache types ($res)" "[ '$res' = 'tq4 tq3' ]"
res=$(bash_complete 3 ruvllm chat --chat-template llama)
assert "bash completes --chat-template to the built-in templates ($res)" "[ '$res' = 'llama2 llama3' ]"
# -m: files and the store's names from 'ruvllm list --names', and nothing
# worse than files when that fails (a ruvllm without a store)
root=$PWD
mkdir -p "$TMP/bin" "$TMP/cwd"
printf '#!/bin/sh\n[ "$1 $2" = "list --names" ] && printf "smollm2-135m\\nqwen3-0.6b\\n"\n' >"$TMP/bin/ruvllm"
chmod +x "$TMP/bin/ruvllm"
: >"$TMP/cwd/model.gguf"
res=$(cd "$TMP/cwd" && PATH="$TMP/bin:$PATH" bash -c '. '"$root"'/completions/ruvllm.bash; COMP_WORDS=(ruvllm run -m ""); COMP_CWORD=3; _ruvllm; echo "${COMPREPLY[*]}"')
assert "bash completes -m to files and the store's names ($res)" "[ '$res' = 'model.gguf smollm2-135m qwen3-0.6b' ]"
printf '#!/bin/sh\necho "ruvllm: list is not a command" >&2; exit 2\n' >"$TMP/bin/ruvllm"
res=$(cd "$TMP/cwd" && PATH="$TMP/bin:$PATH" bash -c '. '"$root"'/completions/ruvllm.bash; COMP_WORDS=(ruvllm run -m ""); COMP_CWORD=3; _ruvllm; echo "${COMPREPLY[*]}"' 2>"$TMP/bash-err")
assert "bash completes -m to files when the store is absent ($res)" "[ '$res' = 'model.gguf' ] && [ ! -s '$TMP/bash-err' ]"

assert "zsh completion parses" "zsh -n completions/_ruvllm"
assert "zsh completion offers bench's sub-commands" "grep -q -F -e \"'1:argument:(kernels model ppl)'\" completions/_ruvllm"
assert "fish completion parses" "fish --no-execute completions/ruvllm.fish"
fish_complete() { fish -c 'source completions/ruvllm.fish; complete -C "$argv[1]"' "$1" | cut -f1 | tr '\n' ' '; }
res=$(fish_complete 'ruvllm bench ')
assert "fish completes 'ruvllm bench ' to its sub-commands ($res)" "[ '$res' = 'kernels model ppl ' ]"
res=$(fish_complete 'ruvllm quantize -t 2 in out Q8')
assert "fish completes quantize's TYPE ($res)" "[ '$res' = 'Q8_0 ' ]"
res=$(fish_complete 'ruvllm run -ctk tq')
assert "fish completes -ctk to the KV cache types ($res)" "[ '$res' = 'tq3 tq4 ' ]"
finish
