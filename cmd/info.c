/*
 * info.c - ruvllm info: what is inside a model file.
 *
 * Metadata (long arrays and strings abbreviated unless --all), the tensor
 * table and totals, as text or JSON. Works on GGUF files and safetensors
 * files or directories; everything comes from lib/'s rvl_file.
 */
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ruvllm_tools.h"

#define ARRAY_PREVIEW 8
#define STRING_PREVIEW 72

static bool opt_all, opt_json, opt_no_tensors, opt_no_meta;

static rvl_opt opts[] = {
    {OPT_FLAG, 'a', "all", NULL, "print arrays and long strings in full", NULL, &opt_all, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 'j', "json", NULL, "print one JSON document (an array when several files are given)", NULL, &opt_json, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "no-tensors", NULL, "leave out the tensor table", NULL, &opt_no_tensors, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "no-metadata", NULL, "leave out the metadata", NULL, &opt_no_meta, 0, 0, NULL, COMPL_NONE},
    OPT_END
};

/* ====================================================================
 * Text output
 * ==================================================================== */

/* Print a string for humans: quoted, escapes for control characters. */
static void put_quoted(FILE *out, const char *s, uint64_t n, uint64_t limit)
{
    uint64_t m = n > limit ? limit : n;
    fputc('"', out);
    for (uint64_t i = 0; i < m; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", out);
        else if (c == '\t')
            fputs("\\t", out);
        else if (c == '"')
            fputs("\\\"", out);
        else if (c == '\\')
            fputs("\\\\", out);
        else if (c < 0x20 || c == 0x7f)
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
    if (m < n)
        fprintf(out, "... (%" PRIu64 " bytes)", n);
}

static void put_scalar(FILE *out, uint32_t type, const rvl_kv *kv, uint64_t i)
{
    switch (type) {
    case RVL_GGUF_F32:
    case RVL_GGUF_F64:
        fprintf(out, "%.9g", rvl_kv_arr_f64(kv, i));
        break;
    case RVL_GGUF_BOOL:
        fputs(rvl_kv_arr_i64(kv, i) ? "true" : "false", out);
        break;
    case RVL_GGUF_U64: {
        uint64_t v;
        memcpy(&v, (const char *)kv->data + i * 8, 8);
        fprintf(out, "%" PRIu64, v);
        break;
    }
    default:
        fprintf(out, "%" PRId64, rvl_kv_arr_i64(kv, i));
    }
}

static void print_kv_text(FILE *out, const rvl_kv *kv)
{
    char type[48];
    uint64_t limit = opt_all ? UINT64_MAX : STRING_PREVIEW;

    if (kv->type == RVL_GGUF_ARRAY)
        snprintf(type, sizeof type, "[%s; %" PRIu64 "]", rvl_gguf_vtype_name(kv->arr_type), kv->n);
    else
        snprintf(type, sizeof type, "%s", rvl_gguf_vtype_name(kv->type));
    fprintf(out, "  %-44.*s %-16s ", (int)(kv->key.len > 200 ? 200 : kv->key.len), kv->key.ptr, type);

    if (kv->type == RVL_GGUF_STRING) {
        put_quoted(out, kv->strs[0].ptr, kv->strs[0].len, limit);
    } else if (kv->type == RVL_GGUF_ARRAY) {
        uint64_t m = opt_all ? kv->n : (kv->n > ARRAY_PREVIEW ? ARRAY_PREVIEW : kv->n);
        fputc('[', out);
        for (uint64_t i = 0; i < m; i++) {
            if (i)
                fputs(", ", out);
            if (kv->arr_type == RVL_GGUF_STRING)
                put_quoted(out, kv->strs[i].ptr, kv->strs[i].len, limit);
            else
                put_scalar(out, kv->arr_type, kv, i);
        }
        if (m < kv->n)
            fprintf(out, ", ... %" PRIu64 " more", kv->n - m);
        fputc(']', out);
    } else {
        put_scalar(out, kv->type, kv, 0);
    }
    fputc('\n', out);
}

static void human_bytes(char *buf, size_t cap, double b)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) {
        b /= 1024;
        i++;
    }
    snprintf(buf, cap, i ? "%.2f %s" : "%.0f %s", b, u[i]);
}

typedef struct {
    uint64_t tensors, elements, bytes;
} type_total;

