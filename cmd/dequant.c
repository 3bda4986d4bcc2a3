/*
 * dequant.c - ruvllm dequant: convert model weights back to floating point.
 *
 * Options, progress and the closing line; the conversion is lib/'s
 * rvl_dequant_gguf (lib/convert/dequant.c).
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "convert_progress.h"
#include "ruvllm_tools.h"

static const char *opt_type = "f16", *opt_format = "gguf";
static bool opt_quiet;

static rvl_opt opts[] = {
    {OPT_CHOICE, 0, "type", "TYPE", "float type of the weights (1-D tensors stay f32)", "f16", &opt_type, 0, 0, "f32|f16|bf16", COMPL_NONE},
    {OPT_CHOICE, 0, "format", "FMT", "output format", "gguf", &opt_format, 0, 0, "gguf|safetensors", COMPL_NONE},
    {OPT_FLAG, 'q', "quiet", NULL, "print no progress and no summary", NULL, &opt_quiet, 0, 0, NULL, COMPL_NONE},
    OPT_END
};

static int dequant_main(rvl_cmd *cmd, int argc, char **argv)
{
    const char *in = argv[0], *out = argv[1];
    if (argc != 2)
        cli_usage(cmd->name, "expected IN and OUT");
    bool hf = strcmp(opt_format, "safetensors") == 0;

    rvl_dequant_params p = {0};
    p.type = (uint32_t)rvl_type_from_name(opt_type);
    cli_convert_progress pr;
    cli_convert_progress_init(&pr, cmd->name, opt_quiet);
    p.progress = cli_convert_progress_cb;
    p.ud = &pr;

    int rc = hf ? rvl_dequant_hf(in, out, &p) : rvl_dequant_gguf(in, out, &p);
    if (rc < 0) {
        cli_convert_progress_clear(&pr);
        return cli_fail(cmd->name, rc);
    }
    if (!opt_quiet) {
        struct stat a, b;
        char sa[32] = "?", sb[32] = "?";
        if (stat(in, &a) == 0)
            cli_human_bytes(sa, sizeof sa, (double)a.st_size);
        char st[4200];
        snprintf(st, sizeof st, "%s/model.safetensors", out);
        if (stat(hf ? st : out, &b) == 0)
            cli_human_bytes(sb, sizeof sb, (double)b.st_size);
        fprintf(stderr, "ruvllm dequant: wrote %s (%s): %s -> %s in %.1f s\n", out, opt_type, sa,
                sb, rvl_bench_now() - pr.t0);
    }
    return 0;
}

rvl_cmd cmd_dequant_desc = {
    .synopsis = "[options] IN OUT",
    .description =
        "Convert every tensor of the model IN (a GGUF file, or a Hugging Face directory as "
        "ruvllm quantize reads them) to floating point and write the GGUF file OUT. Matrices (tensors of two or more dimensions) become --type; 1-D tensors (norms, "
        "biases) are written as f32, as llama.cpp keeps them; integer tensors are copied. "
        "Values are exactly what the format's dequantization gives (the f32 output equals "
        "gguf-py's dequantize), rounded to nearest-even for f16 and bf16. The metadata is "
        "copied in order, with general.file_type updated, so OUT runs wherever IN ran and can "
        "be quantized again (ruvllm quantize, llama-quantize).\n"
        "\n"
        "With --format safetensors OUT is a Hugging Face model directory that transformers "
        "loads: config.json, model.safetensors (matrices in --type, 1-D tensors in f32, llama's "
        "Q/K rows back in Hugging Face's order), tokenizer.json and tokenizer_config.json "
        "(special tokens, chat template). Architectures llama and qwen2 with a byte-level BPE "
        "vocabulary (pre-tokenizers gpt-2, smollm/starcoder, llama-bpe, qwen2) or a "
        "SentencePiece BPE one (Llama 2, Mistral, TinyLlama). OUT must not "
        "exist or be an empty directory.\n"
        "\n"
        "OUT is written to a temporary file (directory) and renamed into place when complete: "
        "after an error or Ctrl-C nothing is left at OUT. OUT may not be IN. Progress goes to "
        "standard error (one line per tensor when it is not a terminal).",
    .examples = "ruvllm dequant model.Q4_1.gguf model.f16.gguf\tweights to f16\n"
                "ruvllm dequant --type f32 model.Q4_1.gguf model.f32.gguf\tweights to f32\n"
                "ruvllm dequant --format safetensors model.Q4_1.gguf model-hf/\ta Hugging Face directory",
    .opts = opts,
    .pos_compl = COMPL_FILE,
    .min_pos = 2,
    .max_pos = 2,
    .main = dequant_main,
};
