/*
 * lora-merge.c - ruvllm lora-merge: merge LoRA adapters into base weights.
 *
 * Options, progress and the closing summary; the work is lib/'s
 * rvl_lora_merge (lib/convert/lora_merge.c, adapters read by lib/engine/lora.c).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "convert_progress.h"
#include "ruvllm_tools.h"

static const char *opt_out, *opt_type;
static long long opt_threads = 0;
static bool opt_quiet, opt_json;

static rvl_opt opts[] = {
    {OPT_STRING, 'o', "output", "OUT", "the merged GGUF file to write (required)", NULL, &opt_out, 0, 0, NULL, COMPL_FILE},
    {OPT_STRING, 0, "type", "TYPE", "write the tensors as quantize TYPE would (F32, F16, Q8_0, Q4_K_M, ...; default: each tensor keeps its type)", NULL, &opt_type, 0, 0, NULL, COMPL_NONE},
    {OPT_INT, 't', "threads", "N", "threads (0: one per CPU)", "0", &opt_threads, 0, 256, NULL, COMPL_NONE},
    {OPT_FLAG, 'j', "json", NULL, "print the summary as one JSON object on standard output", NULL, &opt_json, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 'q', "quiet", NULL, "print no progress and no summary", NULL, &opt_quiet, 0, 0, NULL, COMPL_NONE},
    OPT_END
};

static const char *tn(uint32_t t)
{
    const rvl_type_info *ti = rvl_type_get(t);
    return ti ? ti->name : "?";
}

static void print_summary(const char *out, const rvl_lora_merge_report *r)
{
    const rvl_quantize_report *q = &r->q;
    char a[32], b[32];
    fprintf(stderr, "ruvllm lora-merge: wrote %s in %.1f s: %" PRIu64 " of %" PRIu64
            " tensors updated\n", out, q->seconds, r->n_merged, q->n_tensors);
    for (size_t i = 0; i < r->n_adapters; i++) {
        const rvl_lora_info *ad = &r->adapters[i];
        char rank[32];
        if (ad->rank_min == ad->rank_max)
            snprintf(rank, sizeof rank, "%u", ad->rank_min);
        else
            snprintf(rank, sizeof rank, "%u-%u", ad->rank_min, ad->rank_max);
        fprintf(stderr, "  adapter: %s (%s, r=%s, alpha=%g%s, scale %g, %" PRIu64 " tensors, %"
                PRIu64 " parameters)\n", ad->path, ad->form, rank, ad->alpha,
                ad->rslora ? ", rsLoRA" : "", (double)ad->scale, ad->n_targets, ad->n_params);
    }
    /* tensors per output type */
    uint32_t types[64];
    uint64_t cnt[64], bytes[64];
    size_t nt = 0;
    for (uint64_t i = 0; i < q->n_tensors; i++) {
        size_t k = 0;
        while (k < nt && types[k] != q->tensors[i].type_out)
            k++;
        if (k == nt) {
            if (nt == 64)
                continue;
            types[nt] = q->tensors[i].type_out;
            cnt[nt] = bytes[nt] = 0;
            nt++;
        }
        cnt[k]++;
        bytes[k] += q->tensors[i].bytes_out;
    }
    fprintf(stderr, "  tensors:");
    for (size_t k = 0; k < nt; k++) {
        cli_human_bytes(a, sizeof a, (double)bytes[k]);
        fprintf(stderr, "%s %s %" PRIu64 " (%s)", k ? "," : "", tn(types[k]), cnt[k], a);
    }
    fputc('\n', stderr);
    double el = q->n_elements ? (double)q->n_elements : 1;
    cli_human_bytes(a, sizeof a, (double)q->bytes_in);
    cli_human_bytes(b, sizeof b, (double)q->bytes_out);
    fprintf(stderr, "  size:    %s (%.2f bpw) -> %s (%.2f bpw)", a, 8.0 * (double)q->bytes_in / el,
            b, 8.0 * (double)q->bytes_out / el);
    if (q->file_bytes) {
        cli_human_bytes(a, sizeof a, (double)q->file_bytes);
        fprintf(stderr, "; file %s", a);
    }
    fputc('\n', stderr);
}

