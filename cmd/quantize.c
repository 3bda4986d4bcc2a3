/*
 * quantize.c - ruvllm quantize: convert model weights to a quantized GGUF.
 *
 * Options, progress and the closing summary; the pipeline is lib/'s
 * rvl_quantize_gguf (lib/convert/quantize.c) and the per-tensor rules are
 * lib/convert/qmix.c.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "convert_progress.h"
#include "ruvllm_tools.h"

static const char *opt_imatrix, *opt_output_type, *opt_embd_type;
static long long opt_threads = 0;
static bool opt_pure, opt_leave_output, opt_requant, opt_dry_run, opt_stats, opt_quiet, opt_json;
static opt_list opt_tensor_type;

static rvl_opt opts[] = {
    {OPT_LIST, 0, "tensor-type", "REGEX=TYPE", "quantize tensors whose name matches REGEX to TYPE (repeatable; the first match wins)", NULL, &opt_tensor_type, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "pure", NULL, "no mix rules: every quantized tensor gets TYPE (or its fallback)", NULL, &opt_pure, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "leave-output", NULL, "leave output.weight as it is in IN", NULL, &opt_leave_output, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 0, "output-tensor-type", "TYPE", "type of output.weight", NULL, &opt_output_type, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 0, "token-embedding-type", "TYPE", "type of token_embd.weight", NULL, &opt_embd_type, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 0, "imatrix", "FILE", "importance matrix (llama.cpp's imatrix GGUF) for importance-weighted quantization", NULL, &opt_imatrix, 0, 0, NULL, COMPL_FILE},
    {OPT_FLAG, 0, "allow-requantize", NULL, "accept already quantized tensors in IN (loses quality)", NULL, &opt_requant, 0, 0, NULL, COMPL_NONE},
    {OPT_INT, 't', "threads", "N", "threads (0: one per CPU)", "0", &opt_threads, 0, 256, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "dry-run", NULL, "print the types and sizes without writing OUT (OUT may be left out)", NULL, &opt_dry_run, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "stats", NULL, "measure and print the RMS error of every quantized tensor", NULL, &opt_stats, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 'j', "json", NULL, "print the summary as one JSON object on standard output", NULL, &opt_json, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 'q', "quiet", NULL, "print no progress and no summary", NULL, &opt_quiet, 0, 0, NULL, COMPL_NONE},
    OPT_END
};

/* --output-tensor-type / --token-embedding-type: a tensor type by name
 * (lib/ refuses the ones it has no quantizer for, naming the tensor). */
static void type_arg(const char *cmd, const char *opt, const char *v, uint32_t *out)
{
    *out = UINT32_MAX;
    if (!v)
        return;
    int t = rvl_type_from_name(v);
    if (t < 0 || t == RVL_TYPE_Q8_1 || t == RVL_TYPE_Q8_K || t == RVL_TYPE_U8 || t == RVL_TYPE_BOOL)
        cli_usage(cmd, "%s %s: not a weight type", opt, v);
    *out = (uint32_t)t;
}

/* ---------------------------------------------------------------- summary */

typedef struct {
    uint32_t type;
    uint64_t n, bytes;
} type_count;

static size_t count_types(const rvl_quantize_report *r, type_count *tc, size_t cap)
{
    size_t nt = 0;
    for (uint64_t i = 0; i < r->n_tensors; i++) {
        size_t k = 0;
        while (k < nt && tc[k].type != r->tensors[i].type_out)
            k++;
        if (k == nt) {
            if (nt == cap)
                continue;
            tc[nt++] = (type_count){r->tensors[i].type_out, 0, 0};
        }
        tc[k].n++;
        tc[k].bytes += r->tensors[i].bytes_out;
    }
    return nt;
}

static const char *tn(uint32_t t)
{
    const rvl_type_info *ti = rvl_type_get(t);
    return ti ? ti->name : "?";
}

