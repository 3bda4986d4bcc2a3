/*
 * dequant.c - ruvllm dequant: convert model weights back to floating point
 *
 * Not implemented yet: the command reports so and exits 1. issue 6, offline tools replaces
 * this file with the real command.
 */
#include "cli.h"


static rvl_opt opts[] = {

    OPT_END
};

rvl_cmd cmd_dequant_desc = {
    .synopsis = "IN OUT [--type f32|f16|bf16] [--format gguf|safetensors]",
    .description = "Convert every tensor of a model to floating point, as GGUF or as a Hugging Face directory.",
    .opts = opts,
    .pos_compl = COMPL_FILE,
    .min_pos = 0,
    .max_pos = -1,
    .issue = "issue 6, offline tools",
};
