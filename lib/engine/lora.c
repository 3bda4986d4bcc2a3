/*
 * lora.c - LoRA adapters: loading (PEFT directories and llama.cpp GGUF
 * LoRA files), checking them against a base model, and the run-time hook
 * the forward pass calls after the matmuls of target weights.
 *
 *   PEFT     adapter_config.json + adapter_model.safetensors; tensors
 *            "base_model.model.<hf module>.lora_A.weight" (r, n_in) and
 *            ".lora_B.weight" (n_out, r); the Hugging Face names map to
 *            GGUF names as the import maps them (convert_hf_in.c), and the
 *            rows of B of llama's q_proj/k_proj get the import's row order
 *            (A's columns are the input and do not move).
 *   GGUF     general.type "adapter", adapter.type "lora",
 *            adapter.lora.alpha; "<base tensor>.lora_a" with ne (n_in, r)
 *            and ".lora_b" with ne (r, n_out) (convert_lora_to_gguf.py
 *            has already reordered B's rows). The same memory layout as
 *            PEFT's.
 *
 * Every pair becomes f32 A (r, n_in) and B transposed and scaled,
 * bt (r, n_out) = scale * alpha/r * B^T (alpha/sqrt(r) with rsLoRA), so
 * that both the merge (a row of W gets sum_k bt[k][o] * A[k]) and the
 * run-time product (u = A x, then y += sum_k u[k] * bt[k]) stream rows.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "format/format_int.h"
#include "formats.h"
#include "engine/lora_int.h"
#include "engine/model.h"

/* Most adapter tensors accepted per base tensor (pairs are one per base
 * tensor, so more is a hostile or foreign file). */
#define MAX_PAIRS_PER_BASE 2

/* ======================================================================
 * Specs: "FILE[:SCALE]"
 * ====================================================================== */
int rvl_lora_parse_spec(const char *spec, char *path, size_t cap, float *scale)
{
    const char *colon = strrchr(spec, ':');
    size_t n = strlen(spec);
    *scale = 1.0f;
    if (colon && colon[1]) {
        char *end;
        double v = strtod(colon + 1, &end);
        if (*end == '\0' && end != colon + 1) {   /* a number: the scale, checked */
            if (!isfinite(v) || fabs(v) > RVL_LORA_MAX_SCALE)
                return rvl_seterr(RVL_EINVAL, "'%s': the scale %s is not a finite number "
                                  "within +-%g", spec, colon + 1, RVL_LORA_MAX_SCALE);
            *scale = (float)v;
            n = (size_t)(colon - spec);
        }
    }
    if (n == 0)
        return rvl_seterr(RVL_EINVAL, "'%s': no adapter path", spec);
    if (n >= cap)
        return rvl_seterr(RVL_EINVAL, "'%s': path too long", spec);
    memcpy(path, spec, n);
    path[n] = '\0';
    return 0;
}

/* ======================================================================
 * The base model's facts
 * ====================================================================== */
static uint32_t kv_u32(const rvl_file *f, const char *arch, const char *suffix)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    uint64_t v = 0;
    if (!kv || kv->type == RVL_GGUF_ARRAY || rvl_kv_get_u64(kv, &v) < 0 || v > UINT32_MAX)
        return 0;
    return (uint32_t)v;
}

static bool kv_str_is(const rvl_file *f, const char *key, const char *want, char *got, size_t cap)
{
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    rvl_str s = {0};
    if (got && cap)
        got[0] = '\0';
    if (!kv || rvl_kv_get_str(kv, &s) < 0)
        return false;
    if (got && cap)
        snprintf(got, cap, "%.*s", (int)(s.len < cap ? s.len : cap - 1), s.ptr);
    return rvl_str_eq(s, want);
}

int rvl_lora_open_file(rvl_lora **out, const rvl_file *base)
{
    *out = NULL;
    if (rvl_file_fmt(base) != RVL_FMT_GGUF)
        return rvl_seterr(RVL_EINVAL, "%s: the base of a LoRA merge is a GGUF file", rvl_file_path(base));
    rvl_lora *l = calloc(1, sizeof *l);
    if (!l)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    l->base = base;
    kv_str_is(base, "general.architecture", "", l->arch, sizeof l->arch);
    l->n_layer = kv_u32(base, l->arch, "block_count");
    l->n_head = kv_u32(base, l->arch, "attention.head_count");
    l->n_head_kv = kv_u32(base, l->arch, "attention.head_count_kv");
    if (!l->n_head_kv)
        l->n_head_kv = l->n_head;
    *out = l;
    return 0;
}