static void print_summary(const char *out, const char *mix, const rvl_quantize_report *r)
{
    type_count tc[64];
    size_t nt = count_types(r, tc, 64);
    char a[32], b[32];
    double el = r->n_elements ? (double)r->n_elements : 1;

    if (opt_stats) {
        fprintf(stderr, "%-36s %-7s %-7s %12s %12s %10s\n", "tensor", "from", "to", "RMSE",
                "RMS", "rel. err");
        for (uint64_t i = 0; i < r->n_tensors; i++) {
            const rvl_quantize_tensor_stat *s = &r->tensors[i];
            if (s->type_in == s->type_out)
                continue;
            fprintf(stderr, "%-36s %-7s %-7s %12.4g %12.4g %9.3f%%\n", s->name, tn(s->type_in),
                    tn(s->type_out), s->rmse, s->rms, s->rms > 0 ? 100 * s->rmse / s->rms : 0);
        }
    }
    if (opt_dry_run)
        fprintf(stderr, "ruvllm quantize: dry run (%s), nothing written\n", mix);
    else
        fprintf(stderr, "ruvllm quantize: wrote %s (%s) in %.1f s\n", out, mix, r->seconds);
    fprintf(stderr, "  tensors:");
    for (size_t k = 0; k < nt; k++) {
        cli_human_bytes(a, sizeof a, (double)tc[k].bytes);
        fprintf(stderr, "%s %s %" PRIu64 " (%s)", k ? "," : "", tn(tc[k].type), tc[k].n, a);
    }
    fputc('\n', stderr);
    cli_human_bytes(a, sizeof a, (double)r->bytes_in);
    cli_human_bytes(b, sizeof b, (double)r->bytes_out);
    fprintf(stderr, "  size:    %s (%.2f bpw) -> %s (%.2f bpw), %.1f%%", a,
            8.0 * (double)r->bytes_in / el, b, 8.0 * (double)r->bytes_out / el,
            r->bytes_in ? 100.0 * (double)r->bytes_out / (double)r->bytes_in : 0);
    if (r->file_bytes) {
        cli_human_bytes(a, sizeof a, (double)r->file_bytes);
        fprintf(stderr, "; file %s", a);
    }
    fputc('\n', stderr);
    if (opt_stats) {
        double se = 0, sx = 0;
        for (uint64_t i = 0; i < r->n_tensors; i++) {
            const rvl_quantize_tensor_stat *s = &r->tensors[i];
            se += s->rmse * s->rmse * (double)s->n_elements;
            sx += s->rms * s->rms * (double)s->n_elements;
        }
        fprintf(stderr, "  error:   RMSE %.4g over all weights, %.3f%% of their RMS\n",
                sqrt(se / el), sx > 0 ? 100 * sqrt(se / sx) : 0);
    }
    if (r->n_fallback)
        fprintf(stderr, "  fallback: %" PRIu64 " tensors have rows that are not whole blocks of "
                "the type the rules chose and got another (as llama-quantize does)\n", r->n_fallback);
    if (opt_imatrix && r->n_no_imatrix)
        fprintf(stderr, "  imatrix: no entry for %" PRIu64 " quantized tensors\n", r->n_no_imatrix);
}

