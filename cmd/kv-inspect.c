/*
 * kv-inspect.c - ruvllm kv-inspect: look inside saved KV-cache and session files
 *
 * Not implemented yet: the command reports so and exits 1. issue 5, attention and the KV cache replaces
 * this file with the real command.
 */
#include "cli.h"

static const char *model;

static rvl_opt opts[] = {
    OPT_MODEL(model),
    OPT_END
};

rvl_cmd cmd_kv_inspect_desc = {
    .synopsis = "FILE [-m MODEL] [--json] [--diff FILE2]",
    .description = "Show the header, model fingerprint, pages, formats, compression and checksums of a saved KV-cache or session file.",
    .opts = opts,
    .pos_compl = COMPL_FILE,
    .min_pos = 0,
    .max_pos = -1,
    .issue = "issue 5, attention and the KV cache",
};