int rvl_lora_open(rvl_lora **out, const rvl_model *m)
{
    int rc = rvl_lora_open_file(out, rvl_model_file(m));
    if (rc < 0)
        return rc;
    rvl_lora *l = *out;
    l->m = m;
    l->n_layer = m->hp.n_layer;
    size_t ns = (size_t)l->n_layer * RVL_LORA_N_KINDS;
    l->slot = calloc(ns ? ns : 1, sizeof *l->slot);
    l->slot_n = calloc(ns ? ns : 1, sizeof *l->slot_n);
    if (!l->slot || !l->slot_n) {
        rvl_lora_close(l);
        *out = NULL;
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    return 0;
}

static void adapter_free(rvl_lora_adapter *ad)
{
    for (size_t i = 0; i < ad->n_pairs; i++) {
        free(ad->pairs[i].a);
        free(ad->pairs[i].bt);
    }
    free(ad->pairs);
    free(ad->path);
    memset(ad, 0, sizeof *ad);
}

void rvl_lora_close(rvl_lora *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        adapter_free(&l->ad[i]);
    free(l->ad);
    if (l->slot)
        for (size_t i = 0; i < (size_t)l->n_layer * RVL_LORA_N_KINDS; i++)
            free(l->slot[i]);
    free(l->slot);
    free(l->slot_n);
    free(l);
}

size_t rvl_lora_n_adapters(const rvl_lora *l) { return l ? l->n : 0; }

/* ======================================================================
 * Pairing the A and B tensors of an adapter file
 * ====================================================================== */
typedef struct {
    char target[64];            /* the base tensor's GGUF name */
    const rvl_tensor_info *t;   /* the adapter tensor */
    bool is_b;
    uint32_t perm;              /* B of llama's Q/K: heads to reorder */
} ab_entry;

static int by_target(const void *x, const void *y)
{
    const ab_entry *a = x, *b = y;
    int c = strcmp(a->target, b->target);
    return c ? c : (int)a->is_b - (int)b->is_b;
}

static const char *tname(uint32_t type)
{
    const rvl_type_info *ti = rvl_type_get(type);
    return ti ? ti->name : "?";
}

/* The f32 values of adapter tensor t (rows x cols, GGUF order). */
static int read_f32(const char *path, const rvl_tensor_info *t, float *dst)
{
    const rvl_kformat *kf = rvl_kformat_get(t->type);
    if (!kf || !kf->dequantize || (t->ne[0] % kf->block_size) != 0)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %.*s: cannot read %s values", path,
                          (int)t->name.len, t->name.ptr, tname(t->type));
    uint64_t rows = t->ne[0] ? t->n_elements / t->ne[0] : 0;
    uint64_t rb = rvl_kformat_row_bytes(kf, t->ne[0]);
    for (uint64_t r = 0; r < rows; r++)
        kf->dequantize((const char *)t->data + r * rb, dst + r * t->ne[0], (int64_t)t->ne[0]);
    for (uint64_t i = 0; i < t->n_elements; i++)
        if (!isfinite(dst[i]))
            return rvl_seterr(RVL_EFORMAT, "%s: tensor %.*s: non-finite value at element %llu",
                              path, (int)t->name.len, t->name.ptr, (unsigned long long)i);
    return 0;
}

