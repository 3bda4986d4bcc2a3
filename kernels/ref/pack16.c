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
 * type_size bytes at i * 16 * type_size:
 *   32 bytes        the 16 rows' f16 d, row r's at 2r
 *   Q5_0: 64 bytes  the 16 rows' qh (u32), row r's at 4r
 *   P pieces of 64  piece c: row r's quant bytes 4c..4c+3 at 4r
 *                   (Q4_0/IQ4_NL/Q5_0: the 16 nibble bytes, P = 4;
 *                   Q8_0: the 32 quants, P = 8)
 * Only the order changes: unpack16 restores the rows bit for bit.
 */
#include "formats.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define P16 RVL_PACK16_ROWS

/* Copy between 16 row-major rows and the group: blocks of bsz bytes, the
 * f16 d first, then hbytes of high bits (Q5_0's qh) and qbytes of quants. */
static void p16_copy(int64_t n, unsigned char *rows, size_t stride, unsigned char *group,
                     size_t bsz, size_t hbytes, bool pack)
{
    const int64_t nb = n / 32;
    const size_t qbytes = bsz - 2 - hbytes;
    for (int64_t i = 0; i < nb; i++) {
        unsigned char *g = group + (size_t)i * P16 * bsz;
        for (int r = 0; r < P16; r++) {
            unsigned char *blk = rows + (size_t)r * stride + (size_t)i * bsz;
            unsigned char *d = g + 2 * r;
            unsigned char *h = g + 2 * P16 + hbytes * r;
            if (pack) {
                memcpy(d, blk, 2);
                memcpy(h, blk + 2, hbytes);
            } else {
                memcpy(blk, d, 2);
                memcpy(blk + 2, h, hbytes);
            }
            for (size_t c = 0; c < qbytes / 4; c++) {
                unsigned char *q = g + (2 + hbytes) * P16 + c * 4 * P16 + 4 * r;
                if (pack)
                    memcpy(q, blk + 2 + hbytes + 4 * c, 4);
                else
                    memcpy(blk + 2 + hbytes + 4 * c, q, 4);
            }
        }
    }
}

/* Q4_1 and Q5_1: the 16 rows' d, then their m (32 bytes each), then as
 * Q4_0 / Q5_0 (Q5_1's qh, the nibbles in pieces of 4 bytes). */
static void p16_copy_m(int64_t n, unsigned char *rows, size_t stride, unsigned char *group,
                       size_t bsz, size_t hbytes, bool pack)
{
    const size_t qbytes = bsz - 4 - hbytes;
    for (int64_t i = 0; i < n / 32; i++) {
        unsigned char *g = group + (size_t)i * P16 * bsz;
        for (int r = 0; r < P16; r++) {
            unsigned char *blk = rows + (size_t)r * stride + (size_t)i * bsz;
            /* (offset in the block, offset in the group, bytes) */
            size_t at[3 + 8][3] = {{0, 2 * (size_t)r, 2}, {2, 32 + 2 * (size_t)r, 2},
                                   {4, 64 + hbytes * (size_t)r, hbytes}};
            size_t np = 3;
            for (size_t c = 0; c < qbytes / 4; c++, np++) {
                at[np][0] = 4 + hbytes + 4 * c;
                at[np][1] = (4 + hbytes) * P16 + 64 * c + 4 * (size_t)r;
                at[np][2] = 4;
            }
            for (size_t k = 0; k < np; k++) {
                if (pack)
                    memcpy(g + at[k][1], blk + at[k][0], at[k][2]);
                else
                    memcpy(blk + at[k][0], g + at[k][1], at[k][2]);
            }
        }
    }
}

void pack16_q4_1(int64_t n, const void *rows, size_t stride, void *group)
{
    p16_copy_m(n, (unsigned char *)(uintptr_t)rows, stride, group, sizeof(block_q4_1), 0, true);
}

void unpack16_q4_1(int64_t n, const void *group, void *rows, size_t stride)
{
    p16_copy_m(n, rows, stride, (unsigned char *)(uintptr_t)group, sizeof(block_q4_1), 0, false);
}

void pack16_q5_1(int64_t n, const void *rows, size_t stride, void *group)
{
    p16_copy_m(n, (unsigned char *)(uintptr_t)rows, stride, group, sizeof(block_q5_1), 4, true);
}

void unpack16_q5_1(int64_t n, const void *group, void *rows, size_t stride)
{
    p16_copy_m(n, rows, stride, (unsigned char *)(uintptr_t)group, sizeof(block_q5_1), 4, false);
}

/* MXFP4: the 16 rows' exponents e (one byte each, 16 bytes), then the
 * nibbles in pieces of 4 bytes as Q4_0's (16 * 17 bytes a block). */
