/*
 * gen.h - one reply's generation loop, shared by commands that generate:
 * sample, stop, detokenize and stream text as it is produced.
 *
 * The loop starts from the logits of a prompt already decoded into the
 * context and appends each generated token to the cache (except the one
 * that ends the turn, which is sampled but never decoded). Text reaches
 * the caller's emit callback as valid UTF-8 (a character split over
 * tokens is held back until complete) with stop strings removed (a
 * possible start of a stop string is held back until it is decided).
 */
#ifndef RVL_GEN_H
#define RVL_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ruvllm.h"

double gen_now_ms(void);   /* monotonic clock */

typedef struct {
    rvl_ctx *ctx;                   /* borrowed; holds the decoded prompt */
    rvl_sampler *smp;               /* borrowed; has accepted the prompt */
    const rvl_tokenizer *tok;       /* borrowed */
    const char *const *stop_tokens; /* token texts that end the turn (NULL-terminated; may be NULL) */
    const char *const *stop_strs;   /* texts that end the turn (NULL-terminated; may be NULL) */
    size_t max_tokens;              /* SIZE_MAX: until the turn ends or the context is full */
    bool special;                   /* render control tokens in the text */
    bool ignore_eos;                /* never sample an end-of-generation token (llama.cpp's
                                       --ignore-eos: their logits become -inf) */
    /* streamed text; a negative return stops generation with that code */
    int (*emit)(void *ud, const char *s, size_t n);
    void *ud;
    /* when the context is full: stop (GEN_CONTEXT), or with context_shift
     * drop the oldest half of the positions after the first shift_keep
     * (rvl_ctx_shift) and go on */
    bool context_shift;
    uint32_t shift_keep;
} gen_params;

typedef enum {
    GEN_STOP,          /* end of turn: an end-of-generation token or a stop string */
    GEN_LENGTH,        /* max_tokens generated */
    GEN_CONTEXT,       /* the context is full */
    GEN_INTERRUPTED,   /* Ctrl-C (rvl_interrupted) */
} gen_finish;
const char *gen_finish_name(gen_finish f);   /* "stop", "length", "context", "interrupted" */

typedef struct {
    rvl_buf text;          /* owned (gen_result_free): everything emitted */
    int32_t *ids;          /* owned: the sampled tokens, the end-of-turn one included */
    size_t n_ids;
    gen_finish finish;
    double first_ms;       /* from the call to the first sampled token */
    double gen_ms;         /* the whole loop */
    size_t n_decoded;      /* tokens that went through rvl_decode */
    size_t n_shifted;      /* positions dropped by context shifts */
} gen_result;
void gen_result_free(gen_result *r);

/* Generate from `logits` (the prompt's last row). 0 also when stopped by
 * max_tokens, a full context or Ctrl-C (see r->finish); a negative RVL_E*
 * code for a decode failure, or emit's code. The cache's position says
 * which tokens it holds: r->ids[0 .. rvl_ctx_pos - prompt) went in
 * (minus r->n_shifted positions dropped after the first shift_keep). */
int gen_reply(const gen_params *p, const float *logits, gen_result *r);

#endif
