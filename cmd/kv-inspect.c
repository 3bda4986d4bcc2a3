/*
 * kv-inspect.c - ruvllm kv-inspect: look inside saved KV-cache and session
 * files.
 *
 * Everything is read by lib/tools/kv_inspect.c (rvl_kv_inspect_*): the header, the
 * block walk with its checksums and problems, per-head statistics and the
 * diff of two files. This file adds the model check (-m: fingerprint and
 * the cached text) and prints, as text or one JSON document.
 *
 * Exit status: 0 when the file is intact (and matches MODEL, with -m);
 * 1 when anything is damaged or missing, or MODEL does not match.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ruvllm_tools.h"

static const char *opt_model, *opt_diff;
static bool opt_json, opt_no_heads;
static double opt_outlier = 4;

static rvl_opt opts[] = {
    {OPT_STRING, 'm', "model", "MODEL", "check the file against this model (a file or a name ruvllm list shows: fingerprint, geometry) and show the cached text", NULL, &opt_model, 0, 0, NULL, COMPL_FILE},
    {OPT_FLAG, 'j', "json", NULL, "print one JSON document", NULL, &opt_json, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 0, "diff", "FILE2", "show where FILE2 diverges from FILE instead", NULL, &opt_diff, 0, 0, NULL, COMPL_FILE},
    {OPT_FLAG, 0, "no-heads", NULL, "leave out the per-head statistics", NULL, &opt_no_heads, 0, 0, NULL, COMPL_NONE},
    {OPT_FLOAT, 0, "outlier-factor", "K", "a channel is an outlier when its absmax exceeds K times the median channel absmax of its head", "4", &opt_outlier, 1, 1e6, NULL, COMPL_NONE},
    OPT_END
};

static const char *kind_name(uint32_t kind)
{
    switch (kind) {
    case RVL_KVI_BLK_TOKENS: return "tokens";
    case RVL_KVI_BLK_EXTRA: return "extra";
    case RVL_KVI_BLK_KV: return "kv";
    case RVL_KVI_BLK_CENTER: return "center";
    case RVL_KVI_BLK_MODEL: return "model";
    default: return "unknown";
    }
}

static const char *status_name(rvl_kv_inspect_status s)
{
    switch (s) {
    case RVL_KVI_OK: return "ok";
    case RVL_KVI_BAD_CHECKSUM: return "checksum mismatch";
    case RVL_KVI_TRUNCATED: return "truncated";
    case RVL_KVI_BAD_DATA: return "bad data";
    case RVL_KVI_MISPLACED: return "misplaced";
    }
    return "?";
}

static void put_quoted(FILE *out, const char *s, size_t n)
{
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", out);
        else if (c == '\t')
            fputs("\\t", out);
        else if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static void hex64(char buf[17], uint64_t v)
{
    snprintf(buf, 17, "%016" PRIx64, v);
}

/* ====================================================================
 * The model check (-m)
 * ==================================================================== */

typedef struct {
    rvl_model *m;
    uint64_t fingerprint;
    bool matches;          /* fingerprint */
    bool geometry;         /* n_layer and kv_dim agree */
    char *text;            /* the cached text, or NULL */
    const char *text_err;  /* why there is none */
} model_check;

static int check_model(const char *name, const char *path, const rvl_kv_inspect_info *in, model_check *mc)
{
    char file[4096];   /* a file, or a name in the model store */
    int rc = rvl_model_path(path, file, sizeof file);
    if (rc < 0 || (rc = rvl_model_open(&mc->m, file)) < 0)
        return cli_fail(name, rc);
    const rvl_hparams *hp = rvl_model_hparams(mc->m);
    mc->fingerprint = rvl_model_fingerprint(mc->m);
    mc->matches = mc->fingerprint == in->fingerprint;
    mc->geometry = hp->n_layer == in->n_layer &&
                   (uint64_t)hp->n_head_kv * hp->head_dim == in->kv_dim &&
                   (in->version == 1 || (hp->n_head_kv == in->n_head_kv && hp->head_dim == in->head_dim));
    if (!in->tokens) {
        mc->text_err = "the tokens block is damaged";
        return 0;
    }
    const rvl_tokenizer *tok = rvl_model_tokenizer(mc->m);
    for (uint32_t i = 0; i < in->n_tokens; i++)
        if (in->tokens[i] < 0 || (uint32_t)in->tokens[i] >= hp->n_vocab) {
            mc->text_err = "a token id is outside the model's vocabulary";
            return 0;
        }
    size_t need = 0;
    rc = rvl_detok_ids(tok, in->tokens, in->n_tokens, true, NULL, 0, &need);
    if (rc < 0 && rc != RVL_ERANGE) {
        mc->text_err = "the tokens do not detokenize";
        return 0;
    }
    mc->text = malloc(need + 1);
    if (!mc->text)
        return cli_fail(name, rvl_seterr(RVL_ENOMEM, "out of memory"));
    if (rvl_detok_ids(tok, in->tokens, in->n_tokens, true, mc->text, need + 1, &need) < 0) {
        free(mc->text);
        mc->text = NULL;
        mc->text_err = "the tokens do not detokenize";
        return 0;
    }
    mc->text[need] = 0;
    return 0;
}

/* ====================================================================
 * Usage by tier and by layer
 * ==================================================================== */

typedef struct {
    uint64_t pages, tokens, k_bytes, v_bytes, stored, damaged;
    uint64_t f16;       /* the same pages in f16 */
    uint64_t f16_pos;   /* the positions held, in f16 (what on-disk size compares with) */
} usage;

/* tokens: count the block's positions (one layer's, so that a tier's
 * tokens are positions, not positions times layers) */
