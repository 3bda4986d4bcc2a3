// kv.metal - KV quantize-and-append: new key or value rows (after the
// projections; keys optionally rotated by RoPE here, fused) written into
// their row of the paged cache in its storage format, exactly as
// kernels/kvq.h's rvl_kvq_encode_row encodes one row:
//
//   F16  each element rounded to f16 (nearest even);
//   Q8   per group of 32 channels (one simdgroup lane per channel):
//        d = f16(amax / 127) (saturating), code = round(x / d) in -127..127;
//   TQ4  u = H D x / |x| (the rotation in threadgroup memory), code_i = the
//        nearest of the 16 Lloyd-Max centroids to u_i sqrt(hd), norm
//        g = f16(|x| / |c|) at the page's side data; an all-zero row gets
//        zero codes and g = 0;
//   F32  the row as is (attn.h's f32 cache).
//
// The CPU sums |x|^2 and |c|^2 in double, the GPU in f32, so a TQ4 code can
// differ from rvl_kvq_encode_row's where u_i sqrt(hd) lies within float
// rounding of a cell boundary, and g in its last bit; F16, Q8 and F32 rows
// are the CPU's bytes (given IEEE division and rounding, see metal/README.md).
//
//   rvl_kv_append_f32  one simdgroup per (token, kv head): token t goes to
//       position p0 + t, row (p0 + t) % page_tokens of logical page
//       (p0 + t) / page_tokens. Rows of different tokens never share bytes
//       (kvq.h's side data is per row), so a batch appends in one dispatch.
//       Buffers: 0 rvl_mtl_kv_append_args, 1 x, 2 cache (base of the
//       pages of K or of V), 3 page_table, 4 cos_t, 5 sin_t (any buffer when
//       rope_mode is NONE).
#include <metal_stdlib>
using namespace metal;

#include "rvl_msl_common.h"

kernel void rvl_kv_append_f32(constant rvl_mtl_kv_append_args &a [[buffer(0)]],
                              device const float *x [[buffer(1)]],
                              device uchar *cache [[buffer(2)]],
                              device const int *page_table [[buffer(3)]],
                              device const float *cos_t [[buffer(4)]],
                              device const float *sin_t [[buffer(5)]],
                              uint3 tgpig [[threadgroup_position_in_grid]],
                              ushort tiisg [[thread_index_in_simdgroup]])
{
    threadgroup float u[RVL_MTL_KV_MAX_HD];
    threadgroup uchar codes[RVL_MTL_KV_MAX_HD];

    const int t = int(tgpig.x), kh = int(tgpig.y), hd = a.head_dim;
    const int pos = a.p0 + t;
    device const float *xr = x + (ulong)t * a.x_stride + (ulong)kh * hd;

    for (int d = tiisg; d < hd; d += RVL_MTL_SIMD)
        u[d] = xr[d];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (a.rope_mode != RVL_MTL_ROPE_NONE) {
        rope_rows_tg(u, hd, 1, 1, pos, a.rope_mode, a.rope_dim, cos_t, sin_t, tiisg, RVL_MTL_SIMD);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }

    const int pg = pos / a.page_tokens, j = pos - pg * a.page_tokens;
    device uchar *page = cache + ulong(page_table[pg]) * a.page_stride + ulong(kh) * a.head_stride;
    device uchar *row = page + ulong(j) * ulong(kv_row_bytes(a.fmt, hd));

    switch (a.fmt) {
    case RVL_MTL_KV_F32:
        for (int d = tiisg; d < hd; d += RVL_MTL_SIMD)
            ((device float *)row)[d] = u[d];
        break;
    case RVL_MTL_KV_F16:
        for (int d = tiisg; d < hd; d += RVL_MTL_SIMD)
            ((device half *)row)[d] = half(u[d]);
        break;
    case RVL_MTL_KV_Q8: {
        const int ng = (hd + 31) / 32;
        device half *sd = (device half *)(page + RVL_MTL_KV_PAGE * kv_row_bytes(a.fmt, hd)) + j * ng;
        for (int gi = 0; gi < ng; gi++) {
            const int d = 32 * gi + tiisg;
            const float v = d < hd ? u[d] : 0.0f;
            const float amax = simd_max(fabs(v));
            const float dq = amax / 127.0f;
            const half dh = half(dq < 65504.0f ? dq : 65504.0f);
            const float df = float(dh), id = df > 0.0f ? 1.0f / df : 0.0f;
            if (d < hd)
                ((device char *)row)[d] = char(clamp(round(v * id), -127.0f, 127.0f));
            if (tiisg == 0)
                sd[gi] = dh;
        }
        break;
    }
    case RVL_MTL_KV_TQ4: {
        device half *sd = (device half *)(page + RVL_MTL_KV_PAGE * kv_row_bytes(a.fmt, hd));
        float n2 = 0.0f;
        for (int d = tiisg; d < hd; d += RVL_MTL_SIMD)
            n2 += u[d] * u[d];
        const float norm = sqrt(simd_sum(n2));
        if (!(norm > 0.0f)) {
            for (int b = tiisg; b < hd / 2; b += RVL_MTL_SIMD)
                row[b] = 0;
            if (tiisg == 0)
                sd[j] = half(0.0f);
            break;
        }
        for (int d = tiisg; d < hd; d += RVL_MTL_SIMD)
            u[d] *= kvq_sign(d);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        fwht_rows_tg(u, hd, 1, hd, tiisg, RVL_MTL_SIMD);
        const float sc = sqrt(float(hd)) / norm;
        float c2 = 0.0f;
        for (int d = tiisg; d < hd; d += RVL_MTL_SIMD) {
            const float v = u[d] * sc;
            uchar k = 0;
            for (short i = 0; i < 15; i++)
                k += v > 0.5f * (kvq_cb16[i] + kvq_cb16[i + 1]) ? 1 : 0;
            codes[d] = k;
            c2 += kvq_cb16[k] * kvq_cb16[k];
        }
        c2 = simd_sum(c2);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int b = tiisg; b < hd / 2; b += RVL_MTL_SIMD)
            row[b] = uchar(codes[2 * b] | (codes[2 * b + 1] << 4));
        if (tiisg == 0) {
            const float gn = norm / sqrt(c2);
            sd[j] = half(gn < 65504.0f ? gn : 65504.0f);
        }
        break;
    }
    default: break;
    }
}
