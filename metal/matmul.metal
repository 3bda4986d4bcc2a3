// matmul.metal - quantized matrix-vector (GEMV, decode) and matrix-matrix
// (GEMM, prompt processing) products: y[t][r] = sum_i W[r][i] * x[t][i]
// with W in a block format and x, y in f32.
//
// Formats: Q4_0, Q8_0, Q4_K, Q6_K (bit-compatible with llama.cpp's blocks,
// kernels/formats.h) and the ruvllm project formats RVL_I4S_G32/64/128,
// RVL_I4A_G32/64/128 and MLX_A4_G64 (docs/formats.md).
//
// How: as llama.cpp's Metal backend does, the activations stay in f32 and
// the weights are dequantized in registers, 16 at a time, right before the
// multiply-add (the CPU kernels instead quantize the activations to Q8_0 /
// Q8_K and take integer dot products). Every format provides one function,
// deq_<fmt>(block, il, out), that writes the 16 weights of part il of a
// block: elements 16 il .. 16 il + 15 of the block, in order, each with
// exactly the float operations of kernels/ref's dequantize_<fmt>_ref. So
// the kernels compute sum_i dequantize(W)[r][i] * x[t][i] in f32; they
// differ from that exact sum (and from the CPU's vec_dot, which also
// carries the Q8 rounding of x) only by f32 accumulation order.
//
//   rvl_mul_mv_<fmt>_f32  GEMV: each simdgroup computes RVL_MTL_MV_NR rows
//       of one token; the 32 lanes take the (block, part) units of the row
//       round-robin, reuse each 16 activations for the NR rows, and meet in
//       one simd_sum per row.
//   rvl_mul_mm_<fmt>_f32  GEMM: a threadgroup computes a tile of 32 rows x
//       32 tokens; per 32-element step of the inner dimension it dequantizes
//       the weight tile and loads the activation tile into threadgroup
//       memory, then each thread accumulates 8 outputs.
//
// Buffers: 0 rvl_mtl_matmul_args, 1 W, 2 x, 3 y. Dispatch sizes:
// rvl_mtl_mv_dispatch / rvl_mtl_mm_dispatch (rvl_metal_args.h). Weight rows
// must start at an address aligned for the block (2 bytes, 4 for MLX).
#include <metal_stdlib>
using namespace metal;

#include "rvl_metal_args.h"

// ---------------------------------------------------------------------
// Block layouts (kernels/formats.h; natural alignment is 2, or 4 for MLX,
// and every block size is a multiple of it, so rows of blocks need no
// packing on the GPU)
// ---------------------------------------------------------------------
typedef struct { half d; uchar qs[16]; } blk_q4_0;
typedef struct { half d; char qs[32]; } blk_q8_0;
typedef struct { half d, dmin; uchar scales[12]; uchar qs[128]; } blk_q4_K;
typedef struct { uchar ql[128]; uchar qh[64]; char scales[16]; half d; } blk_q6_K;
typedef struct { half d; uchar qs[16]; } blk_i4s_g32;
typedef struct { half d; uchar qs[32]; } blk_i4s_g64;
typedef struct { half d; uchar qs[64]; } blk_i4s_g128;
typedef struct { half d, z; uchar qs[16]; } blk_i4a_g32;
typedef struct { half d, z; uchar qs[32]; } blk_i4a_g64;
typedef struct { half d, z; uchar qs[64]; } blk_i4a_g128;
typedef struct { float scale, bias; uchar qs[32]; } blk_mlx_a4_g64;

static_assert(sizeof(blk_q4_0) == 18, "block_q4_0");
static_assert(sizeof(blk_q8_0) == 34, "block_q8_0");
static_assert(sizeof(blk_q4_K) == 144, "block_q4_K");
static_assert(sizeof(blk_q6_K) == 210, "block_q6_K");
static_assert(sizeof(blk_i4s_g128) == 66, "block_rvl_i4s_g128");
static_assert(sizeof(blk_i4a_g128) == 68, "block_rvl_i4a_g128");
static_assert(sizeof(blk_mlx_a4_g64) == 40, "block_mlx_a4_g64");

// ---------------------------------------------------------------------
// Dequantizers: part il (16 elements) of one block
// ---------------------------------------------------------------------

// Q4_0: byte j holds element j (low nibble) and j + 16 (high); d * (q - 8).
static inline void deq_q4_0(device const blk_q4_0 *b, short il, thread float *y)
{
    const float d = float(b->d);
    const short sh = il ? 4 : 0;
    for (short k = 0; k < 16; k++)
        y[k] = d * float(short((b->qs[k] >> sh) & 0xF) - 8);
}

static inline void deq_q8_0(device const blk_q8_0 *b, short il, thread float *y)
{
    const float d = float(b->d);
    for (short k = 0; k < 16; k++)
        y[k] = float(b->qs[16 * il + k]) * d;
}