static int runtime_slot(const char *name, int *layer, int *kind)
{
    static const char *const kinds[RVL_LORA_N_KINDS] = {
        "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    unsigned l;
    char what[32];
    int n = 0;
    *layer = *kind = -1;
    if (sscanf(name, "blk.%u.%31[a-z_].weight%n", &l, what, &n) != 2 || name[n] != '\0' || l > 1u << 20)
        return -1;
    for (int k = 0; k < RVL_LORA_N_KINDS; k++)
        if (!strcmp(what, kinds[k])) {
            *layer = (int)l;
            *kind = k;
            return 0;
        }
    return -1;
}

/* Check the pairs of the sorted entries against the base and read them. */
static int build_pairs(const rvl_lora *l, rvl_lora_adapter *ad, ab_entry *e, size_t ne,
                       double alpha, bool rslora, bool gguf_alpha, float scale)
{
    const char *path = ad->path;
    qsort(e, ne, sizeof *e, by_target);
    ad->pairs = calloc(ne / 2 + 1, sizeof *ad->pairs);
    if (!ad->pairs)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    ad->info.rank_min = UINT32_MAX;
    for (size_t i = 0; i < ne;) {
        const ab_entry *a = &e[i];
        const ab_entry *b = i + 1 < ne && !strcmp(e[i + 1].target, a->target) ? &e[i + 1] : NULL;
        if (a->is_b || !b || !b->is_b || (i + 2 < ne && !strcmp(e[i + 2].target, a->target)))
            return rvl_seterr(RVL_EFORMAT, "%s: tensor %.*s: %s", path, (int)a->t->name.len,
                              a->t->name.ptr, a->is_b ? "a B matrix without its A"
                              : !b || !b->is_b ? "an A matrix without its B"
                              : "two updates of the same base tensor");
        i += 2;
        const rvl_tensor_info *ta = a->t, *tb = b->t;
        const rvl_tensor_info *w = rvl_file_find_tensor(l->base, a->target);
        if (!w)
            return rvl_seterr(RVL_ENOTFOUND, "%s: tensor %.*s: its target %s is not in the base "
                              "model %s", path, (int)ta->name.len, ta->name.ptr, a->target,
                              rvl_file_path(l->base));
        if (w->n_dims != 2)
            return rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %.*s: its target %s is not a matrix "
                              "(%u dimensions)", path, (int)ta->name.len, ta->name.ptr, a->target,
                              w->n_dims);
        uint64_t r = ta->ne[1];
        if (ta->n_dims != 2 || tb->n_dims != 2 || ta->ne[0] != w->ne[0] || tb->ne[1] != w->ne[1] ||
            tb->ne[0] != r || r == 0 || r > 65536)
            return rvl_seterr(RVL_EFORMAT, "%s: tensors %.*s (%llu x %llu) and %.*s (%llu x %llu) "
                              "do not fit %s (%llu x %llu): A must be r x %llu and B %llu x r",
                              path, (int)ta->name.len, ta->name.ptr,
                              (unsigned long long)(ta->n_dims == 2 ? ta->ne[1] : 1),
                              (unsigned long long)ta->ne[0], (int)tb->name.len, tb->name.ptr,
                              (unsigned long long)(tb->n_dims == 2 ? tb->ne[1] : 1),
                              (unsigned long long)tb->ne[0], a->target,
                              (unsigned long long)w->ne[1], (unsigned long long)w->ne[0],
                              (unsigned long long)w->ne[0], (unsigned long long)w->ne[1]);
        if (b->perm && (w->ne[1] % b->perm || (w->ne[1] / b->perm) % 2))
            return rvl_seterr(RVL_EFORMAT, "%s: %s: %llu rows are not whole heads of an even "
                              "size (%u heads)", path, a->target, (unsigned long long)w->ne[1], b->perm);
        rvl_lora_pair *p = &ad->pairs[ad->n_pairs];
        snprintf(p->name, sizeof p->name, "%s", a->target);
        p->r = (uint32_t)r;
        p->n_in = w->ne[0];
        p->n_out = w->ne[1];
        uint64_t na, nb;
        if (rvl_mul_ovf(r, p->n_in, &na) || rvl_mul_ovf(r, p->n_out, &nb) ||
            na > SIZE_MAX / sizeof(float) / 2 || nb > SIZE_MAX / sizeof(float) / 2)
            return rvl_seterr(RVL_ERANGE, "%s: %s: adapter too large", path, a->target);
        p->a = malloc((size_t)na * sizeof(float));
        p->bt = malloc((size_t)nb * sizeof(float));
        float *braw = malloc((size_t)nb * sizeof(float));
        int rc = 0;
        if (!p->a || !p->bt || !braw)
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        ad->n_pairs++;   /* owns a and bt from here */
        if (rc == 0 && (rc = read_f32(path, ta, p->a)) == 0)
            rc = read_f32(path, tb, braw);
        if (rc < 0) {
            free(braw);
            return rc;
        }
        double f = gguf_alpha ? (alpha != 0 ? alpha / (double)r : 1.0)
                              : rslora ? alpha / sqrt((double)r) : alpha / (double)r;
        float s = (float)((double)scale * f);
        for (uint64_t o = 0; o < p->n_out; o++) {
            uint64_t src = b->perm ? rvl_hf_row(o, b->perm, p->n_out) : o;
            for (uint64_t k = 0; k < r; k++)
                p->bt[k * p->n_out + o] = braw[src * r + k] * s;
        }
        free(braw);
        runtime_slot(p->name, &p->layer, &p->kind);
        if (p->r < ad->info.rank_min)
            ad->info.rank_min = p->r;
        if (p->r > ad->info.rank_max)
            ad->info.rank_max = p->r;
        ad->info.n_params += na + nb;
    }
    if (ad->n_pairs == 0)
        return rvl_seterr(RVL_EFORMAT, "%s: no LoRA tensors", path);
    ad->info.n_targets = ad->n_pairs;
    return 0;
}

