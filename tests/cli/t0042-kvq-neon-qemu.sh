#!/bin/sh
# The NEON KV page readers (kernels/arm/kvq_neon.c) against ref, and several
# query heads per call against one at a time, on aarch64: under qemu-aarch64
# on other hosts. The program (tests/neon/test_kvq_neon.c, TAP) is built by
# `make tests` into $BUILD/aarch64/ (Makefile, NEON section).
. tests/cli/lib.sh
bin=${BUILD:-build}/aarch64/test_kvq_neon

if [ "$(uname -m)" = aarch64 ]; then
    emu=""
else
    emu="qemu-aarch64 -cpu max"
    assert "qemu-aarch64 is installed (make deps: qemu-user)" "command -v qemu-aarch64 >/dev/null"
fi
assert "$bin is built (make deps: gcc-aarch64-linux-gnu libc6-dev-arm64-cross; make tests)" \
    "[ -x '$bin' ]"
[ -x "$bin" ] || finish

run 0 $emu "$bin"
sed 's/^/#   /' "$OUT"
assert "its TAP ends with a plan" "tail -n 1 '$OUT' | grep -q '^1\.\.[1-9]'"
out_lacks "not ok"
out_has "# neon vs ref: worst difference / bound"

finish