static void add_usage(usage *u, const rvl_kv_inspect_blockinfo *bl, uint32_t kv_dim, bool tokens)
{
    if (bl->status != RVL_KVI_OK) {
        u->damaged++;
        return;
    }
    u->pages++;
    if (tokens)
        u->tokens += bl->n_pos;
    u->k_bytes += bl->k_bytes;
    u->v_bytes += bl->v_bytes;
    u->stored += bl->stored_bytes;
    u->f16 += bl->f16_bytes;
    u->f16_pos += (uint64_t)bl->n_pos * kv_dim * 2 * 2;
}

static double ratio(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : NAN;
}

typedef struct {
    usage tier[3], total, *layer;    /* layer: [n_layer] */
} usage_table;

static int tally(const rvl_kv_inspect *f, usage_table *t)
{
    const rvl_kv_inspect_info *in = rvl_kv_inspect_info_get(f);
    memset(t, 0, sizeof *t);
    t->layer = calloc(in->n_layer ? in->n_layer : 1, sizeof *t->layer);
    if (!t->layer)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    for (size_t i = 0; i < rvl_kv_inspect_n_blocks(f); i++) {
        const rvl_kv_inspect_blockinfo *bl = rvl_kv_inspect_block(f, i);
        if (bl->kind != RVL_KVI_BLK_KV)
            continue;
        add_usage(&t->total, bl, in->kv_dim, bl->layer == 0);
        add_usage(&t->tier[bl->tier < 3 ? bl->tier : 0], bl, in->kv_dim, bl->layer == 0);
        if (bl->layer < in->n_layer)
            add_usage(&t->layer[bl->layer], bl, in->kv_dim, true);
    }
    return 0;
}

/* ====================================================================
 * Text output
 * ==================================================================== */

static void print_bound(FILE *out, uint32_t v)
{
    if (v == UINT32_MAX)
        fputs("unbounded", out);
    else
        fprintf(out, "%u", v);
}

static void print_num(FILE *out, double v, const char *fmt, int width)
{
    if (isnan(v))
        fprintf(out, "%*s", width, "-");
    else
        fprintf(out, fmt, width, v);
}

static void print_heads_text(FILE *out, const rvl_kv_inspect_head *h, size_t n, int kind, const rvl_kv_inspect_info *in)
{
    fprintf(out, "\n%s: per head\n", kind ? "values" : "keys");
    fprintf(out, "  layer head  absmax (channel)  median  outliers   kurtosis  rotated  "
                 "| rel. MSE as: f16       q8        q4        tq4       tq3\n");
    for (size_t i = 0; i < n; i++) {
        if ((int)h[i].kind != kind)
            continue;
        fprintf(out, "  %5u %4u  ", h[i].layer, h[i].head);
        if (!h[i].n_pos) {
            fprintf(out, "(no intact pages)\n");
            continue;
        }
        char am[48];
        snprintf(am, sizeof am, "%.4g (%u)", h[i].absmax, h[i].absmax_channel);
        fprintf(out, "%-16s  %-6.3g  ", am, h[i].median_channel_absmax);
        char ol[64];
        int o = snprintf(ol, sizeof ol, "%u", h[i].n_outliers);
        for (uint32_t j = 0; j < h[i].n_outliers && j < 3 && o < (int)sizeof ol; j++)
            o += snprintf(ol + o, sizeof ol - (size_t)o, "%s%u", j ? "," : ":", h[i].outliers[j]);
        if (h[i].n_outliers > 3 && o < (int)sizeof ol)
            snprintf(ol + o, sizeof ol - (size_t)o, ",..");
        fprintf(out, "%-9s  ", ol);
        print_num(out, h[i].kurtosis, "%*.2f", 8);
        fputs("  ", out);
        print_num(out, h[i].kurtosis_rotated, "%*.2f", 7);
        fputs("             ", out);
        for (int f = 0; f < RVL_KVI_F32; f++) {
            fputs("  ", out);
            print_num(out, h[i].rel_mse[f], "%*.2e", 8);
        }
        fputc('\n', out);
    }
    (void)in;
}