/* ======================================================================
 * PEFT directories
 * ====================================================================== */
static bool jbool(const cJSON *o, const char *k)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* A config key whose value is set (not null, false, empty list/object). */
static bool jset(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v))
        return false;
    if ((cJSON_IsArray(v) || cJSON_IsObject(v)) && cJSON_GetArraySize(v) == 0)
        return false;
    return true;
}

static int peft_config(const char *dir, double *alpha, bool *rslora)
{
    char path[4096];
    rvl_map m = {0};
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    int rc = rvl_map_file(&m, path);
    if (rc < 0)
        return rc;
    cJSON *c = cJSON_ParseWithLength(m.base, (size_t)m.size);
    rvl_map_unmap(&m);
    if (!c || !cJSON_IsObject(c)) {
        cJSON_Delete(c);
        return rvl_seterr(RVL_EFORMAT, "%s: not a JSON object", path);
    }
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(c, "peft_type");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "lora_alpha");
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(c, "bias");
    rc = 0;
    if (pt && (!cJSON_IsString(pt) || strcmp(pt->valuestring, "LORA")))
        rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: peft_type %s: only LORA adapters are read", path,
                        cJSON_IsString(pt) ? pt->valuestring : "(not a string)");
    else if (jbool(c, "use_dora"))
        rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: use_dora is true: DoRA adapters (weight-decomposed "
                        "LoRA) are not supported; merge it with peft's merge_and_unload instead", path);
    else if (jset(c, "modules_to_save"))
        rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: modules_to_save: adapters that replace whole "
                        "modules are not supported", path);
    else if (jbool(c, "fan_in_fan_out"))
        rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: fan_in_fan_out: transposed (Conv1D) targets are "
                        "not supported", path);
    else if (bias && !(cJSON_IsString(bias) && !strcmp(bias->valuestring, "none")))
        rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: bias %s: adapters that train biases are not "
                        "supported", path, cJSON_IsString(bias) ? bias->valuestring : "(not a string)");
    else if (jbool(c, "lora_bias"))
        rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: lora_bias: a bias on lora_B is not supported", path);
    else if (jset(c, "alpha_pattern"))
        rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: alpha_pattern: per-module alphas are not supported", path);
    else if (jset(c, "layer_replication"))
        rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: layer_replication is not supported", path);
    else if (jset(c, "target_parameters"))
        rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: target_parameters (LoRA on parameters, not "
                        "modules) is not supported", path);
    else if (jset(c, "trainable_token_indices"))
        rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: trainable_token_indices is not supported", path);
    else if (jbool(c, "use_qalora"))
        rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: use_qalora is not supported", path);
    else if (!cJSON_IsNumber(a) || !isfinite(a->valuedouble) || fabs(a->valuedouble) > 1e9)
        rc = rvl_seterr(RVL_EFORMAT, "%s: missing or bad lora_alpha", path);
    if (rc == 0) {
        *alpha = a->valuedouble;
        *rslora = jbool(c, "use_rslora");
    }
    cJSON_Delete(c);
    return rc;
}

static bool ends_with(const char *s, size_t n, const char *suf)
{
    size_t k = strlen(suf);
    return n >= k && !memcmp(s + n - k, suf, k);
}

static bool contains(const char *s, size_t n, const char *what)
{
    return memmem(s, n, what, strlen(what)) != NULL;
}

