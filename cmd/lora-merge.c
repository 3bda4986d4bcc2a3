/*
 * lora-merge.c - ruvllm lora-merge: merge LoRA adapters into base weights
 *
 * Not implemented yet: the command reports so and exits 1. issue 6, offline tools replaces
 * this file with the real command.
 */
#include "cli.h"


static rvl_opt opts[] = {

    OPT_END
};

rvl_cmd cmd_lora_merge_desc = {
    .synopsis = "BASE ADAPTER[:SCALE]... -o OUT [--type TYPE]",
    .description = "Merge PEFT or GGUF LoRA adapters into the base weights and write a new GGUF file.",
    .opts = opts,
    .pos_compl = COMPL_FILE,
    .min_pos = 0,
    .max_pos = -1,
    .issue = "issue 6, offline tools",
};