static void print_text(FILE *out, const rvl_kv_inspect *f, const model_check *mc, const char *model_path,
                       const usage_table *t, const rvl_kv_inspect_head *heads, size_t n_heads,
                       const char *heads_err)
{
    const rvl_kv_inspect_info *in = rvl_kv_inspect_info_get(f);
    char a[17], b[17];
    fprintf(out, "file        %s (%" PRIu64 " bytes)\n", in->path, in->file_size);
    fprintf(out, "format      ruvllm session (magic RVLSESS), version %u, little-endian "
                 "(byte-order mark 0x01020304), header %u bytes, block headers %u bytes%s\n",
            in->version, in->header_bytes, in->block_header_bytes,
            in->version == 1 ? " (version 1: no longer loaded by run and chat)" : "");
    hex64(a, in->fingerprint);
    fprintf(out, "model       fingerprint %s", a);
    if (mc->m) {
        hex64(b, mc->fingerprint);
        if (mc->matches)
            fprintf(out, ": matches %s\n", model_path);
        else
            fprintf(out, ": does not match %s (its fingerprint is %s)\n", model_path, b);
        if (!mc->geometry)
            fprintf(out, "            the cache geometry differs from %s's\n", model_path);
    } else {
        fputc('\n', out);
    }
    if (in->has_model)
        fprintf(out, "made for    %s (%s)\n", in->model_name ? in->model_name : "(no name)",
                in->model_path ? in->model_path : "path unknown");
    fprintf(out, "geometry    %u layers, kv_dim %u", in->n_layer, in->kv_dim);
    if (in->head_dim)
        fprintf(out, " (%u kv heads of %u)", in->n_head_kv, in->head_dim);
    fprintf(out, ", pages of %u positions\n", in->page_size);
    fprintf(out, "formats     keys %s/%s/%s, values %s/%s/%s (tiers hot/warm/cold); hot ",
            rvl_kv_inspect_fmt_name(in->k_fmt[0]), rvl_kv_inspect_fmt_name(in->k_fmt[1]),
            rvl_kv_inspect_fmt_name(in->k_fmt[2]), rvl_kv_inspect_fmt_name(in->v_fmt[0]),
            rvl_kv_inspect_fmt_name(in->v_fmt[1]), rvl_kv_inspect_fmt_name(in->v_fmt[2]));
    print_bound(out, in->hot);
    fputs(" tokens, warm ", out);
    print_bound(out, in->warm);
    fputs(" tokens\n", out);
    if (in->key_centre) {
        double c2 = 0;
        const size_t nm = (size_t)in->n_layer * in->kv_dim;
        for (size_t i = 0; in->centre && i < nm; i++)
            c2 += (double)in->centre[i] * in->centre[i];
        if (in->centre)
            fprintf(out, "centre      keys stored as k - centre (per layer and kv head; RMS norm "
                    "per head %.4g); statistics below are of k\n",
                    sqrt(c2 / ((double)in->n_layer * (in->n_head_kv ? in->n_head_kv : 1))));
        else
            fputs("centre      keys stored centred; the center block is DAMAGED\n", out);
    }
    fprintf(out, "tokens      %u\n", in->n_tokens);
    if (mc->m) {
        fputs("text        ", out);
        if (mc->text)
            put_quoted(out, mc->text, strlen(mc->text));
        else
            fprintf(out, "(not shown: %s)", mc->text_err);
        fputc('\n', out);
    }
    fprintf(out, "extra       %zu bytes of JSON%s\n", in->extra_len, in->extra ? "" : " (damaged)");

    size_t nb = rvl_kv_inspect_n_blocks(f), nbad = 0;
    for (size_t i = 0; i < nb; i++)
        nbad += rvl_kv_inspect_block(f, i)->status != RVL_KVI_OK;
    fprintf(out, "checksums   header %s, %zu of %" PRIu64 " blocks read, %zu bad, file %s\n",
            in->header_ok ? "ok" : "MISMATCH", nb, in->n_blocks_expected, nbad,
            in->file_ok ? "ok" : "MISMATCH");
    size_t np = rvl_kv_inspect_n_problems(f);
    if (np) {
        fprintf(out, "\nproblems (%zu):\n", np);
        for (size_t i = 0; i < np; i++)
            fprintf(out, "  %s\n", rvl_kv_inspect_problem(f, i));
    }

    fprintf(out, "\npages and bytes by tier (a page: one layer's 32 positions, all kv heads; "
                 "tokens: of layer 0;\n  vs f16: the same pages in f16 / these; on disk vs "
                 "f16: the tokens' keys and values in f16 / the stored bytes)\n");
    fprintf(out, "  tier  keys  values  pages  tokens  key bytes   value bytes  stored bytes  "
                 "f16 bytes   vs f16  on disk vs f16\n");
    static const char *const tier_names[] = {"hot", "warm", "cold"};
    for (int i = 0; i < 3; i++) {
        const usage *u = &t->tier[i];
        if (!u->pages && !u->damaged)
            continue;
        fprintf(out, "  %-4s  %-4s  %-6s  %5" PRIu64 "  %6" PRIu64 "  %10" PRIu64 "  %11" PRIu64
                     "  %12" PRIu64 "  %10" PRIu64 "  %5.2fx  %5.2fx\n",
                tier_names[i], rvl_kv_inspect_fmt_name(in->k_fmt[i]), rvl_kv_inspect_fmt_name(in->v_fmt[i]),
                u->pages, u->tokens, u->k_bytes, u->v_bytes, u->stored, u->f16,
                ratio(u->f16, u->k_bytes + u->v_bytes), ratio(u->f16_pos, u->stored));
    }
    const usage *u = &t->total;
    fprintf(out, "  total              %5" PRIu64 "  %6" PRIu64 "  %10" PRIu64 "  %11" PRIu64
                 "  %12" PRIu64 "  %10" PRIu64 "  %5.2fx  %5.2fx\n",
            u->pages, u->tokens, u->k_bytes, u->v_bytes, u->stored, u->f16,
            ratio(u->f16, u->k_bytes + u->v_bytes), ratio(u->f16_pos, u->stored));
    if (u->damaged)
        fprintf(out, "  (%" PRIu64 " damaged pages not counted)\n", u->damaged);

    fprintf(out, "\npages and bytes by layer\n");
    fprintf(out, "  layer  pages  tokens  raw bytes   stored bytes  vs f16  on disk vs f16  damaged\n");
    for (uint32_t l = 0; in->geometry_ok && l < in->n_layer; l++) {
        const usage *v = &t->layer[l];
        fprintf(out, "  %5u  %5" PRIu64 "  %6" PRIu64 "  %10" PRIu64 "  %12" PRIu64
                     "  %5.2fx  %5.2fx          %" PRIu64 "\n",
                l, v->pages, v->tokens, v->k_bytes + v->v_bytes, v->stored,
                ratio(v->f16, v->k_bytes + v->v_bytes), ratio(v->f16_pos, v->stored), v->damaged);
    }

    if (heads_err) {
        fprintf(out, "\nper-head statistics: not computed: %s\n", heads_err);
    } else if (heads) {
        fprintf(out, "\nper-head statistics over the intact pages\n"
                     "  absmax: the largest |x| and its channel; median: the median of the "
                     "channels' absmax\n"
                     "  outliers: channels whose absmax exceeds %g x the median (count: first "
                     "channels)\n"
                     "  kurtosis: Pearson's (3 for a Gaussian) of all the head's coordinates, "
                     "before and after\n"
                     "    the Walsh-Hadamard rotation of each vector (for tq pages: of the "
                     "reconstruction, and of\n"
                     "    the stored rotated codes times their scale)\n"
                     "  rel. MSE: |x - x^|^2 / |x|^2 if the f16/f32 pages were stored in each "
                     "format; '-' when not\n"
                     "    computable (quantized pages: the original is gone) or not applicable\n",
                opt_outlier);
        print_heads_text(out, heads, n_heads, 0, in);
        print_heads_text(out, heads, n_heads, 1, in);
    }
}

