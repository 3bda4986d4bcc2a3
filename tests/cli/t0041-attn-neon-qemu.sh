#!/bin/sh
# The NEON attention kernels (kernels/arm/attn_neon.c) and ref against a
# double-precision softmax, on aarch64: under qemu-aarch64 on other hosts.
# The program (tests/neon/test_attn_neon.c, TAP) is built by `make tests`
# into $BUILD/aarch64/ (Makefile, NEON section); one CPU model is enough
# (the attention kernels do not use dotprod).
. tests/cli/lib.sh
bin=${BUILD:-build}/aarch64/test_attn_neon

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
out_has "# neon f16: worst error / bound"
out_has "# neon f32: worst error / bound"
out_has " - attention sinks: decode and prefill, windowed too"

finish