static void shape_str(const rvl_file *f, const rvl_tensor_info *t, char *buf, size_t cap)
{
    size_t off = 0;
    buf[0] = 0;
    for (uint32_t d = 0; d < t->n_dims && off < cap; d++) {
        /* GGUF shows ne order (as gguf-py); safetensors its own order */
        uint32_t k = rvl_file_fmt(f) == RVL_FMT_GGUF ? d : t->n_dims - 1 - d;
        off += (size_t)snprintf(buf + off, cap - off, "%s%" PRIu64, d ? " x " : "", t->ne[k]);
    }
    if (t->n_dims == 0)
        snprintf(buf, cap, "scalar");
}

static const char *type_name(uint32_t type)
{
    const rvl_type_info *ti = rvl_type_get(type);
    return ti ? ti->name : "?";
}

static void print_summary_text(FILE *out, const rvl_file *f);

static void print_text(const rvl_file *f)
{
    FILE *out = stdout;
    char sz[32], sz2[32];
    uint64_t nt = rvl_file_n_tensors(f);

    human_bytes(sz, sizeof sz, (double)rvl_file_size(f));
    fprintf(out, "file: %s\n", rvl_file_path(f));
    if (rvl_file_fmt(f) == RVL_FMT_GGUF)
        fprintf(out, "format: GGUF v%u, %s (%" PRIu64 " bytes), alignment %" PRIu64
                     ", tensor data at offset %" PRIu64 "\n",
                rvl_file_version(f), sz, rvl_file_size(f), rvl_file_alignment(f),
                rvl_file_data_offset(f));
    else
        fprintf(out, "format: safetensors, %s (%" PRIu64 " bytes)\n", sz, rvl_file_size(f));

    if (!opt_no_meta) {
        fprintf(out, "\nmetadata: %" PRIu64 " keys\n", rvl_file_n_kv(f));
        for (uint64_t i = 0; i < rvl_file_n_kv(f); i++)
            print_kv_text(out, rvl_file_kv(f, i));
    }

    type_total totals[RVL_TYPE_GGML_COUNT + 2] = {{0}};
    uint64_t all_el = 0, all_b = 0;
    if (!opt_no_tensors)
        fprintf(out, "\ntensors: %" PRIu64 "\n  %5s  %-36s %-7s %-22s %12s %12s %12s\n", nt, "#",
                "name", "type", "shape", "elements", "bytes", "offset");
    for (uint64_t i = 0; i < nt; i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        char shape[96];
        shape_str(f, t, shape, sizeof shape);
        if (!opt_no_tensors)
            fprintf(out, "  %5" PRIu64 "  %-36.*s %-7s %-22s %12" PRIu64 " %12" PRIu64 " %12" PRIu64 "\n", i,
                    (int)(t->name.len > 200 ? 200 : t->name.len), t->name.ptr, type_name(t->type), shape,
                    t->n_elements, t->nbytes, t->offset);
        uint32_t k = t->type < RVL_TYPE_GGML_COUNT ? t->type
                     : t->type == RVL_TYPE_U8 ? RVL_TYPE_GGML_COUNT : RVL_TYPE_GGML_COUNT + 1;
        totals[k].tensors++;
        totals[k].elements += t->n_elements;
        totals[k].bytes += t->nbytes;
        all_el += t->n_elements;
        all_b += t->nbytes;
    }
    human_bytes(sz2, sizeof sz2, (double)all_b);
    fprintf(out, "\ntotals: %" PRIu64 " tensors, %" PRIu64 " elements (%.2f M), %s of tensor data, "
                 "%.2f bits per weight\n",
            nt, all_el, (double)all_el / 1e6, sz2, all_el ? 8.0 * (double)all_b / (double)all_el : 0.0);
    for (uint32_t k = 0; k < RVL_TYPE_GGML_COUNT + 2; k++) {
        if (!totals[k].tensors)
            continue;
        uint32_t type = k < RVL_TYPE_GGML_COUNT ? k : k == RVL_TYPE_GGML_COUNT ? RVL_TYPE_U8 : RVL_TYPE_BOOL;
        human_bytes(sz2, sizeof sz2, (double)totals[k].bytes);
        fprintf(out, "  %-7s %5" PRIu64 " tensors %14" PRIu64 " elements %12s\n", type_name(type),
                totals[k].tensors, totals[k].elements, sz2);
    }
    print_summary_text(out, f);
}