/* ====================================================================
 * JSON output
 * ==================================================================== */

static void jw_hex(rvl_jw *w, const char *key, uint64_t v)
{
    char b[17];
    hex64(b, v);
    rvl_jw_key(w, key);
    rvl_jw_str(w, b);
}

static void jw_usage(rvl_jw *w, const usage *u)
{
    rvl_jw_key(w, "pages"); rvl_jw_u64(w, u->pages);
    rvl_jw_key(w, "tokens"); rvl_jw_u64(w, u->tokens);
    rvl_jw_key(w, "key_bytes"); rvl_jw_u64(w, u->k_bytes);
    rvl_jw_key(w, "value_bytes"); rvl_jw_u64(w, u->v_bytes);
    rvl_jw_key(w, "stored_bytes"); rvl_jw_u64(w, u->stored);
    rvl_jw_key(w, "f16_bytes"); rvl_jw_u64(w, u->f16);
    rvl_jw_key(w, "f16_position_bytes"); rvl_jw_u64(w, u->f16_pos);
    rvl_jw_key(w, "ratio_vs_f16"); rvl_jw_f64(w, ratio(u->f16, u->k_bytes + u->v_bytes));
    rvl_jw_key(w, "disk_ratio_vs_f16"); rvl_jw_f64(w, ratio(u->f16_pos, u->stored));
    rvl_jw_key(w, "damaged_pages"); rvl_jw_u64(w, u->damaged);
}

static void jw_bound(rvl_jw *w, const char *key, uint32_t v)
{
    rvl_jw_key(w, key);
    if (v == UINT32_MAX)
        rvl_jw_null(w);
    else
        rvl_jw_u64(w, v);
}

