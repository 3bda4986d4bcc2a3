// attn.metal - attention over the paged KV cache, kernels/attn.h's
// semantics: s_t = scale * (q . k_t), optional softcap, causal mask with an
// optional sliding window, out = sum_t softmax(s)_t v_t (0 when no key is
// visible), GQA (query head h reads kv head h / (n_head / n_head_kv)).
// Flash-style: an online softmax over blocks of keys, no score matrix.
//
// KV formats (rvl_mtl_attn_args.k_fmt / v_fmt; keys and values may differ):
// F16 and F32 rows as attn.h lays them out (any page_tokens), and the
// quantized pages of kernels/kvq.h (page_tokens 32): Q8 (per-token groups
// of 32 channels, f16 scales) and TQ4 (TurboQuant: Walsh-Hadamard rotation,
// 16-level codebook, f16 norms). TQ4 keys are scored against the rotated
// query q' = H D q; TQ4 values are accumulated in the rotated domain and the
// output rotated back once (D H acc), as kvq.h describes.
//
//   rvl_attn_decode_f32   one query token, split-K: threadgroup (c, kh)
//       takes chunk c of the pages (rvl_mtl_chunk_range = attn.h's
//       rvl_attn_chunk_range) for the g query heads of kv head kh, one
//       simdgroup per query head: lane j scores key j of each block of 32
//       (blocks aligned inside pages as in kernels/ref), simd_max / simd_sum
//       update the running max and sum, and each lane accumulates the
//       values of its head_dim / 32 channels, the weights broadcast by
//       simd_shuffle. Writes attn.h's partials {m, l, acc}.
//   rvl_attn_reduce_f32   merges the chunks' partials per query head
//       (attn.h's rvl_attn_decode_reduce), then unrotates TQ4 values.
//   rvl_attn_prefill_f32  prompt processing with RoPE fused: a tile of
//       8 (token, head) rows of one kv head (min(g, 8) heads x 8 / that many
//       tokens) loads its queries into threadgroup memory and rotates them by
//       RoPE at their positions (and by H D for TQ4 keys); then per block of
//       16 keys the block's keys are dequantized into threadgroup memory,
//       the 8 x 16 scores take one thread each, the online softmax reduces
//       each row over 16 lanes with simd_shuffle_xor, the block's values
//       replace the keys in threadgroup memory and each thread accumulates
//       head_dim / 16 channels of one row.
//
// Limits: head_dim <= RVL_MTL_ATTN_MAX_HD (256); TQ4 needs a power-of-two
// head_dim; page and head strides multiples of 4 bytes. Buffers and
// dispatch sizes: rvl_metal_args.h.
#include <metal_stdlib>
using namespace metal;

#include "rvl_msl_common.h"

// The keys [lo, hi] a query at position pos sees among [0, n_kv) (attn.h's
// rvl_attn_key_range).
static inline void key_range(constant rvl_mtl_attn_args &a, int pos, int n_kv, thread int &lo,
                             thread int &hi)
{
    hi = min(pos, n_kv - 1);
    lo = (a.window > 0 && pos - a.window + 1 > 0) ? pos - a.window + 1 : 0;
}

// The last key of the 32-key block that starts at key t: blocks never
// straddle a page and start at multiples of 32 inside it (as kernels/ref).
static inline int block_end(int pt, int t)
{
    const int pg = t / pt, o = t - pg * pt;
    const int e = min(pg * pt + (o / RVL_MTL_DEC_BLOCK + 1) * RVL_MTL_DEC_BLOCK, (pg + 1) * pt);
    return e - 1;
}

static inline float softcap(float s, float cap)
{
    return cap > 0.0f ? cap * tanh(s / cap) : s;
}

// ---------------------------------------------------------------------
// Decode
// ---------------------------------------------------------------------
#define DEC_THREADS (RVL_MTL_DEC_NSG * RVL_MTL_SIMD)
#define DEC_ND (RVL_MTL_ATTN_MAX_HD / RVL_MTL_SIMD)   // channels per lane, at most

