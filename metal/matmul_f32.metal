// matmul_f32.metal - GEMV over unquantized weights: y[t][r] = sum_i W[r][i] * x[t][i]
// with W in f32 or f16 (converted to f32 before the multiply, exactly), x and y
// f32 (kernels/ref's vec_dot_f32 / f16 without its summation order).
//
//   rvl_mul_mv_f32_f32, rvl_mul_mv_f16_f32
//       Arguments and buffers as matmul.metal's GEMV: 0 rvl_mtl_matmul_args,
//       1 W (row r at r * w_row_bytes; 4-byte aligned rows for f32, 2 for f16),
//       2 x, 3 y. Any k (no block), any n_tok (one threadgroup row per token).
//       Dispatch: rvl_mtl_mv_dispatch (RVL_MTL_MV_NSG simdgroups of
//       RVL_MTL_MV_NR rows each per threadgroup).
//
// Lane j of a simdgroup multiplies elements j, j + 32, ... of its rows, then
// one simd_sum per row. Meant for small or unquantized models (the tiny test
// models, f16 checkpoints); quantized formats are in matmul.metal.
#include <metal_stdlib>
using namespace metal;

#include "rvl_metal_args.h"

template <typename T>
kernel void rvl_mul_mv_plain(constant rvl_mtl_matmul_args &a [[buffer(0)]],
                             device const char *w [[buffer(1)]],
                             device const float *x [[buffer(2)]],
                             device float *y [[buffer(3)]],
                             uint3 tgpig [[threadgroup_position_in_grid]],
                             ushort tiisg [[thread_index_in_simdgroup]],
                             ushort sgitg [[simdgroup_index_in_threadgroup]])
{
    const int r0 = (int(tgpig.x) * RVL_MTL_MV_NSG + sgitg) * RVL_MTL_MV_NR;
    const int t = int(tgpig.y);
    const int nr = min(RVL_MTL_MV_NR, a.n_rows - r0);   // rows of this simdgroup (may be <= 0)
    device const float *xt = x + (ulong)t * a.x_stride;

    float sum[RVL_MTL_MV_NR];
    for (short r = 0; r < RVL_MTL_MV_NR; r++)
        sum[r] = 0.0f;

    for (int i = tiisg; i < a.k; i += RVL_MTL_SIMD) {
        const float xv = xt[i];
        for (short r = 0; r < nr; r++) {
            device const T *row = (device const T *)(w + (ulong)(r0 + r) * a.w_row_bytes);
            sum[r] += float(row[i]) * xv;
        }
    }

    for (short r = 0; r < RVL_MTL_MV_NR; r++) {
        const float s = simd_sum(sum[r]);
        if (tiisg == 0 && r < nr)
            y[(ulong)t * a.y_stride + r0 + r] = s;
    }
}

typedef decltype(rvl_mul_mv_plain<float>) rvl_mul_mv_plain_t;
template [[host_name("rvl_mul_mv_f32_f32")]] kernel rvl_mul_mv_plain_t rvl_mul_mv_plain<float>;
template [[host_name("rvl_mul_mv_f16_f32")]] kernel rvl_mul_mv_plain_t rvl_mul_mv_plain<half>;