// Q4_K: 4 chunks of 64; chunk c's bytes qs[32c ..] hold elements 64c + l
// (low nibble, scale/min 2c) and 64c + 32 + l (high nibble, 2c + 1).
static inline void k4_scale_min(short j, device const uchar *q, thread uchar &sc, thread uchar &m)
{
    if (j < 4) {
        sc = uchar(q[j] & 63);
        m = uchar(q[j + 4] & 63);
    } else {
        sc = uchar((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        m = uchar((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static inline void deq_q4_K(device const blk_q4_K *b, short il, thread float *y)
{
    const short c = il / 4, sub = il % 4;
    uchar sc, m;
    k4_scale_min(2 * c + (sub >= 2), b->scales, sc, m);
    const float d1 = float(b->d) * float(sc), m1 = float(b->dmin) * float(m);
    device const uchar *q = b->qs + 32 * c + 16 * (sub & 1);
    const short sh = sub >= 2 ? 4 : 0;
    for (short k = 0; k < 16; k++)
        y[k] = d1 * float((q[k] >> sh) & 0xF) - m1;
}

// Q6_K: two halves of 128; in half h, element 32 qq + l (qq < 4, l < 32)
// has its low 4 bits in ql[64h + l + 32 (qq & 1)] (high nibble for qq >= 2)
// and bits 4-5 at bit 2 qq of qh[32h + l]; 16-element group il has scale
// scales[il].
static inline void deq_q6_K(device const blk_q6_K *b, short il, thread float *y)
{
    const short h = il / 8, qq = (il % 8) / 2, l0 = 16 * (il % 2);
    const float d = float(b->d);
    const float dsc = d * float(b->scales[il]);
    device const uchar *ql = b->ql + 64 * h + 32 * (qq & 1) + l0;
    device const uchar *qh = b->qh + 32 * h + l0;
    const short shl = qq >= 2 ? 4 : 0, shh = 2 * qq;
    for (short k = 0; k < 16; k++) {
        const short q = short(((ql[k] >> shl) & 0xF) | (((qh[k] >> shh) & 3) << 4)) - 32;
        y[k] = dsc * float(q);
    }
}

// RVL_I4S_G*: groups of G split in halves: byte j holds element j (low
// nibble) and j + G/2 (high); d * (q - 8).
template <typename B, short G>
static inline void deq_i4s(device const B *b, short il, thread float *y)
{
    const short hi = il >= G / 32;
    device const uchar *q = b->qs + 16 * (il - hi * (G / 32));
    const float d = float(b->d);
    const short sh = hi ? 4 : 0;
    for (short k = 0; k < 16; k++)
        y[k] = d * float(short((q[k] >> sh) & 0xF) - 8);
}

// RVL_I4A_G*: as I4S with d * (q - z), z an f16 zero point.
template <typename B, short G>
static inline void deq_i4a(device const B *b, short il, thread float *y)
{
    const short hi = il >= G / 32;
    device const uchar *q = b->qs + 16 * (il - hi * (G / 32));
    const float d = float(b->d), z = float(b->z);
    const short sh = hi ? 4 : 0;
    for (short k = 0; k < 16; k++)
        y[k] = d * (float((q[k] >> sh) & 0xF) - z);
}

// MLX_A4_G64: byte j holds element 2j (low nibble) and 2j + 1 (high);
// scale * q + bias.
static inline void deq_mlx_a4_g64(device const blk_mlx_a4_g64 *b, short il, thread float *y)
{
    device const uchar *q = b->qs + 8 * il;
    for (short k = 0; k < 8; k++) {
        y[2 * k] = b->scale * float(q[k] & 0xF) + b->bias;
        y[2 * k + 1] = b->scale * float(q[k] >> 4) + b->bias;
    }
}

// ---------------------------------------------------------------------
// GEMV
// ---------------------------------------------------------------------
template <typename B, short QK, void (*deq)(device const B *, short, thread float *)>
kernel void rvl_mul_mv(constant rvl_mtl_matmul_args &a [[buffer(0)]],
                       device const char *w [[buffer(1)]],
                       device const float *x [[buffer(2)]],
                       device float *y [[buffer(3)]],
                       uint3 tgpig [[threadgroup_position_in_grid]],
                       ushort tiisg [[thread_index_in_simdgroup]],
                       ushort sgitg [[simdgroup_index_in_threadgroup]])
{
    constexpr short NL = QK / 16;   // parts per block
    const int nu = a.k / 16;        // parts per row
    const int r0 = (int(tgpig.x) * RVL_MTL_MV_NSG + sgitg) * RVL_MTL_MV_NR;
    const int t = int(tgpig.y);
    const int nr = min(RVL_MTL_MV_NR, a.n_rows - r0);   // rows of this simdgroup (may be <= 0)
    device const float *xt = x + (ulong)t * a.x_stride;

    float sum[RVL_MTL_MV_NR];
    for (short r = 0; r < RVL_MTL_MV_NR; r++)
        sum[r] = 0.0f;

    for (int u = tiisg; u < nu; u += RVL_MTL_SIMD) {
        const int ib = u / NL;
        const short il = short(u % NL);
        float xv[16], wv[16];
        for (short k = 0; k < 16; k++)
            xv[k] = xt[16 * u + k];
        for (short r = 0; r < nr; r++) {
            device const B *blk = (device const B *)(w + (ulong)(r0 + r) * a.w_row_bytes) + ib;
            deq(blk, il, wv);
            float s = 0.0f;
            for (short k = 0; k < 16; k++)
                s += wv[k] * xv[k];
            sum[r] += s;
        }
    }

    for (short r = 0; r < RVL_MTL_MV_NR; r++) {
        const float s = simd_sum(sum[r]);
        if (tiisg == 0 && r < nr)
            y[(ulong)t * a.y_stride + r0 + r] = s;
    }
}

// ---------------------------------------------------------------------
// GEMM
// ---------------------------------------------------------------------
#define MM_LDW (RVL_MTL_MM_TK + 1)   // padded rows: lane r reads row r conflict-free

template <typename B, short QK, void (*deq)(device const B *, short, thread float *)>
kernel void rvl_mul_mm(constant rvl_mtl_matmul_args &a [[buffer(0)]],
                       device const char *w [[buffer(1)]],
                       device const float *x [[buffer(2)]],
                       device float *y [[buffer(3)]],
                       uint3 tgpig [[threadgroup_position_in_grid]],
                       ushort tiitg [[thread_index_in_threadgroup]])
{
    threadgroup float sw[RVL_MTL_MM_TR * MM_LDW];        // [row][k]
    threadgroup float sx[RVL_MTL_MM_TT * RVL_MTL_MM_TK]; // [token][k]

    constexpr short TPT = RVL_MTL_MM_TT * RVL_MTL_MM_TR / RVL_MTL_MM_THREADS;  // outputs per thread
    const int r0 = int(tgpig.x) * RVL_MTL_MM_TR, t0 = int(tgpig.y) * RVL_MTL_MM_TT;
    const short row = tiitg % RVL_MTL_MM_TR;             // compute: this thread's row
    const short tc = (tiitg / RVL_MTL_MM_TR) * TPT;      // and its first token

    float acc[TPT];
    for (short j = 0; j < TPT; j++)
        acc[j] = 0.0f;

    for (int k0 = 0; k0 < a.k; k0 += RVL_MTL_MM_TK) {
        // weights: 32 rows x 2 parts, one part per thread (threads 0..63)
        if (tiitg < RVL_MTL_MM_TR * (RVL_MTL_MM_TK / 16)) {
            const short lr = tiitg / 2, lp = tiitg % 2;
            threadgroup float *dst = sw + lr * MM_LDW + 16 * lp;
            if (r0 + lr < a.n_rows) {
                const int e = k0 + 16 * lp;              // first element of the part
                device const B *blk =
                    (device const B *)(w + (ulong)(r0 + lr) * a.w_row_bytes) + e / QK;
                float wv[16];
                deq(blk, short((e % QK) / 16), wv);
                for (short k = 0; k < 16; k++)
                    dst[k] = wv[k];
            } else {
                for (short k = 0; k < 16; k++)
                    dst[k] = 0.0f;
            }
        }
        // activations: 32 tokens x 32 elements, 8 per thread
        {
            const short lt = tiitg / 4, lk = (tiitg % 4) * 8;
            threadgroup float *dst = sx + lt * RVL_MTL_MM_TK + lk;
            if (t0 + lt < a.n_tok) {
                device const float *src = x + (ulong)(t0 + lt) * a.x_stride + k0 + lk;
                for (short k = 0; k < 8; k++)
                    dst[k] = src[k];
            } else {
                for (short k = 0; k < 8; k++)
                    dst[k] = 0.0f;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        for (short k = 0; k < RVL_MTL_MM_TK; k++) {
            const float wk = sw[row * MM_LDW + k];
            for (short j = 0; j < TPT; j++)
                acc[j] += wk * sx[(tc + j) * RVL_MTL_MM_TK + k];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }

    if (r0 + row < a.n_rows)
        for (short j = 0; j < TPT; j++)
            if (t0 + tc + j < a.n_tok)
                y[(ulong)(t0 + tc + j) * a.y_stride + r0 + row] = acc[j];
}

// ---------------------------------------------------------------------
// Instantiations
// ---------------------------------------------------------------------
typedef decltype(rvl_mul_mv<blk_q4_0, 32, deq_q4_0>) rvl_mul_mv_t;
typedef decltype(rvl_mul_mm<blk_q4_0, 32, deq_q4_0>) rvl_mul_mm_t;

template [[host_name("rvl_mul_mv_q4_0_f32")]] kernel rvl_mul_mv_t rvl_mul_mv<blk_q4_0, 32, deq_q4_0>;
template [[host_name("rvl_mul_mv_q8_0_f32")]] kernel rvl_mul_mv_t rvl_mul_mv<blk_q8_0, 32, deq_q8_0>;
template [[host_name("rvl_mul_mv_q4_K_f32")]] kernel rvl_mul_mv_t rvl_mul_mv<blk_q4_K, 256, deq_q4_K>;
template [[host_name("rvl_mul_mv_q6_K_f32")]] kernel rvl_mul_mv_t rvl_mul_mv<blk_q6_K, 256, deq_q6_K>;
template [[host_name("rvl_mul_mv_rvl_i4s_g32_f32")]] kernel rvl_mul_mv_t rvl_mul_mv<blk_i4s_g32, 32, deq_i4s<blk_i4s_g32, 32>>;
template [[host_name("rvl_mul_mv_rvl_i4s_g64_f32")]] kernel rvl_mul_mv_t rvl_mul_mv<blk_i4s_g64, 64, deq_i4s<blk_i4s_g64, 64>>;
template [[host_name("rvl_mul_mv_rvl_i4s_g128_f32")]] kernel rvl_mul_mv_t rvl_mul_mv<blk_i4s_g128, 128, deq_i4s<blk_i4s_g128, 128>>;
template [[host_name("rvl_mul_mv_rvl_i4a_g32_f32")]] kernel rvl_mul_mv_t rvl_mul_mv<blk_i4a_g32, 32, deq_i4a<blk_i4a_g32, 32>>;
template [[host_name("rvl_mul_mv_rvl_i4a_g64_f32")]] kernel rvl_mul_mv_t rvl_mul_mv<blk_i4a_g64, 64, deq_i4a<blk_i4a_g64, 64>>;
template [[host_name("rvl_mul_mv_rvl_i4a_g128_f32")]] kernel rvl_mul_mv_t rvl_mul_mv<blk_i4a_g128, 128, deq_i4a<blk_i4a_g128, 128>>;
template [[host_name("rvl_mul_mv_mlx_a4_g64_f32")]] kernel rvl_mul_mv_t rvl_mul_mv<blk_mlx_a4_g64, 64, deq_mlx_a4_g64>;

template [[host_name("rvl_mul_mm_q4_0_f32")]] kernel rvl_mul_mm_t rvl_mul_mm<blk_q4_0, 32, deq_q4_0>;
template [[host_name("rvl_mul_mm_q8_0_f32")]] kernel rvl_mul_mm_t rvl_mul_mm<blk_q8_0, 32, deq_q8_0>;
template [[host_name("rvl_mul_mm_q4_K_f32")]] kernel rvl_mul_mm_t rvl_mul_mm<blk_q4_K, 256, deq_q4_K>;
template [[host_name("rvl_mul_mm_q6_K_f32")]] kernel rvl_mul_mm_t rvl_mul_mm<blk_q6_K, 256, deq_q6_K>;
template [[host_name("rvl_mul_mm_rvl_i4s_g32_f32")]] kernel rvl_mul_mm_t rvl_mul_mm<blk_i4s_g32, 32, deq_i4s<blk_i4s_g32, 32>>;
template [[host_name("rvl_mul_mm_rvl_i4s_g64_f32")]] kernel rvl_mul_mm_t rvl_mul_mm<blk_i4s_g64, 64, deq_i4s<blk_i4s_g64, 64>>;
template [[host_name("rvl_mul_mm_rvl_i4s_g128_f32")]] kernel rvl_mul_mm_t rvl_mul_mm<blk_i4s_g128, 128, deq_i4s<blk_i4s_g128, 128>>;
template [[host_name("rvl_mul_mm_rvl_i4a_g32_f32")]] kernel rvl_mul_mm_t rvl_mul_mm<blk_i4a_g32, 32, deq_i4a<blk_i4a_g32, 32>>;
template [[host_name("rvl_mul_mm_rvl_i4a_g64_f32")]] kernel rvl_mul_mm_t rvl_mul_mm<blk_i4a_g64, 64, deq_i4a<blk_i4a_g64, 64>>;
template [[host_name("rvl_mul_mm_rvl_i4a_g128_f32")]] kernel rvl_mul_mm_t rvl_mul_mm<blk_i4a_g128, 128, deq_i4a<blk_i4a_g128, 128>>;
template [[host_name("rvl_mul_mm_mlx_a4_g64_f32")]] kernel rvl_mul_mm_t rvl_mul_mm<blk_mlx_a4_g64, 64, deq_mlx_a4_g64>;
