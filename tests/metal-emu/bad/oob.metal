// bad/oob.metal - out-of-bounds accesses. The emulator must catch each
// (test_emu.cpp). Not shipped.
#include <metal_stdlib>
using namespace metal;

// Reads one element past the end of x (thread n-1 reads x[n]).
kernel void bad_read_past_end(device const float *x [[buffer(0)]],
                              device float *y [[buffer(1)]],
                              uint gid [[thread_position_in_grid]])
{
    y[gid] = x[gid] + x[gid + 1];
}

// Writes one float4 too many.
kernel void bad_write_past_end(device float4 *y [[buffer(0)]],
                               uint gid [[thread_position_in_grid]])
{
    y[gid + 1] = float4(1.0f);
}

// Reads before the start (thread 0 reads x[-1]).
kernel void bad_read_before_start(device const float *x [[buffer(0)]],
                                  device float *y [[buffer(1)]],
                                  uint gid [[thread_position_in_grid]])
{
    y[gid] = x[int(gid) - 1];
}

// Writes past a threadgroup array.
kernel void bad_threadgroup_overflow(device float *y [[buffer(0)]],
                                     uint tid [[thread_index_in_threadgroup]])
{
    threadgroup float s[32];
    s[tid + 1] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[tid] = s[tid];
}