static void print_json(const char *in, const char *out, const char *mix, const rvl_quantize_report *r)
{
    rvl_jw w;
    rvl_jw_init(&w, stdout, true);
    rvl_jw_obj(&w);
    rvl_jw_key(&w, "input");
    rvl_jw_str(&w, in);
    rvl_jw_key(&w, "output");
    if (opt_dry_run) rvl_jw_null(&w); else rvl_jw_str(&w, out);
    rvl_jw_key(&w, "type");
    rvl_jw_str(&w, mix);
    rvl_jw_key(&w, "seconds");
    rvl_jw_f64(&w, r->seconds);
    rvl_jw_key(&w, "elements");
    rvl_jw_u64(&w, r->n_elements);
    rvl_jw_key(&w, "bytes_in");
    rvl_jw_u64(&w, r->bytes_in);
    rvl_jw_key(&w, "bytes_out");
    rvl_jw_u64(&w, r->bytes_out);
    rvl_jw_key(&w, "file_bytes");
    rvl_jw_u64(&w, r->file_bytes);
    rvl_jw_key(&w, "fallback");
    rvl_jw_u64(&w, r->n_fallback);
    rvl_jw_key(&w, "tensors");
    rvl_jw_arr(&w);
    for (uint64_t i = 0; i < r->n_tensors; i++) {
        const rvl_quantize_tensor_stat *s = &r->tensors[i];
        rvl_jw_obj(&w);
        rvl_jw_key(&w, "name");
        rvl_jw_str(&w, s->name);
        rvl_jw_key(&w, "from");
        rvl_jw_str(&w, tn(s->type_in));
        rvl_jw_key(&w, "to");
        rvl_jw_str(&w, tn(s->type_out));
        rvl_jw_key(&w, "elements");
        rvl_jw_u64(&w, s->n_elements);
        rvl_jw_key(&w, "bytes_in");
        rvl_jw_u64(&w, s->bytes_in);
        rvl_jw_key(&w, "bytes_out");
        rvl_jw_u64(&w, s->bytes_out);
        if (opt_stats && s->type_in != s->type_out) {
            rvl_jw_key(&w, "rmse");
            rvl_jw_f64(&w, s->rmse);
            rvl_jw_key(&w, "rms");
            rvl_jw_f64(&w, s->rms);
        }
        rvl_jw_obj_end(&w);
    }
    rvl_jw_arr_end(&w);
    rvl_jw_obj_end(&w);
    fputc('\n', stdout);
}

/* ---------------------------------------------------------------- main */

static void list_types(FILE *out)
{
    const rvl_qmix *m;
    fprintf(out, "types:\n");
    for (size_t i = 0; (m = rvl_qmix_at(i)) != NULL; i++)
        fprintf(out, "  %-13s %s\n", m->name, m->desc);
}

static int quantize_main(rvl_cmd *cmd, int argc, char **argv)
{
    const char *in, *out = NULL, *mix;
    if (argc == 3) {
        in = argv[0];
        out = argv[1];
        mix = argv[2];
    } else if (argc == 2 && opt_dry_run) {
        in = argv[0];
        mix = argv[1];
    } else {
        cli_usage(cmd->name, opt_dry_run ? "expected IN [OUT] TYPE" : "expected IN OUT TYPE");
    }
    const rvl_qmix *m = rvl_qmix_find(mix);
    if (!m) {
        const char *names[64];
        const rvl_qmix *x;
        size_t k = 0;
        for (size_t i = 0; (x = rvl_qmix_at(i)) != NULL && k < 63; i++)
            names[k++] = x->name;
        names[k] = NULL;
        const char *s = cli_suggest(mix, names);
        cli_err(cmd->name, "'%s' is not a quantization type%s%s%s", mix, s ? "; did you mean '" : "",
                s ? s : "", s ? "'?" : "");
        list_types(stderr);
        return EXIT_USAGE;
    }

    rvl_quantize_params p = {0};
    p.mix = m->name;
    p.n_threads = (int)opt_threads;
    p.pure = opt_pure;
    p.leave_output = opt_leave_output;
    p.allow_requantize = opt_requant;
    p.dry_run = opt_dry_run;
    p.stats = opt_stats;
    p.imatrix = opt_imatrix;
    p.overrides = opt_tensor_type.items;
    p.n_overrides = (size_t)opt_tensor_type.n;
    type_arg(cmd->name, "--output-tensor-type", opt_output_type, &p.output_type);
    type_arg(cmd->name, "--token-embedding-type", opt_embd_type, &p.embd_type);

    cli_convert_progress pr;
    cli_convert_progress_init(&pr, cmd->name, opt_quiet);
    p.progress = cli_convert_progress_cb;
    p.ud = &pr;

    rvl_quantize_report r;
    int rc = rvl_quantize_gguf(in, out, &p, &r);
    free(opt_tensor_type.items);
    if (rc < 0) {
        cli_convert_progress_clear(&pr);
        return cli_fail(cmd->name, rc);
    }
    if (opt_json)
        print_json(in, out, m->name, &r);
    if (!opt_quiet)
        print_summary(out, m->name, &r);
    rvl_quantize_report_free(&r);
    if (fflush(stdout) != 0) {
        cli_err(cmd->name, "writing to standard output failed");
        return EXIT_RUNTIME;
    }
    return 0;
}