/* Experts, active parameters and MLA's cache (rvl_convert_summary). */
static void print_summary_text(FILE *out, const rvl_file *f)
{
    rvl_model_summary s;
    rvl_convert_summary(f, &s);
    if (s.n_expert) {
        fprintf(out, "\nexperts: %u per layer, %u used per token, %u shared, %u leading dense layer%s\n",
                s.n_expert, s.n_expert_used, s.n_expert_shared, s.n_dense_lead, s.n_dense_lead == 1 ? "" : "s");
        fprintf(out, "  expert parameters          %14" PRIu64 " (%.1f%% of %" PRIu64 ")\n", s.expert_params,
                s.params ? 100.0 * (double)s.expert_params / (double)s.params : 0.0, s.params);
        fprintf(out, "  shared expert parameters   %14" PRIu64 "\n", s.shared_params);
        fprintf(out, "  active parameters a token  %14" PRIu64 " (%.1f%%)\n", s.active_params,
                s.params ? 100.0 * (double)s.active_params / (double)s.params : 0.0);
    }
    if (s.mla) {
        fprintf(out, "\nMLA: q_lora_rank %u%s, kv_lora_rank %u, rope dimensions %u; per head: key %u, "
                     "value %u\n", s.q_lora_rank, s.q_lora_rank ? "" : " (plain query projection)",
                s.kv_lora_rank, s.rope_dim, s.key_length_mla, s.value_length_mla);
        fprintf(out, "  KV cache a token (f16, %u layers): latent %" PRIu64 " bytes, per head %" PRIu64
                     " bytes (%.2fx)\n", s.n_layer, s.kv_bytes_latent, s.kv_bytes_per_head,
                s.kv_bytes_latent ? (double)s.kv_bytes_per_head / (double)s.kv_bytes_latent : 0.0);
    }
}

static void print_summary_json(rvl_jw *w, const rvl_file *f)
{
    rvl_model_summary s;
    rvl_convert_summary(f, &s);
    if (s.n_expert) {
        rvl_jw_key(w, "moe");
        rvl_jw_obj(w);
        rvl_jw_key(w, "n_expert");
        rvl_jw_u64(w, s.n_expert);
        rvl_jw_key(w, "n_expert_used");
        rvl_jw_u64(w, s.n_expert_used);
        rvl_jw_key(w, "n_expert_shared");
        rvl_jw_u64(w, s.n_expert_shared);
        rvl_jw_key(w, "n_dense_lead");
        rvl_jw_u64(w, s.n_dense_lead);
        rvl_jw_key(w, "params");
        rvl_jw_u64(w, s.params);
        rvl_jw_key(w, "expert_params");
        rvl_jw_u64(w, s.expert_params);
        rvl_jw_key(w, "shared_params");
        rvl_jw_u64(w, s.shared_params);
        rvl_jw_key(w, "active_params");
        rvl_jw_u64(w, s.active_params);
        rvl_jw_obj_end(w);
    }
    if (s.mla) {
        rvl_jw_key(w, "mla");
        rvl_jw_obj(w);
        rvl_jw_key(w, "q_lora_rank");
        rvl_jw_u64(w, s.q_lora_rank);
        rvl_jw_key(w, "kv_lora_rank");
        rvl_jw_u64(w, s.kv_lora_rank);
        rvl_jw_key(w, "rope_dim");
        rvl_jw_u64(w, s.rope_dim);
        rvl_jw_key(w, "key_length_mla");
        rvl_jw_u64(w, s.key_length_mla);
        rvl_jw_key(w, "value_length_mla");
        rvl_jw_u64(w, s.value_length_mla);
        rvl_jw_key(w, "kv_bytes_latent");
        rvl_jw_u64(w, s.kv_bytes_latent);
        rvl_jw_key(w, "kv_bytes_per_head");
        rvl_jw_u64(w, s.kv_bytes_per_head);
        rvl_jw_obj_end(w);
    }
}

/* ====================================================================
 * JSON output
 * ==================================================================== */

static void json_scalar(rvl_jw *w, uint32_t type, const rvl_kv *kv, uint64_t i)
{
    switch (type) {
    case RVL_GGUF_F32: {
        float v;
        memcpy(&v, (const char *)kv->data + i * 4, 4);
        rvl_jw_f32(w, v);
        break;
    }
    case RVL_GGUF_F64:
        rvl_jw_f64(w, rvl_kv_arr_f64(kv, i));
        break;
    case RVL_GGUF_BOOL:
        rvl_jw_bool(w, rvl_kv_arr_i64(kv, i) != 0);
        break;
    case RVL_GGUF_U64: {
        uint64_t v;
        memcpy(&v, (const char *)kv->data + i * 8, 8);
        rvl_jw_u64(w, v);
        break;
    }
    default:
        rvl_jw_i64(w, rvl_kv_arr_i64(kv, i));
    }
}

