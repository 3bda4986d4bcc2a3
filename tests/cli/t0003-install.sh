#!/bin/sh
# make install: binary, ruvllm-CMD links, man pages, completions, under
# DESTDIR/PREFIX; the installed links dispatch by argv[0].
. tests/cli/lib.sh

BUILD=${BUILD:-build}
run 0 make -s install DESTDIR="$TMP/root" PREFIX=/opt/rv BUILD="$BUILD"
assert "binary installed" "[ -x '$TMP/root/opt/rv/bin/ruvllm' ]"
for c in $(ruvllm __commands); do
    assert "link ruvllm-$c" "[ -L '$TMP/root/opt/rv/bin/ruvllm-$c' ]"
    assert "man page ruvllm-$c.1" "[ -f '$TMP/root/opt/rv/share/man/man1/ruvllm-$c.1' ]"
done
assert "bash completion" "[ -f '$TMP/root/opt/rv/share/bash-completion/completions/ruvllm' ]"
assert "zsh completion" "[ -f '$TMP/root/opt/rv/share/zsh/site-functions/_ruvllm' ]"
assert "fish completion" "[ -f '$TMP/root/opt/rv/share/fish/vendor_completions.d/ruvllm.fish' ]"
run 0 "$TMP/root/opt/rv/bin/ruvllm-info" --help
out_has "usage: ruvllm info"
run 0 make -s uninstall DESTDIR="$TMP/root" PREFIX=/opt/rv BUILD="$BUILD"
assert "uninstall removes the binary" "[ ! -e '$TMP/root/opt/rv/bin/ruvllm' ]"
assert "uninstall removes the links" "[ ! -e '$TMP/root/opt/rv/bin/ruvllm-info' ]"
finish