static void print_json(rvl_jw *w, const rvl_kv_inspect *f, const model_check *mc, const char *model_path,
                       const usage_table *t, const rvl_kv_inspect_head *heads, size_t n_heads,
                       const char *heads_err)
{
    const rvl_kv_inspect_info *in = rvl_kv_inspect_info_get(f);
    rvl_jw_obj(w);
    rvl_jw_key(w, "file"); rvl_jw_str(w, in->path);
    rvl_jw_key(w, "size"); rvl_jw_u64(w, in->file_size);
    rvl_jw_key(w, "magic"); rvl_jw_str(w, "RVLSESS");
    rvl_jw_key(w, "version"); rvl_jw_u64(w, in->version);
    rvl_jw_key(w, "byte_order"); rvl_jw_str(w, "little-endian");
    rvl_jw_key(w, "header_bytes"); rvl_jw_u64(w, in->header_bytes);
    rvl_jw_key(w, "block_header_bytes"); rvl_jw_u64(w, in->block_header_bytes);
    rvl_jw_key(w, "intact"); rvl_jw_bool(w, rvl_kv_inspect_intact(f));
    rvl_jw_key(w, "header_checksum");
    rvl_jw_obj(w);
    rvl_jw_key(w, "ok"); rvl_jw_bool(w, in->header_ok);
    jw_hex(w, "stored", in->header_hash_stored);
    jw_hex(w, "computed", in->header_hash_computed);
    rvl_jw_obj_end(w);
    rvl_jw_key(w, "file_checksum");
    rvl_jw_obj(w);
    rvl_jw_key(w, "ok"); rvl_jw_bool(w, in->file_ok);
    jw_hex(w, "stored", in->file_hash_stored);
    jw_hex(w, "computed", in->file_hash_computed);
    rvl_jw_obj_end(w);
    jw_hex(w, "fingerprint", in->fingerprint);
    rvl_jw_key(w, "made_for");   /* the model block (flag bit 2), null without one */
    if (in->has_model) {
        rvl_jw_obj(w);
        rvl_jw_key(w, "name"); rvl_jw_str(w, in->model_name);
        rvl_jw_key(w, "path"); rvl_jw_str(w, in->model_path);
        rvl_jw_obj_end(w);
    } else {
        rvl_jw_null(w);
    }
    if (mc->m) {
        rvl_jw_key(w, "model");
        rvl_jw_obj(w);
        rvl_jw_key(w, "path"); rvl_jw_str(w, model_path);
        jw_hex(w, "fingerprint", mc->fingerprint);
        rvl_jw_key(w, "matches"); rvl_jw_bool(w, mc->matches);
        rvl_jw_key(w, "geometry_matches"); rvl_jw_bool(w, mc->geometry);
        rvl_jw_obj_end(w);
    }
    rvl_jw_key(w, "n_layer"); rvl_jw_u64(w, in->n_layer);
    rvl_jw_key(w, "kv_dim"); rvl_jw_u64(w, in->kv_dim);
    rvl_jw_key(w, "n_head_kv");
    in->n_head_kv ? rvl_jw_u64(w, in->n_head_kv) : rvl_jw_null(w);
    rvl_jw_key(w, "head_dim");
    in->head_dim ? rvl_jw_u64(w, in->head_dim) : rvl_jw_null(w);
    rvl_jw_key(w, "page_size"); rvl_jw_u64(w, in->page_size);
    rvl_jw_key(w, "n_tokens"); rvl_jw_u64(w, in->n_tokens);
    jw_bound(w, "hot_tokens", in->hot);
    jw_bound(w, "warm_tokens", in->warm);
    rvl_jw_key(w, "keys_centred"); rvl_jw_bool(w, in->key_centre);
    rvl_jw_key(w, "tokens");
    if (in->tokens) {
        rvl_jw_arr(w);
        for (uint32_t i = 0; i < in->n_tokens; i++)
            rvl_jw_i64(w, in->tokens[i]);
        rvl_jw_arr_end(w);
    } else {
        rvl_jw_null(w);
    }
    if (mc->m) {
        rvl_jw_key(w, "text");
        rvl_jw_str(w, mc->text);
    }
    rvl_jw_key(w, "extra_bytes"); rvl_jw_u64(w, in->extra_len);

    static const char *const tier_names[] = {"hot", "warm", "cold"};
    rvl_jw_key(w, "tiers");
    rvl_jw_arr(w);
    for (int i = 0; i < 3; i++) {
        rvl_jw_obj(w);
        rvl_jw_key(w, "tier"); rvl_jw_str(w, tier_names[i]);
        rvl_jw_key(w, "key_format"); rvl_jw_str(w, rvl_kv_inspect_fmt_name(in->k_fmt[i]));
        rvl_jw_key(w, "value_format"); rvl_jw_str(w, rvl_kv_inspect_fmt_name(in->v_fmt[i]));
        jw_usage(w, &t->tier[i]);
        rvl_jw_obj_end(w);
    }
    rvl_jw_arr_end(w);
    rvl_jw_key(w, "total");
    rvl_jw_obj(w);
    jw_usage(w, &t->total);
    rvl_jw_obj_end(w);
    rvl_jw_key(w, "layers");
    rvl_jw_arr(w);
    for (uint32_t l = 0; in->geometry_ok && l < in->n_layer; l++) {
        rvl_jw_obj(w);
        rvl_jw_key(w, "layer"); rvl_jw_u64(w, l);
        jw_usage(w, &t->layer[l]);
        rvl_jw_obj_end(w);
    }
    rvl_jw_arr_end(w);

    rvl_jw_key(w, "blocks");
    rvl_jw_arr(w);
    for (size_t i = 0; i < rvl_kv_inspect_n_blocks(f); i++) {
        const rvl_kv_inspect_blockinfo *bl = rvl_kv_inspect_block(f, i);
        rvl_jw_obj(w);
        rvl_jw_key(w, "offset"); rvl_jw_u64(w, bl->offset);
        rvl_jw_key(w, "kind"); rvl_jw_str(w, kind_name(bl->kind));
        if (bl->kind == RVL_KVI_BLK_KV) {
            rvl_jw_key(w, "layer"); rvl_jw_u64(w, bl->layer);
            rvl_jw_key(w, "page"); rvl_jw_u64(w, bl->page);
            rvl_jw_key(w, "tier"); rvl_jw_u64(w, bl->tier);
            rvl_jw_key(w, "key_format"); rvl_jw_str(w, rvl_kv_inspect_fmt_name(bl->k_fmt));
            rvl_jw_key(w, "value_format"); rvl_jw_str(w, rvl_kv_inspect_fmt_name(bl->v_fmt));
            rvl_jw_key(w, "positions"); rvl_jw_u64(w, bl->n_pos);
        }
        rvl_jw_key(w, "raw_bytes"); rvl_jw_u64(w, bl->raw_bytes);
        rvl_jw_key(w, "stored_bytes"); rvl_jw_u64(w, bl->stored_bytes);
        rvl_jw_key(w, "checksum_ok");
        rvl_jw_bool(w, bl->status != RVL_KVI_BAD_CHECKSUM && bl->status != RVL_KVI_TRUNCATED);
        rvl_jw_key(w, "status"); rvl_jw_str(w, status_name(bl->status));
        rvl_jw_obj_end(w);
    }
    rvl_jw_arr_end(w);
    rvl_jw_key(w, "problems");
    rvl_jw_arr(w);
    for (size_t i = 0; i < rvl_kv_inspect_n_problems(f); i++)
        rvl_jw_str(w, rvl_kv_inspect_problem(f, i));
    rvl_jw_arr_end(w);

    if (!opt_no_heads) {
        rvl_jw_key(w, "outlier_rule");
        char rule[160];
        snprintf(rule, sizeof rule, "a channel whose absmax exceeds %g times the median channel "
                 "absmax of its head", opt_outlier);
        rvl_jw_str(w, rule);
        rvl_jw_key(w, "heads");
        if (heads_err) {
            rvl_jw_null(w);
            rvl_jw_key(w, "heads_error");
            rvl_jw_str(w, heads_err);
        } else {
            rvl_jw_arr(w);
            for (size_t i = 0; i < n_heads; i++) {
                const rvl_kv_inspect_head *h = &heads[i];
                rvl_jw_obj(w);
                rvl_jw_key(w, "layer"); rvl_jw_u64(w, h->layer);
                rvl_jw_key(w, "head"); rvl_jw_u64(w, h->head);
                rvl_jw_key(w, "kind"); rvl_jw_str(w, h->kind ? "value" : "key");
                rvl_jw_key(w, "positions"); rvl_jw_u64(w, h->n_pos);
                rvl_jw_key(w, "positions_by_format");
                rvl_jw_obj(w);
                for (int fm = 0; fm < RVL_KVI_NFMT; fm++)
                    if (h->n_pos_fmt[fm]) {
                        rvl_jw_key(w, rvl_kv_inspect_fmt_name(fm));
                        rvl_jw_u64(w, h->n_pos_fmt[fm]);
                    }
                rvl_jw_obj_end(w);
                rvl_jw_key(w, "absmax"); rvl_jw_f64(w, h->absmax);
                rvl_jw_key(w, "absmax_channel"); rvl_jw_u64(w, h->absmax_channel);
                rvl_jw_key(w, "median_channel_absmax"); rvl_jw_f64(w, h->median_channel_absmax);
                rvl_jw_key(w, "outlier_channels");
                rvl_jw_arr(w);
                for (uint32_t j = 0; j < h->n_outliers; j++)
                    rvl_jw_u64(w, h->outliers[j]);
                rvl_jw_arr_end(w);
                rvl_jw_key(w, "kurtosis"); rvl_jw_f64(w, h->kurtosis);
                rvl_jw_key(w, "kurtosis_rotated"); rvl_jw_f64(w, h->kurtosis_rotated);
                rvl_jw_key(w, "rel_mse_positions"); rvl_jw_u64(w, h->n_pos_exact);
                rvl_jw_key(w, "rel_mse");
                rvl_jw_obj(w);
                for (int fm = 0; fm < RVL_KVI_F32; fm++) {
                    rvl_jw_key(w, rvl_kv_inspect_fmt_name(fm));
                    rvl_jw_f64(w, h->rel_mse[fm]);
                }
                rvl_jw_obj_end(w);
                rvl_jw_obj_end(w);
            }
            rvl_jw_arr_end(w);
        }
    }
    rvl_jw_obj_end(w);
}

