/*
 * run_batch.h - ruvllm run --batch: many prompts through the scheduler
 * (cmd/run_batch.c), with run's options as every line's defaults.
 */
#ifndef RVL_RUN_BATCH_H
#define RVL_RUN_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "ruvllm.h"

typedef struct {
    const char *src;               /* --batch FILE, or "-" for standard input */
    const char *model_path;        /* resolved */
    double expert_budget;          /* MiB; 0: the library's */
    rvl_ctx_params cp;             /* per sequence: -c, -t, KV and RoPE options, --backend */
    rvl_sampler_params sp;         /* --temp ... ; sp.seed is --seed's when seed_given */
    bool seed_given;               /* else a random seed per line */
    long long max_tokens;          /* -n (-1: no limit) */
    const char *const *stops;      /* --stop, NULL-terminated */
    bool ignore_eos, chat, special, no_bos, show_reasoning, stats, verbose, unordered;
    const char *system, *chat_template, *reasoning, *effort;
    uint32_t parallel;             /* --parallel */
} run_batch_opts;

/* The exit status: 0, 1 when a line failed or on a runtime error, 130
 * when interrupted. */
int run_batch(const char *cmd, const run_batch_opts *o);

#endif
