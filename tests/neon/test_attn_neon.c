/*
 * test_attn_neon.c - the NEON attention kernels (kernels/arm/attn_neon.c)
 * and ref on arm64, with the checks of tests/test_attn.c
 * (tests/attn_testlib.h): a double-precision softmax(scale * QK^T) V
 * within the bound stated there, on shuffled NaN-surrounded pages; split
 * counts 1..8 repeatable to the bit; prefill = decode token by token to
 * the bit; GQA ratios 1, 4, 8 and MQA; odd head dims; sliding window;
 * soft-cap; q rounded to f16; a query without keys gives zeros;
 * attention-sink logits in decode and prefill (windowed too). Fewer
 * shapes than test_attn (qemu is slow).
 *
 * Built from kernels/ alone (no lib/, no cmocka), statically, by the
 * Makefile's NEON section; tests/cli/t0041-attn-neon-qemu.sh runs it
 * under qemu-aarch64 on x86 hosts. Prints TAP.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__aarch64__) && defined(__ARM_NEON)

static int ntests, nfailed, cur_failures;

#define ATTN_CHECK(cond)                                                           \
    do {                                                                           \
        if (!(cond) && cur_failures++ < 8)                                         \
            printf("# %s:%d: %s\n", __FILE__, __LINE__, #cond);                    \
    } while (0)

#include "attn_testlib.h"

static void run(const char *name, void (*fn)(void))
{
    cur_failures = 0;
    fn();
    ntests++;
    if (cur_failures) {
        nfailed++;
        printf("not ok %d - %s (%d failures)\n", ntests, name, cur_failures);
    } else {
        printf("ok %d - %s\n", ntests, name);
    }
    fflush(stdout);
}

static const int c13[] = { 1, 3 };

static void test_neon_is_selected_and_served(void)
{
    const rvl_attn_kernels *n = rvl_attn_get_isa(RVL_ISA_NEON);
    ATTN_CHECK(n != NULL);
    ATTN_CHECK(n && !strcmp(n->name, "neon"));
    ATTN_CHECK(rvl_attn_get_isa(RVL_ISA_AVX2) == NULL);
    ATTN_CHECK(!strcmp(rvl_attn_get()->name, rvl_dispatch_isa_name(rvl_dispatch_isa())));
}

static void test_decode_matches_double_softmax(void)
{
    static const int hds[] = { 64, 128, 80, 5 };
    static const int heads[][2] = { { 4, 4 }, { 8, 2 }, { 16, 2 }, { 8, 1 } };
    static const int nkvs[] = { 1, 31, 33, 100 };
    for (int type = 0; type < 2; type++)
        for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
            for (size_t b = 0; b < sizeof heads / sizeof *heads; b++)
                for (size_t k = 0; k < sizeof nkvs / sizeof *nkvs; k++) {
                    const at_shape s = { hds[a], heads[b][0], heads[b][1], nkvs[k], 32, type,
                                         0, 0, 0 };
                    at_check_decode(&s, 1.0f, nkvs[k] - 1, c13, 2);
                }
    for (int type = 0; type < 2; type++) {
        const at_shape s = { 96, 8, 2, 1000, 32, type, 0, 0, 0 };
        at_check_decode(&s, 1.0f, 999, c13, 2);
        const at_shape pages = { 64, 4, 2, 200, 16, type, 0, 0, 0 };
        at_check_decode(&pages, 1.0f, 199, c13, 2);
    }
}

static void test_split_counts_agree(void)
{
    static const int all[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    for (int type = 0; type < 2; type++) {
        const at_shape s = { 128, 8, 2, 300, 32, type, 0, 0, 0 };
        at_check_decode(&s, 2.0f, 299, all, 8);
    }
}

static void test_window_softcap_q_f16(void)
{
    for (int type = 0; type < 2; type++) {
        const at_shape win = { 80, 8, 2, 150, 32, type, 0, 7, 0 };
        at_check_decode(&win, 1.0f, 149, c13, 2);
        const at_shape cap = { 256, 8, 4, 100, 32, type, 50.0f, 0, 1 };
        at_check_decode(&cap, 8.0f, 99, c13, 2);
        const at_shape tight = { 64, 4, 1, 300, 32, type, 5.0f, 16, 0 };
        at_check_decode(&tight, 4.0f, 299, c13, 2);
        const at_shape none = { 64, 4, 2, 40, 32, type, 0, 5, 0 };
        at_check_decode(&none, 1.0f, 60, c13, 2); /* no key in view: zeros */
    }
}

static void test_prefill_is_decode_token_by_token(void)
{
    static const int nqs[] = { 1, 7, 32 };
    static const int heads[][2] = { { 4, 4 }, { 8, 2 }, { 8, 1 } };
    for (int type = 0; type < 2; type++)
        for (size_t b = 0; b < sizeof heads / sizeof *heads; b++)
            for (size_t i = 0; i < sizeof nqs / sizeof *nqs; i++) {
                const at_shape s = { 64, heads[b][0], heads[b][1], 0, 32, type, 0, 0, 0 };
                at_check_prefill(&s, 45, nqs[i], 1.0f);
            }
    for (int type = 0; type < 2; type++) {
        const at_shape win = { 68, 6, 3, 0, 32, type, 0, 9, 0 };
        at_check_prefill(&win, 20, 40, 1.0f);
    }
}

static void test_sinks(void)
{
    at_sink_amp = 2.0f;
    static const int heads[][2] = { { 4, 4 }, { 8, 2 }, { 8, 1 } };
    for (int type = 0; type < 2; type++)
        for (size_t b = 0; b < sizeof heads / sizeof *heads; b++) {
            const at_shape s = { 64, heads[b][0], heads[b][1], 100, 32, type, 0, 0, 0 };
            at_check_decode(&s, 1.0f, 99, c13, 2);
            const at_shape win = { 68, heads[b][0], heads[b][1], 150, 32, type, 0, 40, 0 };
            at_check_decode(&win, 2.0f, 149, c13, 2);
            const at_shape pre = { 64, heads[b][0], heads[b][1], 0, 32, type, 0, 0, 0 };
            at_check_prefill(&pre, 45, 33, 1.0f);
            const at_shape pwin = { 80, heads[b][0], heads[b][1], 0, 32, type, 0, 20, 0 };
            at_check_prefill(&pwin, 30, 40, 1.0f);
        }
    at_sink_amp = 0;
}

int main(void)
{
    run("neon variant is served", test_neon_is_selected_and_served);
    run("decode matches double softmax (f32, f16, GQA, MQA, odd dims, pages)",
        test_decode_matches_double_softmax);
    run("split counts 1..8 agree and repeat their bits", test_split_counts_agree);
    run("sliding window, softcap, q in f16, no key in view", test_window_softcap_q_f16);
    run("prefill is decode token by token (bits)", test_prefill_is_decode_token_by_token);
    run("attention sinks: decode and prefill, windowed too", test_sinks);
    for (int isa = 0; isa < RVL_ISA_COUNT; isa++)
        for (int t = 0; t < 2; t++)
            if (at_worst[isa][t] > 0)
                printf("# %s %s: worst error / bound %.3g\n", rvl_dispatch_isa_name(isa),
                       t ? "f16" : "f32", at_worst[isa][t]);
    if (nfailed)
        printf("# %d of %d failed\n", nfailed, ntests);
    printf("1..%d\n", ntests);
    return nfailed ? 1 : 0;
}

#else /* not an arm64 NEON build */

int main(void)
{
    printf("1..0 # SKIP not an aarch64 NEON build\n");
    return 0;
}

#endif