rvl_cmd cmd_quantize_desc = {
    .synopsis = "[options] IN OUT TYPE",
    .description =
        "Quantize the weights of the model IN and write the GGUF file OUT. IN is a GGUF file "
        "(F32, F16 or BF16 weights; already quantized ones with --allow-requantize) or a "
        "Hugging Face model directory (config.json, one or sharded *.safetensors, "
        "tokenizer.json, tokenizer_config.json) of a Llama, Mistral or Qwen2 model with a "
        "byte-level or SentencePiece-style BPE vocabulary, which becomes complete GGUF metadata: hyper-parameters, "
        "vocabulary, merges, token types, special tokens, pre-tokenizer and chat template "
        "(it is imported into a temporary file next to OUT first). TYPE is one of llama.cpp's "
        "quantization mixes, by llama-quantize's names, with its per-tensor rules, so that the "
        "same input and TYPE give the same tensor types as llama-quantize: Q8_0, Q6_K, Q5_K_M, "
        "Q5_K_S, Q5_1, Q5_0, Q4_K_M, Q4_K_S, Q4_1, Q4_0, IQ4_NL, IQ4_XS, Q3_K_L, Q3_K_M, "
        "Q3_K_S, Q2_K, Q2_K_S (needs --imatrix), MXFP4_MOE (MoE expert tensors MXFP4, the rest Q8_0), "
        "F16, BF16, F32 (Q3_K, Q4_K, Q5_K: the _M "
        "mixes); or a ruvllm project format (RVL_I4S_G32/64/128, RVL_I4A_G32/64/128, "
        "RVL_I8_ROW, RVL_I8_G64/128, MLX_A4_G64, MLX_A8_G64), used for every matrix, which "
        "only ruvllm reads.\n"
        "\n"
        "The rules: 1-D tensors and norms are kept as they are; output.weight (or token_embd "
        "when the model ties them) gets Q6_K; the K-quant mixes give some attn_v, ffn_down and "
        "attn_output tensors more bits (Q4_K_M: Q6_K for the first and last eighth of the "
        "layers and every third one between); a tensor whose rows are not whole blocks of its "
        "type falls back (Q4_K to Q5_0, Q6_K to Q8_0, ..., then F16). --pure turns the rules "
        "off, --tensor-type and --output-tensor-type/--token-embedding-type set types by name. "
        "The legacy formats' bytes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) equal llama-quantize's for "
        "the same input.\n"
        "\n"
        "OUT is written to a temporary file and renamed into place when complete: after an "
        "error or Ctrl-C nothing is left at OUT. Progress goes to standard error (tensor i/N, "
        "MB/s, time left on a terminal; one line per tensor otherwise), then a summary: tensors "
        "per type, sizes and bits per weight before and after; --stats adds the RMS error of "
        "each quantized tensor.",
    .examples = "ruvllm quantize model.f16.gguf model.Q4_K_M.gguf Q4_K_M\tthe usual 4-bit mix\n"
                "ruvllm quantize --dry-run model.f16.gguf Q6_K\tsizes only\n"
                "ruvllm quantize ~/models/SmolLM2-135M-Instruct/ smollm2.Q8_0.gguf Q8_0\t"
                "from a Hugging Face directory\n"
                "ruvllm quantize --imatrix imatrix.gguf model.f16.gguf model.IQ4_XS.gguf IQ4_XS\t"
                "importance-weighted\n"
                "ruvllm quantize --tensor-type 'attn_(q|k)=q8_0' model.f16.gguf out.gguf Q4_0\t"
                "per-tensor override",
    .opts = opts,
    .pos_compl = COMPL_FILE,
    .min_pos = 2,
    .max_pos = 3,
    .main = quantize_main,
};