static int load_peft(const rvl_lora *l, rvl_lora_adapter *ad, float scale)
{
    const char *dir = ad->path;
    double alpha = 0;
    bool rslora = false;
    char path[4096];
    int rc = peft_config(dir, &alpha, &rslora);
    if (rc < 0)
        return rc;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (access(path, F_OK) != 0) {
        snprintf(path, sizeof path, "%s/adapter_model.bin", dir);
        if (access(path, F_OK) == 0)
            return rvl_seterr(RVL_EUNSUPPORTED, "%s: PyTorch pickle files are not read: save the "
                              "adapter with safe_serialization (adapter_model.safetensors)", path);
        return rvl_seterr(RVL_ENOTFOUND, "%s: no adapter_model.safetensors", dir);
    }
    rvl_file *sf = NULL;
    if ((rc = rvl_file_open(&sf, path)) < 0)
        return rc;
    uint64_t nt = rvl_file_n_tensors(sf);
    ab_entry *e = NULL;
    if (nt > MAX_PAIRS_PER_BASE * (rvl_file_n_tensors(l->base) + 1)) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: %llu tensors for a base of %llu", path,
                        (unsigned long long)nt, (unsigned long long)rvl_file_n_tensors(l->base));
        goto out;
    }
    e = calloc(nt ? nt : 1, sizeof *e);
    if (!e) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto out;
    }
    static const char prefix[] = "base_model.model.";
    for (uint64_t i = 0; i < nt; i++) {
        const rvl_tensor_info *t = rvl_file_tensor(sf, i);
        const char *s = t->name.ptr;
        size_t n = (size_t)t->name.len;
        const char *why = NULL;
        bool is_b = false;
        if (contains(s, n, "lora_magnitude_vector"))
            why = "a DoRA magnitude vector: DoRA adapters are not supported";
        else if (contains(s, n, "modules_to_save"))
            why = "a modules_to_save copy: adapters that replace whole modules are not supported";
        else if (contains(s, n, "lora_embedding_"))
            why = "an embedding LoRA: not supported";
        else if (ends_with(s, n, ".lora_A.weight"))
            n -= sizeof ".lora_A.weight" - 1;
        else if (ends_with(s, n, ".lora_B.weight")) {
            n -= sizeof ".lora_B.weight" - 1;
            is_b = true;
        } else
            why = "not a LoRA A or B matrix";
        if (!why && (n < sizeof prefix - 1 || memcmp(s, prefix, sizeof prefix - 1)))
            why = "not under base_model.model.";
        if (why) {
            rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %.*s: %s", path, (int)t->name.len, s, why);
            goto out;
        }
        char hf[256];
        size_t k = n - (sizeof prefix - 1);
        if (k + sizeof ".weight" > sizeof hf) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: tensor name too long", path);
            goto out;
        }
        memcpy(hf, s + sizeof prefix - 1, k);
        strcpy(hf + k, ".weight");
        uint32_t perm = 0;
        int m = rvl_hf_tensor_name(l->arch, l->n_layer, l->n_head, l->n_head_kv, false, hf,
                                   e[i].target, sizeof e[i].target, &perm);
        if (m != 1) {
            rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %.*s: unknown target module %s for a %s "
                            "model of %u layers", path, (int)t->name.len, s, hf, l->arch, l->n_layer);
            goto out;
        }
        e[i].t = t;
        e[i].is_b = is_b;
        e[i].perm = is_b ? perm : 0;
    }
    ad->info.form = "peft";
    ad->info.alpha = alpha;
    ad->info.rslora = rslora;
    rc = build_pairs(l, ad, e, (size_t)nt, alpha, rslora, false, scale);
out:
    free(e);
    rvl_file_close(sf);
    return rc;
}

/* ======================================================================
 * llama.cpp GGUF LoRA files
 * ====================================================================== */