static void print_json(const char *base, const char *out, const rvl_lora_merge_report *r)
{
    const rvl_quantize_report *q = &r->q;
    rvl_jw w;
    rvl_jw_init(&w, stdout, true);
    rvl_jw_obj(&w);
    rvl_jw_key(&w, "base");
    rvl_jw_str(&w, base);
    rvl_jw_key(&w, "output");
    rvl_jw_str(&w, out);
    rvl_jw_key(&w, "type");
    rvl_jw_str(&w, opt_type);
    rvl_jw_key(&w, "seconds");
    rvl_jw_f64(&w, q->seconds);
    rvl_jw_key(&w, "file_bytes");
    rvl_jw_u64(&w, q->file_bytes);
    rvl_jw_key(&w, "tensors_updated");
    rvl_jw_u64(&w, r->n_merged);
    rvl_jw_key(&w, "adapters");
    rvl_jw_arr(&w);
    for (size_t i = 0; i < r->n_adapters; i++) {
        const rvl_lora_info *ad = &r->adapters[i];
        rvl_jw_obj(&w);
        rvl_jw_key(&w, "spec");
        rvl_jw_str(&w, ad->path);
        rvl_jw_key(&w, "form");
        rvl_jw_str(&w, ad->form);
        rvl_jw_key(&w, "rank_min");
        rvl_jw_u64(&w, ad->rank_min);
        rvl_jw_key(&w, "rank_max");
        rvl_jw_u64(&w, ad->rank_max);
        rvl_jw_key(&w, "alpha");
        rvl_jw_f64(&w, ad->alpha);
        rvl_jw_key(&w, "rslora");
        rvl_jw_bool(&w, ad->rslora);
        rvl_jw_key(&w, "scale");
        rvl_jw_f32(&w, ad->scale);
        rvl_jw_key(&w, "tensors");
        rvl_jw_u64(&w, ad->n_targets);
        rvl_jw_key(&w, "parameters");
        rvl_jw_u64(&w, ad->n_params);
        rvl_jw_obj_end(&w);
    }
    rvl_jw_arr_end(&w);
    rvl_jw_key(&w, "tensors");
    rvl_jw_arr(&w);
    for (uint64_t i = 0; i < q->n_tensors; i++) {
        const rvl_quantize_tensor_stat *s = &q->tensors[i];
        rvl_jw_obj(&w);
        rvl_jw_key(&w, "name");
        rvl_jw_str(&w, s->name);
        rvl_jw_key(&w, "from");
        rvl_jw_str(&w, tn(s->type_in));
        rvl_jw_key(&w, "to");
        rvl_jw_str(&w, tn(s->type_out));
        rvl_jw_key(&w, "bytes_out");
        rvl_jw_u64(&w, s->bytes_out);
        rvl_jw_obj_end(&w);
    }
    rvl_jw_arr_end(&w);
    rvl_jw_obj_end(&w);
    fputc('\n', stdout);
}

static int lora_merge_main(rvl_cmd *cmd, int argc, char **argv)
{
    if (!opt_out)
        cli_usage(cmd->name, "no output file: -o OUT is required");
    if (opt_type && !rvl_qmix_find(opt_type))
        cli_usage(cmd->name, "--type %s: not a type 'ruvllm quantize' knows", opt_type);

    rvl_lora_merge_params p = {0};
    p.type = opt_type;
    p.n_threads = (int)opt_threads;
    cli_convert_progress pr;
    cli_convert_progress_init(&pr, cmd->name, opt_quiet);
    p.progress = cli_convert_progress_cb;
    p.ud = &pr;

    rvl_lora_merge_report r;
    int rc = rvl_lora_merge(argv[0], (const char *const *)argv + 1, (size_t)argc - 1, opt_out, &p, &r);
    if (rc < 0) {
        cli_convert_progress_clear(&pr);
        return cli_fail(cmd->name, rc);
    }
    if (opt_json)
        print_json(argv[0], opt_out, &r);
    if (!opt_quiet)
        print_summary(opt_out, &r);
    rvl_lora_merge_report_free(&r);
    if (fflush(stdout) != 0) {
        cli_err(cmd->name, "writing to standard output failed");
        return EXIT_RUNTIME;
    }
    return 0;
}

rvl_cmd cmd_lora_merge_desc = {
    .synopsis = "[options] BASE ADAPTER[:SCALE]... -o OUT",
    .description =
        "Merge LoRA adapters into the weights of the GGUF model BASE and write the GGUF file "
        "OUT, which then runs without them. For each weight matrix W an adapter targets, "
        "W' = W + SCALE * alpha/r * B A (alpha/sqrt(r) with rsLoRA); several adapters add up. "
        "SCALE defaults to 1.\n"
        "\n"
        "An ADAPTER is a PEFT directory (adapter_config.json and adapter_model.safetensors, as "
        "peft's save_pretrained writes them: r, lora_alpha, use_rslora, target_modules) or a "
        "llama.cpp GGUF LoRA file (convert_lora_to_gguf.py: general.type adapter, "
        "adapter.lora.alpha, tensors <name>.lora_a and <name>.lora_b). PEFT's Hugging Face "
        "tensor names are mapped to GGUF names as 'ruvllm quantize' imports them, including the "
        "row order of llama's q_proj and k_proj. Refused with a message that names the feature: "
        "DoRA (use_dora), modules_to_save, embedding LoRA, trained biases, fan_in_fan_out, "
        "alpha_pattern, layer_replication. A target that is not in BASE, or whose shape does "
        "not match, is an error naming the tensor.\n"
        "\n"
        "Every updated tensor is dequantized to f32, merged in f32 and quantized again to its "
        "own type; --type writes all tensors as 'ruvllm quantize' would for that TYPE (F32 or "
        "F16 for an unquantized merge). Metadata is copied. OUT is written to a temporary file "
        "and renamed into place when complete: after an error or Ctrl-C nothing is left at OUT. "
        "Progress goes to standard error, then a summary: the adapters, tensors per type and "
        "sizes.",
    .examples = "ruvllm lora-merge model.gguf my-adapter/ -o merged.gguf\ta PEFT directory, types kept\n"
                "ruvllm lora-merge --type F16 model.gguf style.gguf:0.5 -o merged.f16.gguf\t"
                "a GGUF LoRA at half strength, F16 output\n"
                "ruvllm lora-merge model.gguf a/ b/:0.3 -o merged.gguf\ttwo adapters added",
    .opts = opts,
    .pos_compl = COMPL_FILE,
    .min_pos = 2,
    .max_pos = -1,
    .main = lora_merge_main,
};
