#!/bin/sh
# The Metal emulator (tests/metal-emu/README.md) around its test programs,
# which tests/run.sh runs as $BUILD/tests/test_metal_*: that they were built
# (they are skipped by `make tests` when clang++-16 is missing), that every
# shipped metal/*.metal file is run by one of them, and that the pre-pass
# refuses what it cannot bind, naming the file and line.
. tests/cli/lib.sh
B=${BUILD:-build}
pp=$B/metal-emu/metal-pp

assert "clang++-16 is installed (make deps: clang-16 libclang-rt-16-dev)" "command -v clang++-16 >/dev/null"
for src in tests/metal-emu/test_*.cpp; do
    t=$(basename "$src" .cpp)
    t=${t#test_}
    assert "$src is built as $B/tests/test_metal_$t" "[ -x '$B/tests/test_metal_$t' ]"
done
for m in metal/*.metal; do
    assert "$m is run by a test (// metal-emu-uses:)" \
        "grep -l '^// *metal-emu-uses:.*$m' tests/metal-emu/test_*.cpp >/dev/null"
done

assert "$pp is built" "[ -x '$pp' ]"
if [ -x "$pp" ]; then
    cat >"$TMP/noattr.metal" <<'MSL'
#include <metal_stdlib>
using namespace metal;
kernel void k(device float *x [[buffer(0)]],
              uint n)
{
    x[0] = n;
}
MSL
    run 1 "$pp" "$TMP/noattr.metal" "$TMP/out.cpp"
    err_has "noattr.metal:4: metal-pp: kernel 'k': parameter 'n' has no attribute"

    cat >"$TMP/nohost.metal" <<'MSL'
#include <metal_stdlib>
template <typename T> kernel void k(device T *x [[buffer(0)]]) { x[0] = 0; }
template kernel void k<float>(device float *x);
MSL
    run 1 "$pp" "$TMP/nohost.metal" "$TMP/out.cpp"
    err_has "nohost.metal:3: metal-pp: template instantiation of kernel 'k' without [[host_name"

    cat >"$TMP/fc.metal" <<'MSL'
constant bool use_x [[function_constant(0)]];
kernel void k(device float *x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 1.5h; }
MSL
    run 1 "$pp" "$TMP/fc.metal" "$TMP/out.cpp"
    err_has "fc.metal:1: metal-pp: function constants are not supported"

    cat >"$TMP/good.metal" <<'MSL'
kernel void k(device float *x [[buffer(0)]], uint i [[thread_position_in_grid]])
{
    threadgroup float s[4];
    x[i] = 1.5h + 0.25 + s[0];
}
MSL
    run 0 "$pp" "$TMP/good.metal" "$TMP/out.cpp"
    assert "threadgroup arrays become per-threadgroup storage" \
        "grep -q 'auto &s = ::emu_rt::tg_var< float \[4\], 0>();' '$TMP/out.cpp'"
    assert "half and double literals become half and float" \
        "grep -q 'x\[i\] = ((half)1.5f) + 0.25f + s\[0\];' '$TMP/out.cpp'"
    assert "lines stay where they were" "[ \"\$(sed -n '/x\[i\] = /=' '$TMP/out.cpp')\" -eq 7 ]"
    assert "the kernel is registered with its slots" \
        "grep -q 'registrar emu_reg_0(\"k\", .*&k, emu_slots_0, 2, 0u)' '$TMP/out.cpp'"
fi

finish
