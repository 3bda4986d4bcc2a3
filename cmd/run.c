/*
 * run.c - ruvllm run: generate text from a prompt, for shell pipelines
 *
 * Not implemented yet: the command reports so and exits 1. issue 4, real inference on the CPU replaces
 * this file with the real command.
 */
#include "cli.h"

static const char *model;

static rvl_opt opts[] = {
    OPT_MODEL(model),
    OPT_END
};

rvl_cmd cmd_run_desc = {
    .synopsis = "[-m MODEL] [options] [PROMPT...]",
    .description = "Generate a continuation of PROMPT (from the arguments, -f FILE or standard input) and print only the generated text on standard output.",
    .opts = opts,
    .pos_compl = COMPL_FILE,
    .min_pos = 0,
    .max_pos = -1,
    .issue = "issue 4, real inference on the CPU",
};
