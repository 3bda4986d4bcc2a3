/*
 * gemm_float_entry.h - the rvl_gemm_fn entry points of the float tiles,
 * included at the end of gemm_float_avx2.c and gemm_float_avx512.c (each
 * compiled for its own target): groups of GR rows, each row prefetching
 * the same offset GR rows on, to the file's rows1 (one token) or tile.
 * FLOAT_ISA names the variant (the suffix of the entry points).
 */
#define FLOAT_CAT_(a, b) a##_##b
#define FLOAT_CAT(a, b) FLOAT_CAT_(a, b)

AI void gemm(int kind, int64_t n, const void *vw, size_t w_stride, int nr, const void *vact,
             size_t act_stride, int nt, float *y, size_t y_stride)
{
    const uint8_t *w = vw, *act = vact;
    /* the same offset of the row one call (8 rows) further on */
    const size_t ahead = (size_t)GR * w_stride;
    for (int r0 = 0; r0 < nr; r0 += GR) {
        const int rn = nr - r0 < GR ? nr - r0 : GR;
        const uint8_t *wr[GR];
        for (int k = 0; k < GR; k++)
            wr[k] = w + (size_t)(r0 + (k < rn ? k : rn - 1)) * w_stride;
        if (nt == 1)
            rows1(kind, n, wr, ahead, act, rn, y + r0);
        else if (nt > 1)
            tile(kind, n, wr, w_stride, ahead, act, act_stride, nt, rn, y + r0, y_stride);
    }
}

#define FLOAT_GEMM(name, kind)                                                              \
    void FLOAT_CAT(name, FLOAT_ISA)(int64_t n, const void *w, size_t w_stride, int nr,      \
                                    const void *act, size_t act_stride, int nt, float *y,   \
                                    size_t y_stride)                                        \
    {                                                                                       \
        gemm(kind, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);                   \
    }
FLOAT_GEMM(gemm_f32_f32, F_F32)
FLOAT_GEMM(gemm_f16_f16, F_F16)
FLOAT_GEMM(gemm_bf16_bf16, F_BF16)
#undef FLOAT_GEMM
#undef FLOAT_CAT
#undef FLOAT_CAT_