/* ====================================================================
 * --diff
 * ==================================================================== */

static void piece(FILE *out, const model_check *mc, int32_t id)
{
    const char *p;
    size_t n;
    if (mc->m && rvl_tok_piece(rvl_model_tokenizer(mc->m), id, true, &p, &n) == 0) {
        fputc(' ', out);
        put_quoted(out, p, n);
    }
}

static int do_diff(const char *name, rvl_kv_inspect *a, rvl_kv_inspect *b, const model_check *mc)
{
    rvl_kv_inspect_diffres d;
    int rc = rvl_kv_inspect_diff(a, b, &d);
    if (rc < 0)
        return cli_fail(name, rc);
    const rvl_kv_inspect_info *ia = rvl_kv_inspect_info_get(a), *ib = rvl_kv_inspect_info_get(b);
    if (opt_json) {
        rvl_jw w;
        rvl_jw_init(&w, stdout, true);
        rvl_jw_obj(&w);
        rvl_jw_key(&w, "a"); rvl_jw_str(&w, ia->path);
        rvl_jw_key(&w, "b"); rvl_jw_str(&w, ib->path);
        rvl_jw_key(&w, "a_intact"); rvl_jw_bool(&w, rvl_kv_inspect_intact(a));
        rvl_jw_key(&w, "b_intact"); rvl_jw_bool(&w, rvl_kv_inspect_intact(b));
        rvl_jw_key(&w, "same_model"); rvl_jw_bool(&w, d.same_model);
        rvl_jw_key(&w, "same_geometry"); rvl_jw_bool(&w, d.same_geometry);
        rvl_jw_key(&w, "n_tokens_a"); rvl_jw_u64(&w, d.n_tokens_a);
        rvl_jw_key(&w, "n_tokens_b"); rvl_jw_u64(&w, d.n_tokens_b);
        rvl_jw_key(&w, "common_prefix"); rvl_jw_u64(&w, d.common);
        rvl_jw_key(&w, "first_difference");
        d.first_diff < 0 ? rvl_jw_null(&w) : rvl_jw_u64(&w, (uint64_t)d.first_diff);
        rvl_jw_key(&w, "layers");
        rvl_jw_arr(&w);
        for (uint32_t l = 0; d.k_maxdiff && l < d.n_layer; l++) {
            rvl_jw_obj(&w);
            rvl_jw_key(&w, "layer"); rvl_jw_u64(&w, l);
            rvl_jw_key(&w, "key_max_abs_diff"); rvl_jw_f64(&w, d.k_maxdiff[l]);
            rvl_jw_key(&w, "value_max_abs_diff"); rvl_jw_f64(&w, d.v_maxdiff[l]);
            rvl_jw_obj_end(&w);
        }
        rvl_jw_arr_end(&w);
        rvl_jw_obj_end(&w);
    } else {
        char ha[17], hb[17];
        hex64(ha, ia->fingerprint);
        hex64(hb, ib->fingerprint);
        printf("a           %s (%u tokens)%s\n", ia->path, d.n_tokens_a,
               rvl_kv_inspect_intact(a) ? "" : " DAMAGED");
        printf("b           %s (%u tokens)%s\n", ib->path, d.n_tokens_b,
               rvl_kv_inspect_intact(b) ? "" : " DAMAGED");
        if (d.same_model)
            printf("model       same fingerprint %s\n", ha);
        else
            printf("model       different: %s and %s\n", ha, hb);
        printf("common      %u tokens\n", d.common);
        if (d.first_diff < 0) {
            printf("diverge     nowhere: the same %u tokens\n", d.common);
        } else {
            printf("diverge     at token %" PRId64 ":", d.first_diff);
            if (d.common < d.n_tokens_a) {
                printf(" a has id %d", ia->tokens[d.common]);
                piece(stdout, mc, ia->tokens[d.common]);
            } else {
                printf(" a ends");
            }
            printf(",");
            if (d.common < d.n_tokens_b) {
                printf(" b has id %d", ib->tokens[d.common]);
                piece(stdout, mc, ib->tokens[d.common]);
            } else {
                printf(" b ends");
            }
            printf("\n");
        }
        if (!d.same_geometry) {
            printf("\nthe cache geometries differ: keys and values not compared\n");
        } else if (d.common == 0) {
            printf("\nno common prefix: keys and values not compared\n");
        } else {
            printf("\nlargest |a - b| over the %u common positions (0 when computed the same way; "
                   "'-': a page is missing or damaged)\n", d.common);
            printf("  layer  keys        values\n");
            for (uint32_t l = 0; l < d.n_layer; l++) {
                printf("  %5u  ", l);
                print_num(stdout, d.k_maxdiff[l], "%-*.4g", 10);
                printf("  ");
                print_num(stdout, d.v_maxdiff[l], "%*.4g", 0);
                printf("\n");
            }
        }
    }
    rvl_kv_inspect_diff_free(&d);
    return 0;
}

