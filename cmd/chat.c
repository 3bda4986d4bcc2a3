/*
 * chat.c - ruvllm chat: chat with a model in the terminal
 *
 * Not implemented yet: the command reports so and exits 1. issue 8, interactive chat replaces
 * this file with the real command.
 */
#include "cli.h"

static const char *model;

static rvl_opt opts[] = {
    OPT_MODEL(model),
    OPT_END
};

rvl_cmd cmd_chat_desc = {
    .synopsis = "[-m MODEL] [--system TEXT] [--session FILE] [options]",
    .description = "Chat with a model in the terminal with its own chat template, streaming replies, readline editing and sessions.",
    .opts = opts,
    .pos_compl = COMPL_FILE,
    .min_pos = 0,
    .max_pos = -1,
    .issue = "issue 8, interactive chat",
};