kernel void rvl_attn_decode_f32(constant rvl_mtl_attn_args &a [[buffer(0)]],
                                device const float *q [[buffer(1)]],
                                device const uchar *kc [[buffer(2)]],
                                device const uchar *vc [[buffer(3)]],
                                device const int *page_table [[buffer(4)]],
                                device float *partials [[buffer(5)]],
                                uint3 tgpig [[threadgroup_position_in_grid]],
                                ushort tiitg [[thread_index_in_threadgroup]],
                                ushort tiisg [[thread_index_in_simdgroup]],
                                ushort sgitg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float qs[RVL_MTL_DEC_NSG * RVL_MTL_ATTN_MAX_HD];   // one query row per simdgroup

    const int c = int(tgpig.x), kh = int(tgpig.y);
    const int hd = a.head_dim, g = a.n_head / a.n_head_kv;
    const bool tqk = kv_is_tq(a.k_fmt);
    int lo, hi, c0, c1;
    key_range(a, a.q_pos, a.n_kv, lo, hi);
    rvl_mtl_chunk_range(a.page_tokens, lo, hi, c, a.n_chunks, &c0, &c1);

    for (int rb = 0; rb < g; rb += RVL_MTL_DEC_NSG) {
        const int nrows = min(RVL_MTL_DEC_NSG, g - rb);
        const bool act = sgitg < nrows;            // uniform over the simdgroup
        const int h = kh * g + rb + sgitg;
        threadgroup float *qh = qs + sgitg * hd;

        if (act)
            for (int d = tiisg; d < hd; d += RVL_MTL_SIMD) {
                float v = q[(ulong)h * hd + d];
                if (a.q_f16)
                    v = float(half(v));
                qh[d] = tqk ? v * kvq_sign(d) : v;
            }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (tqk)
            fwht_rows_tg(qs, hd, nrows, hd, tiitg, DEC_THREADS);

        if (act) {
            float m = -INFINITY, l = 0.0f, acc[DEC_ND];
            for (short i = 0; i < DEC_ND; i++)
                acc[i] = 0.0f;
            for (int b0 = c0; b0 <= c1;) {
                const int be = min(block_end(a.page_tokens, b0), c1);
                const int t = b0 + tiisg;
                const bool valid = t <= be;
                float s = -INFINITY;
                if (valid) {
                    const kv_row kr = kv_locate(kc, page_table, a.k_page_stride, a.k_head_stride,
                                                a.page_tokens, a.k_fmt, hd, kh, t);
                    s = softcap(kv_dot(a.k_fmt, hd, kr, qh) * a.scale, a.softcap);
                }
                const float mn = max(m, simd_max(s));
                const float alpha = exp(m - mn);   // 0 on the first block
                const float p = valid ? exp(s - mn) : 0.0f;
                l = l * alpha + simd_sum(p);
                for (short i = 0; i < DEC_ND; i++)
                    acc[i] *= alpha;
                for (int j = 0; j <= be - b0; j++) {
                    const float pj = simd_shuffle(p, ushort(j));
                    const kv_row vr = kv_locate(vc, page_table, a.v_page_stride, a.v_head_stride,
                                                a.page_tokens, a.v_fmt, hd, kh, b0 + j);
                    for (short i = 0; i < DEC_ND; i++) {
                        const int d = tiisg + RVL_MTL_SIMD * i;
                        if (d < hd)
                            acc[i] += pj * kv_elem(a.v_fmt, hd, vr, d);
                    }
                }
                m = mn;
                b0 = be + 1;
            }
            device float *o = partials + ((ulong)c * a.n_head + h) * (ulong)(hd + 2);
            if (tiisg == 0) {
                o[0] = m;
                o[1] = l;
            }
            for (short i = 0; i < DEC_ND; i++) {
                const int d = tiisg + RVL_MTL_SIMD * i;
                if (d < hd)
                    o[2 + d] = acc[i];
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);   // qs is reused
    }
}

// ---------------------------------------------------------------------
// Reduce
// ---------------------------------------------------------------------
kernel void rvl_attn_reduce_f32(constant rvl_mtl_attn_args &a [[buffer(0)]],
                                device const float *partials [[buffer(1)]],
                                device float *out [[buffer(2)]],
                                uint3 tgpig [[threadgroup_position_in_grid]],
                                ushort tiisg [[thread_index_in_simdgroup]])
{
    threadgroup float o[RVL_MTL_ATTN_MAX_HD];
    const int h = int(tgpig.x), hd = a.head_dim;
    const ulong ps = ulong(hd + 2);

    float mx = -INFINITY;
    for (int c = tiisg; c < a.n_chunks; c += RVL_MTL_SIMD)
        mx = max(mx, partials[((ulong)c * a.n_head + h) * ps]);
    mx = simd_max(mx);

    float l = 0.0f, acc[DEC_ND];
    for (short i = 0; i < DEC_ND; i++)
        acc[i] = 0.0f;
    if (mx != -INFINITY)
        for (int c = 0; c < a.n_chunks; c++) {
            device const float *pc = partials + ((ulong)c * a.n_head + h) * ps;
            if (pc[0] == -INFINITY)
                continue;
            const float w = exp(pc[0] - mx);
            l += pc[1] * w;
            for (short i = 0; i < DEC_ND; i++) {
                const int d = tiisg + RVL_MTL_SIMD * i;
                if (d < hd)
                    acc[i] += pc[2 + d] * w;
            }
        }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    device float *oh = out + (ulong)h * hd;

    if (!kv_is_tq(a.v_fmt)) {
        for (short i = 0; i < DEC_ND; i++) {
            const int d = tiisg + RVL_MTL_SIMD * i;
            if (d < hd)
                oh[d] = acc[i] * inv;
        }
        return;
    }
    // TQ4 values: out = D H (acc / l)
    for (short i = 0; i < DEC_ND; i++) {
        const int d = tiisg + RVL_MTL_SIMD * i;
        if (d < hd)
            o[d] = acc[i] * inv;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    fwht_rows_tg(o, hd, 1, hd, tiisg, RVL_MTL_SIMD);
    for (int d = tiisg; d < hd; d += RVL_MTL_SIMD)
        oh[d] = o[d] * kvq_sign(d);
}

// ---------------------------------------------------------------------
// Prefill (fused RoPE)
// ---------------------------------------------------------------------
#define PF_ROWS RVL_MTL_PF_ROWS
#define PF_KEYS RVL_MTL_PF_KEYS
#define PF_THREADS RVL_MTL_PF_THREADS
#define PF_ND (RVL_MTL_ATTN_MAX_HD / PF_KEYS)   // channels per thread, at most

kernel void rvl_attn_prefill_f32(constant rvl_mtl_attn_args &a [[buffer(0)]],
                                 device const float *q [[buffer(1)]],
                                 device const uchar *kc [[buffer(2)]],
                                 device const uchar *vc [[buffer(3)]],
                                 device const int *page_table [[buffer(4)]],
                                 device float *out [[buffer(5)]],
                                 device const float *cos_t [[buffer(6)]],
                                 device const float *sin_t [[buffer(7)]],
                                 uint3 tgpig [[threadgroup_position_in_grid]],
                                 ushort tiitg [[thread_index_in_threadgroup]])
{
    threadgroup float qs[PF_ROWS * RVL_MTL_ATTN_MAX_HD];   // [row][hd] queries
    threadgroup float kv[PF_KEYS * RVL_MTL_ATTN_MAX_HD];   // [key][hd] keys, then values
    threadgroup float ps[PF_ROWS * PF_KEYS];               // the block's weights
    threadgroup float ms[PF_ROWS];                         // running max per row
    threadgroup float ls[PF_ROWS];                         // running sum per row
    threadgroup float al[PF_ROWS];                         // the block's rescale per row

    const int hd = a.head_dim, g = a.n_head / a.n_head_kv;
    const int gh = min(g, PF_ROWS), tt = PF_ROWS / gh, nsub = (g + gh - 1) / gh;
    const int kh = int(tgpig.y) / nsub, hsub = (int(tgpig.y) % nsub) * gh;
    const int i0 = int(tgpig.x) * tt;                      // first token of the tile
    const int ntok = min(tt, a.n_q - i0);
    const bool tqk = kv_is_tq(a.k_fmt), tqv = kv_is_tq(a.v_fmt);

    // row r of the tile: token i0 + r / gh, query head kh * g + hsub + r % gh
    const int sr = tiitg / PF_KEYS, sj = tiitg % PF_KEYS;  // this thread's row and key
    const bool row_ok = sr < tt * gh && sr / gh < ntok && hsub + sr % gh < g;
    const int pos = a.p0 + i0 + sr / gh;
    const int head = kh * g + hsub + sr % gh;
    int lo = 0, hi = -1;
    if (row_ok)
        key_range(a, pos, pos + 1, lo, hi);

    // queries: load, RoPE, f16 rounding, rotation for TQ4 keys
    for (int idx = tiitg; idx < PF_ROWS * hd; idx += PF_THREADS) {
        const int r = idx / hd, d = idx % hd;
        const bool ok = r < tt * gh && r / gh < ntok && hsub + r % gh < g;
        qs[idx] = ok ? q[(ulong)(i0 + r / gh) * a.q_stride + (ulong)(kh * g + hsub + r % gh) * hd + d]
                     : 0.0f;
    }
    if (tiitg < PF_ROWS) {
        ms[tiitg] = -INFINITY;
        ls[tiitg] = 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (a.rope_mode != RVL_MTL_ROPE_NONE) {
        rope_rows_tg(qs, hd, ntok * gh, gh, a.p0 + i0, a.rope_mode, a.rope_dim, cos_t, sin_t,
                     tiitg, PF_THREADS);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (a.q_f16 || tqk) {
        for (int idx = tiitg; idx < PF_ROWS * hd; idx += PF_THREADS) {
            float v = qs[idx];
            if (a.q_f16)
                v = float(half(v));
            qs[idx] = tqk ? v * kvq_sign(idx % hd) : v;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (tqk)
            fwht_rows_tg(qs, hd, PF_ROWS, hd, tiitg, PF_THREADS);
    }

    // the tile's keys: from the first token's window start to the last token
    int kmin, kmax;
    key_range(a, a.p0 + i0, a.p0 + i0 + 1, kmin, kmax);
    kmax = a.p0 + i0 + ntok - 1;

    float acc[PF_ND];
    for (short i = 0; i < PF_ND; i++)
        acc[i] = 0.0f;

    for (int b0 = kmin; b0 <= kmax; b0 += PF_KEYS) {
        const int nk = min(PF_KEYS, kmax - b0 + 1);
        for (int idx = tiitg; idx < nk * hd; idx += PF_THREADS) {
            const int j = idx / hd, d = idx % hd;
            const kv_row kr = kv_locate(kc, page_table, a.k_page_stride, a.k_head_stride,
                                        a.page_tokens, a.k_fmt, hd, kh, b0 + j);
            kv[idx] = kv_elem(a.k_fmt, hd, kr, d);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        // scores: thread (sr, sj); the row's 16 threads are 16 lanes of one simdgroup
        const int t = b0 + sj;
        const bool valid = row_ok && sj < nk && t >= lo && t <= hi;
        float s = -INFINITY;
        if (valid) {
            float dot = 0.0f;
            for (int d = 0; d < hd; d++)
                dot += qs[sr * hd + d] * kv[sj * hd + d];
            s = softcap(dot * a.scale, a.softcap);
        }
        float bm = s;
        for (ushort o = PF_KEYS / 2; o > 0; o /= 2)
            bm = max(bm, simd_shuffle_xor(bm, o));
        const float m_old = ms[sr];
        const float mn = max(m_old, bm);
        float p = 0.0f, alpha = 1.0f;
        if (mn != -INFINITY) {
            p = valid ? exp(s - mn) : 0.0f;
            alpha = exp(m_old - mn);
        }
        float psum = p;
        for (ushort o = PF_KEYS / 2; o > 0; o /= 2)
            psum += simd_shuffle_xor(psum, o);
        ps[sr * PF_KEYS + sj] = p;
        threadgroup_barrier(mem_flags::mem_threadgroup);   // keys and ms read by all

        if (sj == 0) {
            ms[sr] = mn;
            ls[sr] = ls[sr] * alpha + psum;
            al[sr] = alpha;
        }
        for (int idx = tiitg; idx < nk * hd; idx += PF_THREADS) {
            const int j = idx / hd, d = idx % hd;
            const kv_row vr = kv_locate(vc, page_table, a.v_page_stride, a.v_head_stride,
                                        a.page_tokens, a.v_fmt, hd, kh, b0 + j);
            kv[idx] = kv_elem(a.v_fmt, hd, vr, d);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        // accumulate: thread (sr, channels sj + 16 i)
        const float ar = al[sr];
        for (short i = 0; i < PF_ND; i++) {
            const int d = sj + PF_KEYS * i;
            if (d < hd) {
                float v = acc[i] * ar;
                for (int j = 0; j < nk; j++)
                    v += ps[sr * PF_KEYS + j] * kv[j * hd + d];
                acc[i] = v;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);   // kv, ps, al are rewritten
    }

    const float inv = ls[sr] > 0.0f ? 1.0f / ls[sr] : 0.0f;
    device float *o = row_ok ? out + (ulong)(i0 + sr / gh) * a.out_stride + (ulong)head * hd : out;
    if (!tqv) {
        if (row_ok)
            for (short i = 0; i < PF_ND; i++) {
                const int d = sj + PF_KEYS * i;
                if (d < hd)
                    o[d] = acc[i] * inv;
            }
        return;
    }
    // TQ4 values: out = D H (acc / l), rotated in qs (no longer needed)
    for (short i = 0; i < PF_ND; i++) {
        const int d = sj + PF_KEYS * i;
        if (d < hd)
            qs[sr * hd + d] = acc[i] * inv;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    fwht_rows_tg(qs, hd, PF_ROWS, hd, tiitg, PF_THREADS);
    if (row_ok)
        for (int d = sj; d < hd; d += PF_KEYS)
            o[d] = qs[sr * hd + d] * kvq_sign(d);
}