/* ====================================================================
 * main
 * ==================================================================== */

static void report_problems(const char *name, const rvl_kv_inspect *f)
{
    size_t n = rvl_kv_inspect_n_problems(f);
    if (!n)
        return;
    cli_err(name, "%s: %s%s", rvl_kv_inspect_info_get(f)->path, rvl_kv_inspect_problem(f, 0),
            n > 1 ? " (and more problems, listed in the output)" : "");
}

static int kv_inspect_main(rvl_cmd *cmd, int argc, char **argv)
{
    const char *name = cmd->name;
    rvl_kv_inspect *f = NULL, *g = NULL;
    model_check mc = {0};
    usage_table t = {0};
    rvl_kv_inspect_head *heads = NULL;
    size_t n_heads = 0;
    const char *heads_err = NULL;
    char heads_msg[512];
    int status = 0, rc;
    (void)argc;   /* cli_parse checked: exactly one FILE */

    if ((rc = rvl_kv_inspect_open(&f, argv[0])) < 0)
        return cli_fail(name, rc);
    const rvl_kv_inspect_info *in = rvl_kv_inspect_info_get(f);
    if (opt_model && (status = check_model(name, opt_model, in, &mc)) != 0)
        goto out;

    if (opt_diff) {
        if ((rc = rvl_kv_inspect_open(&g, opt_diff)) < 0) {
            status = cli_fail(name, rc);
            goto out;
        }
        if ((status = do_diff(name, f, g, &mc)) != 0)
            goto out;
        report_problems(name, f);
        report_problems(name, g);
        if (!rvl_kv_inspect_intact(f) || !rvl_kv_inspect_intact(g))
            status = EXIT_RUNTIME;
        goto out;
    }

    if ((rc = tally(f, &t)) < 0) {
        status = cli_fail(name, rc);
        goto out;
    }
    if (!opt_no_heads) {
        rvl_kv_inspect_stats_params sp = {.outlier_factor = opt_outlier};
        if (mc.m && in->version == 1 && mc.geometry) {
            sp.n_head_kv = rvl_model_hparams(mc.m)->n_head_kv;
            sp.head_dim = rvl_model_hparams(mc.m)->head_dim;
        }
        rc = rvl_kv_inspect_stats(f, &sp, &heads, &n_heads);
        if (rc == RVL_EINTR || rc == RVL_ENOMEM) {
            status = cli_fail(name, rc);
            goto out;
        }
        if (rc < 0) {
            snprintf(heads_msg, sizeof heads_msg, "%s", rvl_errmsg());
            heads_err = heads_msg;
        }
    }
    if (opt_json) {
        rvl_jw w;
        rvl_jw_init(&w, stdout, true);
        print_json(&w, f, &mc, opt_model, &t, heads, n_heads, heads_err);
    } else {
        print_text(stdout, f, &mc, opt_model, &t, heads, n_heads, heads_err);
    }
    report_problems(name, f);
    if (!rvl_kv_inspect_intact(f))
        status = EXIT_RUNTIME;
    if (mc.m && !mc.matches) {
        char a[17], b[17];
        hex64(a, in->fingerprint);
        hex64(b, mc.fingerprint);
        if (in->model_name || in->model_path)
            cli_err(name, "%s: made with another model, %s (%s) (fingerprint %s, %s's is %s)",
                    in->path, in->model_name ? in->model_name : "(no name)",
                    in->model_path ? in->model_path : "path unknown", a, opt_model, b);
        else
            cli_err(name, "%s: made with another model (fingerprint %s, %s's is %s)", in->path, a,
                    opt_model, b);
        status = EXIT_RUNTIME;
    }
out:
    if (fflush(stdout) != 0 && status == 0) {
        cli_err(name, "writing to standard output failed");
        status = EXIT_RUNTIME;
    }
    rvl_kv_inspect_stats_free(heads, n_heads);
    free(t.layer);
    free(mc.text);
    rvl_model_close(mc.m);
    rvl_kv_inspect_close(f);
    rvl_kv_inspect_close(g);
    return status;
}