static void json_kv(rvl_jw *w, const rvl_kv *kv)
{
    rvl_jw_obj(w);
    rvl_jw_key(w, "key");
    rvl_jw_strn(w, kv->key.ptr, kv->key.len);
    rvl_jw_key(w, "type");
    rvl_jw_str(w, rvl_gguf_vtype_name(kv->type));
    if (kv->type == RVL_GGUF_ARRAY) {
        uint64_t m = opt_all ? kv->n : (kv->n > ARRAY_PREVIEW ? ARRAY_PREVIEW : kv->n);
        rvl_jw_key(w, "elem_type");
        rvl_jw_str(w, rvl_gguf_vtype_name(kv->arr_type));
        rvl_jw_key(w, "count");
        rvl_jw_u64(w, kv->n);
        if (m < kv->n) {
            rvl_jw_key(w, "truncated");
            rvl_jw_bool(w, true);
        }
        rvl_jw_key(w, "value");
        rvl_jw_arr(w);
        for (uint64_t i = 0; i < m; i++) {
            if (kv->arr_type == RVL_GGUF_STRING)
                rvl_jw_strn(w, kv->strs[i].ptr, kv->strs[i].len);
            else
                json_scalar(w, kv->arr_type, kv, i);
        }
        rvl_jw_arr_end(w);
    } else if (kv->type == RVL_GGUF_STRING) {
        rvl_jw_key(w, "value");
        rvl_jw_strn(w, kv->strs[0].ptr, kv->strs[0].len);
    } else {
        rvl_jw_key(w, "value");
        json_scalar(w, kv->type, kv, 0);
    }
    rvl_jw_obj_end(w);
}

static void print_json(rvl_jw *w, const rvl_file *f)
{
    bool gguf = rvl_file_fmt(f) == RVL_FMT_GGUF;
    uint64_t nt = rvl_file_n_tensors(f), all_el = 0, all_b = 0;

    rvl_jw_obj(w);
    rvl_jw_key(w, "file");
    rvl_jw_str(w, rvl_file_path(f));
    rvl_jw_key(w, "format");
    rvl_jw_str(w, gguf ? "gguf" : "safetensors");
    if (gguf) {
        rvl_jw_key(w, "version");
        rvl_jw_u64(w, rvl_file_version(f));
        rvl_jw_key(w, "alignment");
        rvl_jw_u64(w, rvl_file_alignment(f));
        rvl_jw_key(w, "data_offset");
        rvl_jw_u64(w, rvl_file_data_offset(f));
    }
    rvl_jw_key(w, "size");
    rvl_jw_u64(w, rvl_file_size(f));
    if (!opt_no_meta) {
        rvl_jw_key(w, "metadata");
        rvl_jw_arr(w);
        for (uint64_t i = 0; i < rvl_file_n_kv(f); i++)
            json_kv(w, rvl_file_kv(f, i));
        rvl_jw_arr_end(w);
    }
    if (!opt_no_tensors) {
        rvl_jw_key(w, "tensors");
        rvl_jw_arr(w);
    }
    for (uint64_t i = 0; i < nt; i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        all_el += t->n_elements;
        all_b += t->nbytes;
        if (opt_no_tensors)
            continue;
        rvl_jw_obj(w);
        rvl_jw_key(w, "name");
        rvl_jw_strn(w, t->name.ptr, t->name.len);
        rvl_jw_key(w, "type");
        rvl_jw_str(w, type_name(t->type));
        rvl_jw_key(w, "type_id");
        rvl_jw_u64(w, t->type);
        rvl_jw_key(w, "shape");
        rvl_jw_arr(w);
        for (uint32_t d = 0; d < t->n_dims; d++)
            rvl_jw_u64(w, t->ne[gguf ? d : t->n_dims - 1 - d]);
        rvl_jw_arr_end(w);
        rvl_jw_key(w, "n_elements");
        rvl_jw_u64(w, t->n_elements);
        rvl_jw_key(w, "bytes");
        rvl_jw_u64(w, t->nbytes);
        rvl_jw_key(w, "offset");
        rvl_jw_u64(w, t->offset);
        if (!gguf) {
            rvl_jw_key(w, "shard");
            rvl_jw_u64(w, t->shard);
        }
        rvl_jw_obj_end(w);
    }
    if (!opt_no_tensors)
        rvl_jw_arr_end(w);
    rvl_jw_key(w, "totals");
    rvl_jw_obj(w);
    rvl_jw_key(w, "tensors");
    rvl_jw_u64(w, nt);
    rvl_jw_key(w, "elements");
    rvl_jw_u64(w, all_el);
    rvl_jw_key(w, "bytes");
    rvl_jw_u64(w, all_b);
    rvl_jw_key(w, "bits_per_weight");
    rvl_jw_f64(w, all_el ? 8.0 * (double)all_b / (double)all_el : 0.0);
    rvl_jw_obj_end(w);
    print_summary_json(w, f);
    rvl_jw_obj_end(w);
}

