// probe.metal - kernels that exercise the emulator itself (test_emu.cpp):
// the stand-in metal_stdlib's types, every SIMD-group function, thread
// attributes, threadgroup storage, atomics. Valid MSL; not shipped.
#include <metal_stdlib>
using namespace metal;

// MSL's sizes and alignments (a shader sharing structs with the host relies on them)
static_assert(sizeof(float3) == 16 && alignof(float3) == 16, "float3");
static_assert(sizeof(float2) == 8 && alignof(float4) == 16, "float2/4");
static_assert(sizeof(half4) == 8 && sizeof(half3) == 8 && sizeof(half) == 2, "half");
static_assert(sizeof(packed_float3) == 12 && alignof(packed_float3) == 4, "packed_float3");
static_assert(sizeof(uchar4) == 4 && sizeof(packed_half2) == 4, "uchar4");
static_assert(sizeof(int3) == 16 && sizeof(ushort2) == 4, "int3");

// One thread: vector constructors, swizzles, conversions, math; 32 results.
kernel void probe_vectors(device float *out [[buffer(0)]],
                          device const packed_float3 *p3 [[buffer(1)]],
                          uint tid [[thread_position_in_grid]])
{
    if (tid != 0)
        return;
    float4 a = float4(1.0, 2.0, 3.0, 4.0);
    float2 b = a.zw;                       // 3 4
    float4 c = float4(b, a.xy);            // 3 4 1 2
    c.xy = c.yx;                           // 4 3 1 2
    c.w += 10;                             // 4 3 1 12
    float3 d = float3(c.wzy) * 2.0f;       // 24 2 6
    half4 h = half4(c);                    // explicit conversion
    h *= 0.5h;                             // 2 1.5 0.5 6
    int4 i = int4(c) & 6;                  // 4 2 0 4
    uint2 u = uint2(7u, 9u) >> 1;          // 3 4
    bool4 m = a > 2.5f;                    // f f t t
    float4 s = select(float4(0), a, m);    // 0 0 3 4
    float3 q = float3(p3[1]);              // packed -> vector: 4 5 6
    out[0] = c.x; out[1] = c.y; out[2] = c.z; out[3] = c.w;
    out[4] = d.x; out[5] = d.y; out[6] = d.z;
    out[7] = float(h.x); out[8] = float(h.y); out[9] = float(h.z); out[10] = float(h.w);
    out[11] = float(i.x + i.y + i.z + i.w);
    out[12] = float(u.x * 10 + u.y);
    out[13] = s.x + s.y + s.z + s.w;
    out[14] = dot(a, c);                   // 4 + 6 + 3 + 48 = 61
    out[15] = length(float2(3, 4));
    out[16] = clamp(a, 1.5f, 3.5f).w;      // 3.5
    out[17] = max(a.xy, a.wz).y;           // 3
    out[18] = as_type<float>(0x3f800000u); // 1
    out[19] = float(as_type<uint>(1.0f) >> 23); // 127
    out[20] = q.x + q.y * 10 + q.z * 100;  // 654
    out[21] = fma(2.0f, 3.0f, 1.0f);       // 7
    out[22] = all(m.zw) && !any(m.xy) ? 1.0f : 0.0f;
    out[23] = float(popcount(0xF0F0u));    // 8
    out[24] = precise::exp(0.0f) + fast::exp(0.0f); // 2
    out[25] = float4(a.xyzw).w;            // 4
    float4 e = -a.wzyx;                    // -4 -3 -2 -1
    out[26] = e.x + e.w * 10;              // -14
    out[27] = float(numeric_limits<half>::max()); // 65504
    out[28] = rsqrt(4.0f);                 // 0.5
    out[29] = float(metal::min(3, -2));    // -2
    out[30] = isnan(as_type<float>(0xffffffffu)) ? 1.0f : 0.0f;
    out[31] = float(sizeof(packed_float3)) + float2(h.zw).y - float(h.w); // 12
}

