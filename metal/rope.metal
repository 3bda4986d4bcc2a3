// rope.metal - rotary position embedding of q or k rows.
//
// The angles come from cos/sin tables, not from theta parameters: the host
// uploads the tables lib/engine/rope.c's rvl_rope_tables builds (n_ctx x
// rope_dim/2 each), so every scaling the CPU supports (linear, NTK-aware,
// Llama 3.1 frequency divisors, YaRN's ramp; YaRN's mscale^2 goes into the
// attention scale, not here) gives the GPU exactly the CPU's angles, and the
// GPU never evaluates sin/cos (approximate under Metal's fast math). The
// price is 8 bytes per pair per position of context (4 MB at n_ctx 8192,
// rope_dim 128).
//
//   rvl_rope_f32  one threadgroup per (head, token): pairs (2i, 2i+1)
//                 (RVL_MTL_ROPE_NORM) or (i, i + rope_dim/2)
//                 (RVL_MTL_ROPE_NEOX) of the first rope_dim elements are
//                 rotated by the angles of position pos[token]; elements
//                 rope_dim .. head_dim-1 are copied. y may be x.
//                 Buffers: 0 rvl_mtl_rope_args, 1 x, 2 y, 3 cos_t, 4 sin_t,
//                 5 pos (int32 per token).
#include <metal_stdlib>
using namespace metal;

#include "rvl_msl_common.h"

kernel void rvl_rope_f32(constant rvl_mtl_rope_args &a [[buffer(0)]],
                         device const float *x [[buffer(1)]],
                         device float *y [[buffer(2)]],
                         device const float *cos_t [[buffer(3)]],
                         device const float *sin_t [[buffer(4)]],
                         device const int *pos [[buffer(5)]],
                         uint3 tgpig [[threadgroup_position_in_grid]],
                         ushort tpitg [[thread_index_in_threadgroup]],
                         ushort ntg [[threads_per_threadgroup]])
{
    const int h = int(tgpig.x), t = int(tgpig.y);
    device const float *xs = x + (ulong)t * a.x_stride + (ulong)h * a.head_dim;
    device float *ys = y + (ulong)t * a.y_stride + (ulong)h * a.head_dim;
    const int half_ = a.rope_dim / 2;
    const ulong p = ulong(pos[t]);

    for (int i = tpitg; i < half_; i += ntg) {
        int ia, ib;
        rope_pair(a.mode, a.rope_dim, i, ia, ib);
        const float x0 = xs[ia], x1 = xs[ib];
        if (a.mode == RVL_MTL_ROPE_NONE) {
            ys[ia] = x0;
            ys[ib] = x1;
            continue;
        }
        const float c = cos_t[p * half_ + i], s = sin_t[p * half_ + i];
        ys[ia] = x0 * c - x1 * s;
        ys[ib] = x0 * s + x1 * c;
    }
    for (int d = a.rope_dim + tpitg; d < a.head_dim; d += ntg)
        ys[d] = xs[d];
}
