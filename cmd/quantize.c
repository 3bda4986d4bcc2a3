/*
 * quantize.c - ruvllm quantize: convert model weights to a quantized GGUF
 *
 * Not implemented yet: the command reports so and exits 1. issue 6, offline tools replaces
 * this file with the real command.
 */
#include "cli.h"


static rvl_opt opts[] = {

    OPT_END
};

rvl_cmd cmd_quantize_desc = {
    .synopsis = "IN OUT TYPE [options]",
    .description = "Convert a GGUF or Hugging Face model to a GGUF file with quantized weights.",
    .opts = opts,
    .pos_compl = COMPL_FILE,
    .min_pos = 0,
    .max_pos = -1,
    .issue = "issue 6, offline tools",
};
