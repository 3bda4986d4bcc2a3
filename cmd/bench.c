/*
 * bench.c - ruvllm bench: benchmark kernels, model speed and perplexity
 *
 * Not implemented yet: the command reports so and exits 1. issues 3 and 4, kernels and inference replaces
 * this file with the real command.
 */
#include "cli.h"

static const char *model;

static rvl_opt opts[] = {
    OPT_MODEL(model),
    OPT_END
};

rvl_cmd cmd_bench_desc = {
    .synopsis = "kernels|model|ppl [options]",
    .description = "Benchmark kernels against the machine's measured memory bandwidth, model prompt and generation speed, and perplexity.",
    .opts = opts,
    .pos_compl = COMPL_FILE,
    .min_pos = 0,
    .max_pos = -1,
    .issue = "issues 3 and 4, kernels and inference",
};
