/*
 * pack16.c - the 16-row layout of the 32-value formats whose activation
 * is Q8_0 (formats.h gemm16), and the block sums that follow a Q8_0
 * activation row (rvl_act_sums).
 *
 * One kernel reads this layout for prompt processing and for decode: a
 * 64-byte load holds 4 quant bytes of each of 16 rows, one int32 lane per
 * row, so an activation's 4 bytes broadcast to every lane feed 16 rows in
 * one vpdpbusd, and a block's whole integer dot product of a row stays in
 * its lane (no reduction across lanes until the result). The row-major
 * kernels instead put one row's 32 values across a vector and fold the
 * lanes for every block and token; that shuffling was the prompt
 * kernels' bottleneck.
 *
 * Block i of the group of 16 rows (rows `stride` bytes apart) is 16 *
 * type_size bytes at i * 16 * type_size: planes of the 16 rows' bytes of
 * one field each, the f16 scales first (32 bytes, row r's at 2r), then
 * the rest in pieces of 4 bytes (64 bytes, row r's at 4r); each format's
 * order is its list of runs below. Only the order changes: unpack16
 * restores the rows bit for bit.
 */
#include "formats.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define P16 RVL_PACK16_ROWS

/* A format's layout as runs of planes: `count` fields of `width` bytes
 * (1, 2 or 4) from byte `off` of the block on; each field becomes a plane
 * of the 16 rows' bytes (16 * width, row r's at width * r), in the order
 * listed. */
typedef struct {
    uint16_t off;
    uint8_t width, count;
} p16_run;

static void p16_copy(int64_t n, uint32_t block, size_t bsz, const p16_run *runs, int nr,
                     unsigned char *rows, size_t stride, unsigned char *group, bool pack)
{
    for (int64_t i = 0; i < n / block; i++) {
        unsigned char *g = group + (size_t)i * P16 * bsz;
        for (int k = 0; k < nr; k++)
            for (size_t f = 0; f < runs[k].count; f++, g += P16 * (size_t)runs[k].width)
                for (int r = 0; r < P16; r++) {
                    unsigned char *b = rows + (size_t)r * stride + (size_t)i * bsz + runs[k].off +
                                       f * runs[k].width;
                    unsigned char *q = g + (size_t)r * runs[k].width;
                    if (pack)
                        memcpy(q, b, runs[k].width);
                    else
                        memcpy(b, q, runs[k].width);
                }
    }
}

/* pack16_<fmt> and unpack16_<fmt> from the format's runs */
#define P16_FORMAT(fmt, block, ...)                                                        \
    static const p16_run runs_##fmt[] = {__VA_ARGS__};                                     \
    void pack16_##fmt(int64_t n, const void *rows, size_t stride, void *group)             \
    {                                                                                      \
        p16_copy(n, block, sizeof(block_##fmt), runs_##fmt,                                \
                 (int)(sizeof runs_##fmt / sizeof runs_##fmt[0]),                          \
                 (unsigned char *)(uintptr_t)rows, stride, group, true);                   \
    }                                                                                      \
    void unpack16_##fmt(int64_t n, const void *group, void *rows, size_t stride)           \
    {                                                                                      \
        p16_copy(n, block, sizeof(block_##fmt), runs_##fmt,                                \
                 (int)(sizeof runs_##fmt / sizeof runs_##fmt[0]), rows, stride,            \
                 (unsigned char *)(uintptr_t)group, false);                                \
    }

/* The 32-value formats: d (Q4_1, Q5_1: then m), Q5's qh, the quants in
 * pieces of 4 bytes; MXFP4: its exponent byte, then the nibbles. */
P16_FORMAT(q4_0, 32, {0, 2, 1}, {2, 4, 4})
P16_FORMAT(q5_0, 32, {0, 2, 1}, {2, 4, 1}, {6, 4, 4})
P16_FORMAT(q8_0, 32, {0, 2, 1}, {2, 4, 8})
P16_FORMAT(q4_1, 32, {0, 2, 1}, {2, 2, 1}, {4, 4, 4})
P16_FORMAT(q5_1, 32, {0, 2, 1}, {2, 2, 1}, {4, 4, 1}, {8, 4, 4})
P16_FORMAT(mxfp4, 32, {0, 1, 1}, {1, 4, 4})
/* The K-quants: Q4_K and Q5_K d, dmin, then every other field (the 12
 * scale bytes, Q5_K's 32 qh, the 128 qs) in pieces of 4; Q6_K d, its 16
 * scales, ql, qh; IQ4_XS d, scales_h, scales_l, qs. */
P16_FORMAT(q4_K, 256, {0, 2, 1}, {2, 2, 1}, {4, 4, 35})
P16_FORMAT(q5_K, 256, {0, 2, 1}, {2, 2, 1}, {4, 4, 43})
P16_FORMAT(q6_K, 256, {208, 2, 1}, {192, 4, 4}, {0, 4, 32}, {128, 4, 16})
P16_FORMAT(iq4_xs, 256, {0, 2, 1}, {2, 2, 1}, {4, 4, 1}, {8, 4, 32})

void rvl_act_sums(void *row, int64_t n)
{
    const block_q8_0 *b = row;
    unsigned char *out = (unsigned char *)row + rvl_act_sums_offset(n);
    for (int64_t i = 0; i < n / 32; i++) {
        int32_t s = 0;
        for (int j = 0; j < 32; j++)
            s += b[i].qs[j];
        const float d = rvl_f16_to_f32(b[i].d);
        memcpy(out + 4 * i, &s, 4);
        memcpy(out + 4 * (n / 32) + 4 * i, &d, 4);
    }
}