static int load_gguf(const rvl_lora *l, rvl_lora_adapter *ad, rvl_file *f, float scale)
{
    const char *path = ad->path;
    char got[64];
    if (!kv_str_is(f, "general.type", "adapter", got, sizeof got))
        return rvl_seterr(RVL_EFORMAT, "%s: not a LoRA adapter (general.type is %s%s%s)", path,
                          got[0] ? "'" : "", got[0] ? got : "absent", got[0] ? "'" : "");
    if (!kv_str_is(f, "adapter.type", "lora", got, sizeof got))
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: adapter.type %s%s%s: only LoRA adapters are read",
                          path, got[0] ? "'" : "", got[0] ? got : "absent", got[0] ? "'" : "");
    if (!kv_str_is(f, "general.architecture", l->arch, got, sizeof got))
        return rvl_seterr(RVL_EINVAL, "%s: an adapter for '%s', the base is '%s'", path, got, l->arch);
    double alpha = 0;
    const rvl_kv *kv = rvl_file_find_kv(f, "adapter.lora.alpha");
    if (kv && (rvl_kv_get_f64(kv, &alpha) < 0 || !isfinite(alpha) || fabs(alpha) > 1e9))
        return rvl_seterr(RVL_EFORMAT, "%s: bad adapter.lora.alpha (offset %llu)", path,
                          (unsigned long long)kv->offset);
    uint64_t nt = rvl_file_n_tensors(f);
    if (nt > MAX_PAIRS_PER_BASE * (rvl_file_n_tensors(l->base) + 1))
        return rvl_seterr(RVL_EFORMAT, "%s: %llu tensors for a base of %llu", path,
                          (unsigned long long)nt, (unsigned long long)rvl_file_n_tensors(l->base));
    ab_entry *e = calloc(nt ? nt : 1, sizeof *e);
    if (!e)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    int rc = 0;
    for (uint64_t i = 0; i < nt; i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        const char *s = t->name.ptr;
        size_t n = (size_t)t->name.len;
        bool is_b = ends_with(s, n, ".lora_b");
        if (!is_b && !ends_with(s, n, ".lora_a")) {
            rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %.*s: %s", path, (int)n, s,
                            ends_with(s, n, "_norm.weight") ? "norm replacements are not supported"
                                                            : "not a .lora_a or .lora_b tensor");
            goto out;
        }
        n -= sizeof ".lora_a" - 1;
        if (n >= sizeof e[i].target) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: tensor %.*s: name too long", path, (int)t->name.len, s);
            goto out;
        }
        memcpy(e[i].target, s, n);
        e[i].t = t;
        e[i].is_b = is_b;
    }
    ad->info.form = "gguf";
    ad->info.alpha = alpha;
    rc = build_pairs(l, ad, e, (size_t)nt, alpha, false, true, scale);
out:
    free(e);
    return rc;
}

/* ======================================================================
 * Adding an adapter to a set
 * ====================================================================== */
static int index_runtime(rvl_lora *l, const rvl_lora_adapter *ad)
{
    for (size_t i = 0; i < ad->n_pairs; i++) {
        const rvl_lora_pair *p = &ad->pairs[i];
        if (p->kind < 0 || (uint32_t)p->layer >= l->n_layer)
            return rvl_seterr(RVL_EUNSUPPORTED, "%s: target %s: only the attention and "
                              "feed-forward matrices of each layer are applied at run time; merge "
                              "the adapter with 'ruvllm lora-merge'", ad->path, p->name);
        if (p->r > RVL_LORA_MAX_RANK)
            return rvl_seterr(RVL_EUNSUPPORTED, "%s: target %s: rank %u is above the run-time "
                              "limit of %d; merge the adapter with 'ruvllm lora-merge'", ad->path,
                              p->name, p->r, RVL_LORA_MAX_RANK);
    }
    for (size_t i = 0; i < ad->n_pairs; i++) {
        const rvl_lora_pair *p = &ad->pairs[i];
        size_t s = (size_t)p->layer * RVL_LORA_N_KINDS + (size_t)p->kind;
        const rvl_lora_pair **v = realloc(l->slot[s], (l->slot_n[s] + 1) * sizeof *v);
        if (!v)
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        v[l->slot_n[s]++] = p;
        l->slot[s] = v;
    }
    return 0;
}

/* The pairs are read and checked; a set opened by rvl_lora_open (a
 * model) also indexes them for the forward pass. */
