// norm.metal - row-wise RMSNorm and softmax, one threadgroup of
// RVL_MTL_NORM_THREADS threads per row (rvl_mtl_norm_dispatch).
//
//   rvl_rms_norm_f32  y = (x * s) * w, s = 1 / sqrt(sum(x^2) / n + eps)
//                     (lib/engine/forward.c's rmsnorm; the CPU sums the squares in
//                     double, here in f32 per thread, then simd_sum and a
//                     sum over the simdgroups).
//                     Buffers: 0 rvl_mtl_norm_args, 1 x, 2 w, 3 y.
//   rvl_soft_max_f32  y = e / sum(e), e = exp(scale * x - max(scale * x))
//                     (the CPU's softmax with scale 1; max and sum reduced
//                     the same way). Buffers: 0 rvl_mtl_norm_args, 1 x, 2 y.
// y may be x (each element is read before it is written by the same thread).
#include <metal_stdlib>
using namespace metal;

#include "rvl_metal_args.h"

// The sum (max) of v over the threadgroup, returned to every thread. buf:
// one float per simdgroup; reusable after the call.
static inline float tg_sum(float v, threadgroup float *buf, ushort tiisg, ushort sgitg, ushort nsg)
{
    v = simd_sum(v);
    if (tiisg == 0)
        buf[sgitg] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float t = tiisg < nsg ? buf[tiisg] : 0.0f;
    t = simd_sum(t);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return t;
}

static inline float tg_max(float v, threadgroup float *buf, ushort tiisg, ushort sgitg, ushort nsg)
{
    v = simd_max(v);
    if (tiisg == 0)
        buf[sgitg] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float t = tiisg < nsg ? buf[tiisg] : -INFINITY;
    t = simd_max(t);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return t;
}

kernel void rvl_rms_norm_f32(constant rvl_mtl_norm_args &a [[buffer(0)]],
                             device const float *x [[buffer(1)]],
                             device const float *w [[buffer(2)]],
                             device float *y [[buffer(3)]],
                             uint3 tgpig [[threadgroup_position_in_grid]],
                             ushort tpitg [[thread_index_in_threadgroup]],
                             ushort ntg [[threads_per_threadgroup]],
                             ushort tiisg [[thread_index_in_simdgroup]],
                             ushort sgitg [[simdgroup_index_in_threadgroup]],
                             ushort nsg [[simdgroups_per_threadgroup]])
{
    threadgroup float buf[RVL_MTL_NORM_THREADS / RVL_MTL_SIMD];
    device const float *xr = x + (ulong)tgpig.x * a.x_stride;
    device float *yr = y + (ulong)tgpig.x * a.y_stride;

    float s = 0.0f;
    for (int i = tpitg; i < a.n; i += ntg)
        s += xr[i] * xr[i];
    s = tg_sum(s, buf, tiisg, sgitg, nsg);

    const float scale = 1.0f / sqrt(s / float(a.n) + a.eps);
    for (int i = tpitg; i < a.n; i += ntg)
        yr[i] = (xr[i] * scale) * w[i];
}

kernel void rvl_soft_max_f32(constant rvl_mtl_norm_args &a [[buffer(0)]],
                             device const float *x [[buffer(1)]],
                             device float *y [[buffer(2)]],
                             uint3 tgpig [[threadgroup_position_in_grid]],
                             ushort tpitg [[thread_index_in_threadgroup]],
                             ushort ntg [[threads_per_threadgroup]],
                             ushort tiisg [[thread_index_in_simdgroup]],
                             ushort sgitg [[simdgroup_index_in_threadgroup]],
                             ushort nsg [[simdgroups_per_threadgroup]])
{
    threadgroup float buf[RVL_MTL_NORM_THREADS / RVL_MTL_SIMD];
    device const float *xr = x + (ulong)tgpig.x * a.x_stride;
    device float *yr = y + (ulong)tgpig.x * a.y_stride;

    float mx = -INFINITY;
    for (int i = tpitg; i < a.n; i += ntg)
        mx = max(mx, a.scale * xr[i]);
    mx = tg_max(mx, buf, tiisg, sgitg, nsg);

    float s = 0.0f;
    for (int i = tpitg; i < a.n; i += ntg) {
        const float e = exp(a.scale * xr[i] - mx);
        yr[i] = e;
        s += e;
    }
    s = tg_sum(s, buf, tiisg, sgitg, nsg);

    const float inv = 1.0f / s;
    for (int i = tpitg; i < a.n; i += ntg)
        yr[i] *= inv;
}
