// bad/divergent.metal - barriers and SIMD-group functions not reached by
// every thread. The emulator must report each (test_emu.cpp). Not shipped.
#include <metal_stdlib>
using namespace metal;

// Half the threadgroup skips the barrier.
kernel void bad_barrier_in_branch(device float *out [[buffer(0)]],
                                  uint tid [[thread_index_in_threadgroup]])
{
    if (tid < 16)
        threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = 1.0f;
}

// Both branches have a barrier, but not the same one.
kernel void bad_barrier_two_sites(device float *out [[buffer(0)]],
                                  uint tid [[thread_index_in_threadgroup]])
{
    if (tid % 2)
        threadgroup_barrier(mem_flags::mem_threadgroup);
    else
        threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = 1.0f;
}

// simd_sum in a branch taken by half of each SIMD-group.
kernel void bad_simd_sum_in_branch(device float *out [[buffer(0)]],
                                   uint tid [[thread_index_in_threadgroup]],
                                   ushort lane [[thread_index_in_simdgroup]])
{
    float v = 1.0f;
    if (lane < 16)
        v = simd_sum(v);
    out[tid] = v;
}

// The classic: threads past the end return before the reduction.
kernel void bad_simd_sum_after_return(device const float *in [[buffer(0)]],
                                      device float *out [[buffer(1)]],
                                      constant uint &n [[buffer(2)]],
                                      uint gid [[thread_position_in_grid]])
{
    if (gid >= n)
        return;
    out[gid] = simd_sum(in[gid]);
}

// Lanes at different collectives.
kernel void bad_simd_mixed(device float *out [[buffer(0)]],
                           ushort lane [[thread_index_in_simdgroup]],
                           uint tid [[thread_index_in_threadgroup]])
{
    out[tid] = lane % 2 ? simd_sum(1.0f) : simd_max(1.0f);
}