static int info_main(rvl_cmd *cmd, int argc, char **argv)
{
    rvl_jw w;
    int status = 0;

    rvl_jw_init(&w, stdout, true);
    if (opt_json && argc > 1)
        rvl_jw_arr(&w);
    for (int i = 0; i < argc; i++) {
        rvl_file *f;
        char named[4096];
        const char *path = argv[i];
        /* not a path: a model of the store by name (ruvllm list) */
        if (access(path, F_OK) != 0 && rvl_model_path(path, named, sizeof named) == 0)
            path = named;
        int rc = rvl_file_open(&f, path);
        if (rc < 0) {
            status = cli_fail(cmd->name, rc);
            continue;
        }
        if (opt_json)
            print_json(&w, f);
        else {
            if (i)
                fputc('\n', stdout);
            print_text(f);
        }
        rvl_file_close(f);
        if (rvl_interrupted()) {
            status = EXIT_INTERRUPTED;
            break;
        }
    }
    if (opt_json && argc > 1)
        rvl_jw_arr_end(&w);
    if (fflush(stdout) != 0 && status == 0) {
        cli_err(cmd->name, "writing to standard output failed");
        status = EXIT_RUNTIME;
    }
    return status;
}

rvl_cmd cmd_info_desc = {
    .synopsis = "[options] FILE...",
    .description =
        "Show the metadata, the tensor table and the totals (elements, bytes, bits per weight, "
        "per type) of each model FILE. A FILE is a GGUF file (versions 2 and 3), a .safetensors "
        "file, a model.safetensors.index.json, or a Hugging Face model directory holding either.\n"
        "\n"
        "Arrays longer than 8 elements and strings longer than 72 bytes are abbreviated unless "
        "--all is given. Shapes are listed as GGUF stores them (innermost dimension first) for "
        "GGUF files and in PyTorch order for safetensors. Offsets are absolute byte offsets in "
        "the file (the shard file for sharded safetensors).\n"
        "\n"
        "With --json the output is one JSON object per file with the keys file, format, "
        "version, alignment, data_offset (GGUF), size, metadata (a list of {key, type, value}; "
        "arrays add elem_type, count and truncated), tensors (name, type, type_id, shape, "
        "n_elements, bytes, offset) and totals. Several files give a JSON array.\n"
        "\n"
        "A mixture of experts adds its experts: how many a layer has, how many a token uses, the "
        "shared ones and the leading dense layers, the parameters (tensor elements) of the routed "
        "experts (ffn_*_exps) and of the shared ones (ffn_*_shexp), and the parameters a token "
        "computes with: all others plus n_expert_used / n_expert of the routed experts' (JSON: moe "
        "with n_expert, n_expert_used, n_expert_shared, n_dense_lead, params, expert_params, "
        "shared_params, active_params). Multi-head latent attention (DeepSeek) adds its ranks and "
        "widths and the KV cache a token takes in f16 over all layers: the latent one (kv_lora_rank "
        "+ rope dimensions a layer, as llama.cpp caches it) against a cache of every head's keys and "
        "values (JSON: mla with q_lora_rank, kv_lora_rank, rope_dim, key_length_mla, "
        "value_length_mla, kv_bytes_latent, kv_bytes_per_head).",
    .examples = "ruvllm info model.gguf\tmetadata and tensors of a GGUF file\n"
                "ruvllm info --json --all model.gguf | jq '.metadata[].key'\tevery metadata key\n"
                "ruvllm info ~/models/SmolLM2-135M-Instruct/\ta Hugging Face directory",
    .opts = opts,
    .pos_compl = COMPL_FILE,
    .min_pos = 1,
    .max_pos = -1,
    .main = info_main,
};