static void p16_copy_mx(int64_t n, unsigned char *rows, size_t stride, unsigned char *group,
                        bool pack)
{
    const size_t bs = sizeof(block_mxfp4);
    for (int64_t i = 0; i < n / 32; i++) {
        unsigned char *g = group + (size_t)i * P16 * bs;
        for (int r = 0; r < P16; r++) {
            unsigned char *blk = rows + (size_t)r * stride + (size_t)i * bs;
            if (pack)
                g[r] = blk[0];
            else
                blk[0] = g[r];
            for (size_t c = 0; c < 4; c++) {
                unsigned char *q = g + P16 + 64 * c + 4 * (size_t)r;
                if (pack)
                    memcpy(q, blk + 1 + 4 * c, 4);
                else
                    memcpy(blk + 1 + 4 * c, q, 4);
            }
        }
    }
}

void pack16_mxfp4(int64_t n, const void *rows, size_t stride, void *group)
{
    p16_copy_mx(n, (unsigned char *)(uintptr_t)rows, stride, group, true);
}

void unpack16_mxfp4(int64_t n, const void *group, void *rows, size_t stride)
{
    p16_copy_mx(n, rows, stride, (unsigned char *)(uintptr_t)group, false);
}

void pack16_q4_0(int64_t n, const void *rows, size_t stride, void *group)
{
    p16_copy(n, (unsigned char *)(uintptr_t)rows, stride, group, sizeof(block_q4_0), 0, true);
}

void unpack16_q4_0(int64_t n, const void *group, void *rows, size_t stride)
{
    p16_copy(n, rows, stride, (unsigned char *)(uintptr_t)group, sizeof(block_q4_0), 0, false);
}

void pack16_q5_0(int64_t n, const void *rows, size_t stride, void *group)
{
    p16_copy(n, (unsigned char *)(uintptr_t)rows, stride, group, sizeof(block_q5_0), 4, true);
}

void unpack16_q5_0(int64_t n, const void *group, void *rows, size_t stride)
{
    p16_copy(n, rows, stride, (unsigned char *)(uintptr_t)group, sizeof(block_q5_0), 4, false);
}

void pack16_q8_0(int64_t n, const void *rows, size_t stride, void *group)
{
    p16_copy(n, (unsigned char *)(uintptr_t)rows, stride, group, sizeof(block_q8_0), 0, true);
}

void unpack16_q8_0(int64_t n, const void *group, void *rows, size_t stride)
{
    p16_copy(n, rows, stride, (unsigned char *)(uintptr_t)group, sizeof(block_q8_0), 0, false);
}

/* Q4_K (Q5_K): block i of the group is 16 * 144 (176) bytes at i * 16 *
 * 144 (176):
 *   32 bytes         the 16 rows' d (f16), row r's at 2r
 *   32 bytes         the 16 rows' dmin
 *   3 pieces of 64   piece p: row r's scale bytes 4p..4p+3 at 4r
 *   Q5_K: 8 pieces   piece c: row r's qh[4c..4c+3] at 4r
 *   32 pieces of 64  piece c: row r's qs[4c..4c+3] at 4r
 * (every field after dmin in the block's own order, in 4-byte pieces) */
static void p16_copy_k4(int64_t n, unsigned char *rows, size_t stride, unsigned char *group,
                        size_t bs, bool pack)
{
    for (int64_t i = 0; i < n / 256; i++) {
        unsigned char *g = group + (size_t)i * P16 * bs;
        for (int r = 0; r < P16; r++) {
            unsigned char *blk = rows + (size_t)r * stride + (size_t)i * bs;
            /* (offset in the block, offset in the group) of 2- or 4-byte pieces */
            size_t at[2 + 3 + 8 + 32][3];
            const size_t np = (bs - 4) / 4;
            at[0][0] = 0, at[0][1] = 2 * (size_t)r, at[0][2] = 2;
            at[1][0] = 2, at[1][1] = 32 + 2 * (size_t)r, at[1][2] = 2;
            for (size_t p = 0; p < np; p++) {
                at[2 + p][0] = 4 + 4 * p;
                at[2 + p][1] = 64 + 64 * p + 4 * (size_t)r;
                at[2 + p][2] = 4;
            }
            for (size_t k = 0; k < 2 + np; k++) {
                if (pack)
                    memcpy(g + at[k][1], blk + at[k][0], at[k][2]);
                else
                    memcpy(blk + at[k][0], g + at[k][1], at[k][2]);
            }
        }
    }
}

