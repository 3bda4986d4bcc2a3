#!/bin/sh
# The NEON kernels (kernels/arm/) against ref, on aarch64: under
# qemu-aarch64 on other hosts, once on a CPU model with dotprod (max) and
# once on an ARMv8.0 core without it (cortex-a53), so both the sdot and the
# widening-multiply integer dots run through the dispatch as a real CPU
# would pick them. The program (tests/neon/test_kernels_neon.c, TAP) is
# built by `make tests` into $BUILD/aarch64/ (Makefile, NEON section).
. tests/cli/lib.sh
bin=${BUILD:-build}/aarch64/test_kernels_neon

if [ "$(uname -m)" = aarch64 ]; then
    cpus=native
else
    cpus="max cortex-a53"
    assert "qemu-aarch64 is installed (make deps: qemu-user)" "command -v qemu-aarch64 >/dev/null"
fi
assert "$bin is built (make deps: gcc-aarch64-linux-gnu libc6-dev-arm64-cross; make tests)" \
    "[ -x '$bin' ]"
[ -x "$bin" ] || finish

for cpu in $cpus; do
    if [ "$cpu" = native ]; then emu=""; else emu="qemu-aarch64 -cpu $cpu"; fi

    # the kernel tests; their TAP goes to this log as comments
    run 0 $emu "$bin"
    sed 's/^/#   /' "$OUT"
    assert "its TAP ends with a plan" "tail -n 1 '$OUT' | grep -q '^1\.\.[1-9]'"
    out_lacks "not ok"
    case $cpu in
    max)
        out_has "# cpu: neon dotprod"
        out_has "# kernel set: neon (no dotprod)" ;;
    cortex-a53)
        out_has "# cpu: neon"
        out_lacks "# cpu: neon dotprod"
        out_lacks "no dotprod" ;;
    esac

    # RUVLLM_ISA: "selected best"; an unusable request leaves neon
    run 0 env -u RUVLLM_ISA $emu "$bin" --report-isa
    out_has "neon neon"
    run 0 env RUVLLM_ISA=ref $emu "$bin" --report-isa
    out_has "ref neon"
    run 0 env RUVLLM_ISA=avx2 $emu "$bin" --report-isa
    out_has "neon neon"
done

finish