rvl_cmd cmd_kv_inspect_desc = {
    .synopsis = "FILE [-m MODEL] [--json] [--diff FILE2]",
    .description =
        "Show what a session file holds (the files written by 'ruvllm run --prompt-cache' and "
        "'ruvllm chat --session' or /save): the header (magic, version, byte order, sizes), the "
        "model fingerprint, the cache geometry and tier formats, the token count, the pages and "
        "bytes per tier and per layer with the compression against an f16 cache (of the raw "
        "pages and of the zstd-compressed bytes on disk), the verification of the header's, "
        "every block's and the whole file's xxh3-64 checksum, and per-head statistics of the "
        "keys and values.\n"
        "\n"
        "A damaged file is inspected as far as it can be read: every bad block is named with "
        "its byte offset, layer and page, and the exit status is 1.\n"
        "\n"
        "With -m, the file's fingerprint is compared with MODEL's (exit status 1 when it was "
        "made with another model) and the cached text is shown (special tokens included). "
        "Version 1 files do not record the head size; -m supplies it for the per-head "
        "statistics.\n"
        "\n"
        "Per-head statistics, for the keys and the values of each layer and kv head, over the "
        "intact pages: the largest |x| and its channel; the outlier channels, those whose "
        "absmax exceeds K (--outlier-factor, 4) times the median channel absmax of the head; "
        "Pearson's kurtosis (3 for a Gaussian) of the head's coordinates before and after the "
        "Walsh-Hadamard rotation TurboQuant applies (for tq pages: of the reconstruction, and "
        "of the stored rotated codes); and, for pages stored in f16 or f32, the relative "
        "squared error |x - x^|^2 / |x|^2 each page format would give (encoding and decoding "
        "them). For quantized pages it is not computable: the original is gone.\n"
        "\n"
        "With --diff FILE2, shows where two sessions diverge instead: the common prefix of "
        "their token ids, the first differing token, and over the common prefix the largest "
        "absolute difference of the keys and of the values per layer (zero when both were "
        "computed the same way).\n"
        "\n"
        "With --json the output is one JSON document: file, size, magic, version, byte_order, "
        "intact, header_checksum and file_checksum ({ok, stored, computed}), fingerprint, "
        "made_for ({name, path} of the model that made the file, null in files older than the "
        "model block), model ({path, fingerprint, matches}, with -m), the geometry, tokens (the ids), text "
        "(with -m), tiers, total and layers ({pages, tokens, key_bytes, value_bytes, "
        "stored_bytes, f16_bytes (the same pages in f16), f16_position_bytes (the positions held, in f16), "
        "ratio_vs_f16 (f16_bytes over key and value bytes), disk_ratio_vs_f16 (f16_position_bytes over "
        "stored_bytes), damaged_pages}), blocks "
        "({offset, kind, layer, page, tier, key_format, value_format, positions, raw_bytes, "
        "stored_bytes, checksum_ok, status}), problems, outlier_rule and heads ({layer, head, "
        "kind, positions, absmax, absmax_channel, median_channel_absmax, outlier_channels, "
        "kurtosis, kurtosis_rotated, rel_mse}); with --diff: a, b, same_model, n_tokens_a, "
        "n_tokens_b, common_prefix, first_difference (null when the tokens are the same) and "
        "layers ({layer, key_max_abs_diff, value_max_abs_diff}).",
    .man_extra =
        ".SH FILE FORMAT\n"
        "Session files are little\\-endian (version 3; the authoritative layout is in "
        "lib/engine/session_fmt.h and docs/formats.md):\n"
        ".RS 4\n.nf\n"
        "offset  size  field\n"
        "0       8     magic \"RVLSESS\\e0\"\n"
        "8       4     version, 3 (2: no flags)\n"
        "12      4     byte\\-order mark 0x01020304\n"
        "16      8     model fingerprint (xxh3\\-64)\n"
        "24      4     n_layer\n"
        "28      4     n_head_kv\n"
        "32      4     head_dim\n"
        "36      4     page size in positions, 32\n"
        "40      4     n_tokens\n"
        "44      12    key format of tiers 0 (hot), 1 (warm), 2 (cold)\n"
        "56      12    value format of tiers 0, 1, 2\n"
        "68      4     hot tokens (0xffffffff: unbounded)\n"
        "72      4     warm tokens\n"
        "76      4     flags: bit 0, keys stored centred; bit 2, a model block first\n"
        "80      8     xxh3\\-64 of bytes 0..79\n"
        "88      ...   blocks: model (flag bit 2: JSON name and path), tokens\n"
        "              (n_tokens i32), extra (JSON), center (flag bit 0:\n"
        "              n_layer x n_head_kv x head_dim f32), then per layer\n"
        "              and page of 32 positions one kv block\n"
        "end\\-8   8     xxh3\\-64 of every byte before it\n"
        ".fi\n.RE\n"
        ".PP\n"
        "Formats: 0 f16, 1 q8, 2 q4, 3 tq4, 4 tq3, 5 f32. Each block has a 32\\-byte header: "
        "kind (1 tokens, 2 extra, 3 kv, 4 center, 5 model), layer, page, the page's key format, value format, "
        "tier and positions used (one byte each), raw size, stored size (one zstd frame) and "
        "the xxh3\\-64 of the stored bytes. A kv block holds each kv head's key page, then "
        "each kv head's value page. Version 1 files (a 56\\-byte header with kv_dim and one "
        "f16/f32 element type, 28\\-byte block headers, rows of kv_dim elements) are still "
        "inspected.\n",
    .examples = "ruvllm kv-inspect chat.rvls\theader, pages, checksums and per-head statistics\n"
                "ruvllm kv-inspect -m model.gguf chat.rvls\tcheck the model and show the cached text\n"
                "ruvllm kv-inspect --json --no-heads chat.rvls | jq .total\tsizes as JSON\n"
                "ruvllm kv-inspect --diff b.rvls a.rvls\twhere two sessions diverge",
    .opts = opts,
    .pos_compl = COMPL_FILE,
    .min_pos = 1,
    .max_pos = 1,
    .main = kv_inspect_main,
};