void pack16_q4_K(int64_t n, const void *rows, size_t stride, void *group)
{
    p16_copy_k4(n, (unsigned char *)(uintptr_t)rows, stride, group, sizeof(block_q4_K), true);
}

void unpack16_q4_K(int64_t n, const void *group, void *rows, size_t stride)
{
    p16_copy_k4(n, rows, stride, (unsigned char *)(uintptr_t)group, sizeof(block_q4_K), false);
}

void pack16_q5_K(int64_t n, const void *rows, size_t stride, void *group)
{
    p16_copy_k4(n, (unsigned char *)(uintptr_t)rows, stride, group, sizeof(block_q5_K), true);
}

void unpack16_q5_K(int64_t n, const void *group, void *rows, size_t stride)
{
    p16_copy_k4(n, rows, stride, (unsigned char *)(uintptr_t)group, sizeof(block_q5_K), false);
}

/* Q6_K: block i of the group is 16 * 210 bytes at i * 16 * 210:
 *   32 bytes         the 16 rows' d (f16), row r's at 2r
 *   4 pieces of 64   piece p: row r's scales[4p..4p+3] at 4r
 *   32 pieces of 64  piece c: row r's ql[4c..4c+3] at 4r
 *   16 pieces of 64  piece c: row r's qh[4c..4c+3] at 4r */
static void p16_copy_q6(int64_t n, unsigned char *rows, size_t stride, unsigned char *group,
                        bool pack)
{
    const size_t bs = sizeof(block_q6_K);
    for (int64_t i = 0; i < n / 256; i++) {
        unsigned char *g = group + (size_t)i * P16 * bs;
        for (int r = 0; r < P16; r++) {
            unsigned char *blk = rows + (size_t)r * stride + (size_t)i * bs;
            if (pack)
                memcpy(g + 2 * r, blk + 208, 2);
            else
                memcpy(blk + 208, g + 2 * r, 2);
            /* pieces: the scales (at 192 in the block), ql (0), qh (128) */
            for (size_t p = 0; p < 4 + 32 + 16; p++) {
                const size_t src = p < 4 ? 192 + 4 * p : 4 * (p - 4);
                unsigned char *dst = g + 32 + 64 * p + 4 * (size_t)r;
                if (pack)
                    memcpy(dst, blk + src, 4);
                else
                    memcpy(blk + src, dst, 4);
            }
        }
    }
}

void pack16_q6_K(int64_t n, const void *rows, size_t stride, void *group)
{
    p16_copy_q6(n, (unsigned char *)(uintptr_t)rows, stride, group, true);
}

void unpack16_q6_K(int64_t n, const void *group, void *rows, size_t stride)
{
    p16_copy_q6(n, rows, stride, (unsigned char *)(uintptr_t)group, false);
}

/* IQ4_XS: block i of the group is 16 * 136 bytes at i * 16 * 136:
 *   32 bytes         the 16 rows' d (f16), row r's at 2r
 *   32 bytes         their scales_h (u16), row r's at 2r
 *   64 bytes         their scales_l, row r's 4 bytes at 4r
 *   32 pieces of 64  piece c: row r's qs[4c..4c+3] at 4r */
static void p16_copy_xs(int64_t n, unsigned char *rows, size_t stride, unsigned char *group,
                        bool pack)
{
    const size_t bs = sizeof(block_iq4_xs);
    for (int64_t i = 0; i < n / 256; i++) {
        unsigned char *g = group + (size_t)i * P16 * bs;
        for (int r = 0; r < P16; r++) {
            unsigned char *blk = rows + (size_t)r * stride + (size_t)i * bs;
            size_t at[3 + 32][3] = {{0, 2 * (size_t)r, 2}, {2, 32 + 2 * (size_t)r, 2},
                                    {4, 64 + 4 * (size_t)r, 4}};
            for (size_t c = 0; c < 32; c++) {
                at[3 + c][0] = 8 + 4 * c;
                at[3 + c][1] = 128 + 64 * c + 4 * (size_t)r;
                at[3 + c][2] = 4;
            }
            for (size_t k = 0; k < 3 + 32; k++) {
                if (pack)
                    memcpy(g + at[k][1], blk + at[k][0], at[k][2]);
                else
                    memcpy(blk + at[k][0], g + at[k][1], at[k][2]);
            }
        }
    }
}

void pack16_iq4_xs(int64_t n, const void *rows, size_t stride, void *group)
{
    p16_copy_xs(n, (unsigned char *)(uintptr_t)rows, stride, group, true);
}

void unpack16_iq4_xs(int64_t n, const void *group, void *rows, size_t stride)
{
    p16_copy_xs(n, rows, stride, (unsigned char *)(uintptr_t)group, false);
}

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