static int lora_add(rvl_lora *l, const char *path, float scale)
{
    rvl_lora_adapter *v = realloc(l->ad, (l->n + 1) * sizeof *v);
    if (!v)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    l->ad = v;
    rvl_lora_adapter *ad = &l->ad[l->n];
    memset(ad, 0, sizeof *ad);
    if (!(ad->path = strdup(path)))
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    ad->info.path = ad->path;
    ad->info.scale = scale;
    if (!isfinite(scale)) {
        adapter_free(ad);
        return rvl_seterr(RVL_EINVAL, "%s: scale is not a finite number", path);
    }

    struct stat sb;
    int rc;
    if (stat(path, &sb) != 0) {
        rc = rvl_seterr(RVL_EIO, "%s: no such adapter file or directory", path);
    } else if (S_ISDIR(sb.st_mode)) {
        rc = load_peft(l, ad, scale);
    } else {
        rvl_file *f = NULL;
        if ((rc = rvl_file_open(&f, path)) == 0) {
            if (rvl_file_fmt(f) != RVL_FMT_GGUF)
                rc = rvl_seterr(RVL_EFORMAT, "%s: a safetensors file alone is not an adapter: "
                                "give the PEFT directory (adapter_config.json and "
                                "adapter_model.safetensors)", path);
            else
                rc = load_gguf(l, ad, f, scale);
        }
        rvl_file_close(f);
    }
    if (rc == 0 && l->slot)
        rc = index_runtime(l, ad);
    if (rc < 0) {
        /* drop the adapter's entries from the run-time index again */
        if (l->slot)
            for (size_t s = 0; s < (size_t)l->n_layer * RVL_LORA_N_KINDS; s++)
                while (l->slot_n[s] && l->slot[s][l->slot_n[s] - 1] >= ad->pairs &&
                       l->slot[s][l->slot_n[s] - 1] < ad->pairs + ad->n_pairs)
                    l->slot_n[s]--;
        adapter_free(ad);
        return rc;
    }
    l->n++;
    return 0;
}

int rvl_lora_add(rvl_lora *l, const char *path, float scale)
{
    return lora_add(l, path, scale);
}

/* ======================================================================
 * The run-time product: y[t] += bt^T (A x[t])
 * ====================================================================== */
#if defined(__x86_64__) && defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#elif defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default"), optimize("tree-vectorize")))
#endif
static float dot_f32(const float *restrict a, const float *restrict b, uint64_t n)
{
    /* 8 partial sums: vectorizable without -ffast-math */
    float s[8] = {0};
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += a[i + k] * b[i + k];
    for (; i < n; i++)
        s[0] += a[i] * b[i];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

#if defined(__x86_64__) && defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#elif defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default"), optimize("tree-vectorize")))
#endif
static void axpy_f32(float *restrict y, float a, const float *restrict x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* y += s * B A x for one token, every pair of the slot. */
static void apply_token(const rvl_lora_pair *const *ps, uint32_t np, const float *x, float *y)
{
    float u[RVL_LORA_MAX_RANK];
    for (uint32_t i = 0; i < np; i++) {
        const rvl_lora_pair *p = ps[i];
        for (uint32_t k = 0; k < p->r; k++)
            u[k] = dot_f32(p->a + (size_t)k * p->n_in, x, p->n_in);
        for (uint32_t k = 0; k < p->r; k++)
            axpy_f32(y, u[k], p->bt + (size_t)k * p->n_out, p->n_out);
    }
}

typedef struct {
    const rvl_lora_pair *const *ps;
    uint32_t np, nb;
    const float *x;
    size_t x_stride;
    float *y;
    size_t y_stride;
} apply_job;

static void apply_part(void *arg, int ith, int nth)
{
    const apply_job *j = arg;
    for (uint32_t t = (uint32_t)ith; t < j->nb; t += (uint32_t)nth)
        apply_token(j->ps, j->np, j->x + t * j->x_stride, j->y + t * j->y_stride);
}

void rvl_lora_apply(const rvl_lora *l, rvl_pool *pool, uint32_t layer, rvl_lora_kind kind,
                    const float *x, size_t x_stride, uint32_t nb, float *y, size_t y_stride)
{
    if (!rvl_lora_has(l, layer, kind))
        return;
    size_t s = (size_t)layer * RVL_LORA_N_KINDS + (size_t)kind;
    apply_job j = {l->slot[s], l->slot_n[s], nb, x, x_stride, y, y_stride};
    if (nb > 1 && pool)
        rvl_pool_run(pool, apply_part, &j);
    else
        apply_part(&j, 0, 1);
}