// Every SIMD-group function, per thread, against test_emu.cpp's model.
// out holds 24 rows of n floats; threadgroups of any size (partial SIMD-groups).
kernel void probe_simd(device const float *in [[buffer(0)]],
                       device float *out [[buffer(1)]],
                       constant uint &n [[buffer(2)]],
                       uint gid [[thread_position_in_grid]],
                       ushort lane [[thread_index_in_simdgroup]],
                       ushort simd_size [[threads_per_simdgroup]])
{
    const float v = in[gid];
    const int iv = int(v * 4);
    const uint bits = as_type<uint>(v);
    int k = 0;
    out[k++ * n + gid] = simd_sum(v);
    out[k++ * n + gid] = simd_max(v);
    out[k++ * n + gid] = simd_min(v);
    out[k++ * n + gid] = simd_prefix_inclusive_sum(v);
    out[k++ * n + gid] = simd_prefix_exclusive_sum(v);
    out[k++ * n + gid] = simd_shuffle(v, ushort((lane * 7) % 32));
    out[k++ * n + gid] = simd_shuffle_down(v, ushort(3));
    out[k++ * n + gid] = simd_shuffle_up(v, ushort(5));
    out[k++ * n + gid] = simd_shuffle_xor(v, ushort(6));
    out[k++ * n + gid] = simd_broadcast(v, ushort(9));
    out[k++ * n + gid] = simd_broadcast_first(v);
    out[k++ * n + gid] = float(ulong(simd_ballot(v > 0.0f)) & 0xffff);
    out[k++ * n + gid] = float(ulong(simd_ballot(v > 0.0f)) >> 16);
    out[k++ * n + gid] = simd_all(v > -100.0f) ? 1.0f : 0.0f;
    out[k++ * n + gid] = simd_any(v > 0.9f) ? 1.0f : 0.0f;
    out[k++ * n + gid] = float(simd_sum(iv));
    out[k++ * n + gid] = float(simd_max(iv));
    out[k++ * n + gid] = float(simd_and(bits) >> 16);
    out[k++ * n + gid] = float(simd_or(bits) >> 16);
    out[k++ * n + gid] = float(simd_xor(bits) & 0xffff);
    out[k++ * n + gid] = simd_is_first() ? 1.0f : 0.0f;
    const float4 v4 = float4(v, 2 * v, 0, -v);
    out[k++ * n + gid] = simd_sum(v4).y;
    out[k++ * n + gid] = float(simd_shuffle_down(half(v), ushort(1)));
    out[k++ * n + gid] = float(simd_size);
}

// Thread attributes, 12 uints per thread (at its linear grid index).
kernel void probe_attrs(device uint *out [[buffer(0)]],
                        constant uint3 &grid [[buffer(1)]],
                        uint3 tpig [[thread_position_in_grid]],
                        ushort3 tpitg [[thread_position_in_threadgroup]],
                        uint3 tgpig [[threadgroup_position_in_grid]],
                        uint3 tptg [[threads_per_threadgroup]],
                        uint2 tgpg [[threadgroups_per_grid]],
                        uint tiitg [[thread_index_in_threadgroup]],
                        uint sgitg [[simdgroup_index_in_threadgroup]],
                        uint tiisg [[thread_index_in_simdgroup]],
                        uint nsg [[simdgroups_per_threadgroup]])
{
    device uint *o = out + 12 * ((tpig.z * grid.y + tpig.y) * grid.x + tpig.x);
    o[0] = tpig.x; o[1] = tpig.y; o[2] = tpig.z;
    o[3] = tpitg.x + 100 * tpitg.y + 10000 * tpitg.z;
    o[4] = tgpig.x + 100 * tgpig.y + 10000 * tgpig.z;
    o[5] = tptg.x + 100 * tptg.y + 10000 * tptg.z;
    o[6] = tgpg.x + 100 * tgpg.y;
    o[7] = tiitg;
    o[8] = sgitg;
    o[9] = tiisg;
    o[10] = nsg;
    o[11] = 0xC0FFEE;
}

// Threadgroup tree reduction, barriers in place: out[g] = sum of the group's in.
kernel void probe_tg_sum(device const float *in [[buffer(0)]],
                         device float *out [[buffer(1)]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint gid [[thread_position_in_grid]],
                         uint grp [[threadgroup_position_in_grid]])
{
    threadgroup float s[64];
    s[tid] = in[gid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint h = 32; h > 0; h /= 2) {
        if (tid < h)
            s[tid] += s[tid + h];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (tid == 0)
        out[grp] = s[0];
}

// The execution order: each thread takes a ticket from a device atomic when
// it starts, and again after a barrier. Static threadgroup atomics count the
// group's threads.
kernel void probe_order(device atomic_uint *ticket [[buffer(0)]],
                        device uint *first [[buffer(1)]],
                        device uint *second [[buffer(2)]],
                        device uint *count [[buffer(3)]],
                        uint gid [[thread_position_in_grid]],
                        uint tid [[thread_index_in_threadgroup]],
                        uint grp [[threadgroup_position_in_grid]])
{
    threadgroup atomic_uint n;
    if (tid == 0)
        atomic_store_explicit(&n, 0u, memory_order_relaxed);
    first[gid] = atomic_fetch_add_explicit(ticket, 1u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    atomic_fetch_add_explicit(&n, 1u, memory_order_relaxed);
    second[gid] = atomic_fetch_add_explicit(ticket, 1u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0)
        count[grp] = atomic_load_explicit(&n, memory_order_relaxed);
}

// Copies threadgroup memory that nobody wrote: the poison.
kernel void probe_poison(device uint *out [[buffer(0)]],
                         threadgroup uint *dyn [[threadgroup(0)]],
                         uint tid [[thread_index_in_threadgroup]])
{
    threadgroup uint st[16];
    out[tid] = st[tid];
    out[16 + tid] = dyn[tid];
}

// A kernel that allows at most 64 threads per threadgroup.
[[kernel, max_total_threads_per_threadgroup(64)]]
void probe_max64(device float *out [[buffer(0)]], uint gid [[thread_position_in_grid]])
{
    out[gid] = 1.0f;
}

// 24 KiB of static threadgroup memory, plus what the host adds.
kernel void probe_big_tg(device float *out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]])
{
    threadgroup float big[6144];
    big[tid] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = big[tid];
}
