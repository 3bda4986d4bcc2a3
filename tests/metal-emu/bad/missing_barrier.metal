// bad/missing_barrier.metal - probe_tg_sum (probe.metal) with its barriers
// left out: threads read partial sums other threads have not written yet.
// The emulator must give a wrong result (test_emu.cpp). Not shipped.
#include <metal_stdlib>
using namespace metal;

kernel void bad_tg_sum_no_barrier(device const float *in [[buffer(0)]],
                                  device float *out [[buffer(1)]],
                                  uint tid [[thread_index_in_threadgroup]],
                                  uint gid [[thread_position_in_grid]],
                                  uint grp [[threadgroup_position_in_grid]])
{
    threadgroup float s[64];
    s[tid] = in[gid];
    for (uint h = 32; h > 0; h /= 2) {
        if (tid < h)
            s[tid] += s[tid + h];
    }
    if (tid == 0)
        out[grp] = s[0];
}

// Only SIMD-group-local exchange through threadgroup memory, but across
// SIMD-groups, with simdgroup_barrier where a threadgroup_barrier is needed.
kernel void bad_simdgroup_barrier_instead(device const float *in [[buffer(0)]],
                                          device float *out [[buffer(1)]],
                                          uint tid [[thread_index_in_threadgroup]],
                                          uint gid [[thread_position_in_grid]])
{
    threadgroup float s[64];
    s[tid] = in[gid];
    simdgroup_barrier(mem_flags::mem_threadgroup);
    out[gid] = s[63 - tid];
}
