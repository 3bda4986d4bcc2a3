/*
 * lora_merge.c - LoRA adapters merged into a GGUF base (`ruvllm lora-merge`).
 *
 *   load      every adapter, checked against the base (lora.c)
 *   plan      output types: each tensor's own, or --type's mix by the
 *             quantize rules (quant_mix.c); merged tensors need a quantizer
 *   write     metadata copied (general.file_type for --type), tensor infos
 *             in the base's order, then the data: untouched tensors of an
 *             unchanged type copied; the others in chunks of whole rows over
 *             the thread pool, each row dequantized to f32, the updates
 *             sum_k bt[k][o] * A[k] of every adapter added, and quantized
 *
 * Memory: the adapters in f32, one output chunk, one f32 row per thread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "convert/convert_int.h"
#include "formats.h"
#include "engine/lora_int.h"

#define NONE UINT32_MAX
#define MAX_SPEC_PATH 4096

typedef struct {
    const rvl_tensor_info *t;
    char name[64];
    uint32_t type_out;
    uint64_t bytes_out;
    const rvl_lora_pair **pairs;    /* owned array of borrowed pairs */
    uint32_t n_pairs;
} mtensor;

/* ======================================================================
 * The tensors: the base's, each with the adapter pairs that update it
 * ====================================================================== */
/* q[0..n): the tensors of f in its order, their type kept, and each
 * adapter pair of l added to its base tensor's (lora.c checked that it
 * exists). *n_merged: the tensors with at least one pair. q[i].pairs are
 * owned by q also on failure. */
static int plan_tensors(const char *base, const rvl_file *f, const rvl_lora *l, mtensor *q,
                        uint64_t n, uint64_t *n_merged)
{
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        q[i].t = t;
        q[i].type_out = t->type;
        if (t->name.len >= sizeof q[i].name)
            return rvl_seterr(RVL_EFORMAT, "%s: tensor name of %llu bytes (at most 63)", base,
                              (unsigned long long)t->name.len);
        memcpy(q[i].name, t->name.ptr, (size_t)t->name.len);
    }
    for (size_t a = 0; a < l->n; a++)
        for (size_t k = 0; k < l->ad[a].n_pairs; k++) {
            const rvl_lora_pair *pr = &l->ad[a].pairs[k];
            const rvl_tensor_info *t = rvl_file_find_tensor(f, pr->name);
            uint64_t i = 0;
            while (i < n && q[i].t != t)
                i++;
            if (i == n)
                return rvl_seterr(RVL_ENOTFOUND, "tensor %s is not in %s", pr->name, base);
            const rvl_lora_pair **v = realloc(q[i].pairs, (q[i].n_pairs + 1) * sizeof *v);
            if (!v)
                return rvl_seterr(RVL_ENOMEM, "out of memory");
            if (q[i].n_pairs == 0)
                (*n_merged)++;
            v[q[i].n_pairs++] = pr;
            q[i].pairs = v;
        }
    return 0;
}

/* ======================================================================
 * The per-chunk worker
 * ====================================================================== */
typedef struct {
    const rvl_kformat *kin, *kout;
    const char *src;
    char *dst;
    uint64_t in_row, out_row, ne0, row0, m;
    const rvl_lora_pair *const *pairs;
    uint32_t n_pairs;
    float **scratch;                /* per thread: ne0 floats */
} merge_job;

#if defined(__x86_64__) && defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#elif defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default"), optimize("tree-vectorize")))
#endif
static void axpy(float *restrict y, float a, const float *restrict x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

static void merge_rows(void *arg, int ith, int nth)
{
    merge_job *j = arg;
    uint64_t per = (j->m + (uint64_t)nth - 1) / (uint64_t)nth;
    uint64_t a = per * (uint64_t)ith, b = a + per < j->m ? a + per : j->m;
    float *x = j->scratch[ith];
    for (uint64_t r = a; r < b; r++) {
        uint64_t o = j->row0 + r;
        j->kin->dequantize(j->src + r * j->in_row, x, (int64_t)j->ne0);
        for (uint32_t i = 0; i < j->n_pairs; i++) {
            const rvl_lora_pair *p = j->pairs[i];
            for (uint32_t k = 0; k < p->r; k++)
                axpy(x, p->bt[(size_t)k * p->n_out + o], p->a + (size_t)k * p->n_in, j->ne0);
        }
        j->kout->quantize(x, j->dst + r * j->out_row, (int64_t)j->ne0, NULL);
    }
}

static int write_tensor(rvl_gguf_writer *w, uint64_t idx, const mtensor *q, rvl_pool *pool,
                        float **scratch, char *obuf, uint64_t cap)
{
    const rvl_tensor_info *t = q->t;
    if (q->type_out == t->type && q->n_pairs == 0)
        return rvl_gguf_writer_tensor_data(w, idx, t->data, t->nbytes);
    merge_job j = {0};
    j.kin = rvl_kformat_get(t->type);
    j.kout = rvl_kformat_get(q->type_out);
    j.ne0 = t->ne[0];
    j.in_row = rvl_kformat_row_bytes(j.kin, j.ne0);
    j.out_row = rvl_kformat_row_bytes(j.kout, j.ne0);
    j.pairs = q->pairs;
    j.n_pairs = q->n_pairs;
    j.scratch = scratch;
    uint64_t rows = j.ne0 ? t->n_elements / j.ne0 : 0, chunk = cap / j.out_row;
    for (uint64_t r = 0; r < rows; r += chunk) {
        if (rvl_interrupted())
            return rvl_seterr(RVL_EINTR, "interrupted");
        j.row0 = r;
        j.m = rows - r < chunk ? rows - r : chunk;
        j.src = (const char *)t->data + r * j.in_row;
        j.dst = obuf;
        rvl_pool_run(pool, merge_rows, &j);
        int rc = rvl_gguf_writer_tensor_data(w, idx, obuf, j.m * j.out_row);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ======================================================================
 * Planning
 * ====================================================================== */
static const char *tname(uint32_t type)
{
    const rvl_type_info *ti = rvl_type_get(type);
    return ti ? ti->name : "?";
}

static int layer_of(const char *name)
{
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1)
        l = -1;
    return l;
}

/* llama-quantize's order, which the mix rules count in. */
static int by_layer_name(const void *a, const void *b)
{
    const mtensor *x = *(const mtensor *const *)a, *y = *(const mtensor *const *)b;
    int lx = layer_of(x->name), ly = layer_of(y->name);
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int plan_mix(const rvl_file *f, const rvl_lora *l, const rvl_qmix *mix, mtensor *q,
                    uint64_t n, uint64_t *n_fallback)
{
    mtensor **ord = calloc(n ? n : 1, sizeof *ord);
    rvl_qmix_tensor *mt = calloc(n ? n : 1, sizeof *mt);
    uint32_t *types = calloc(n ? n : 1, sizeof *types);
    int rc = 0;
    if (!ord || !mt || !types) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto out;
    }
    for (uint64_t i = 0; i < n; i++)
        ord[i] = &q[i];
    qsort(ord, (size_t)n, sizeof *ord, by_layer_name);
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = ord[i]->t;
        if (t->n_dims > 4) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: %s: %u dimensions", rvl_file_path(f), ord[i]->name, t->n_dims);
            goto out;
        }
        mt[i].name = ord[i]->name;
        mt[i].type = t->type;
        mt[i].n_dims = t->n_dims;
        for (uint32_t d = 0; d < 4; d++)
            mt[i].ne[d] = d < t->n_dims ? t->ne[d] : 1;
    }
    rvl_qmix_params mp = {0};
    mp.mix = mix;
    mp.arch = l->arch;
    mp.n_layer = l->n_layer;
    mp.n_head = l->n_head;
    mp.n_head_kv = l->n_head_kv;
    char key[64];
    snprintf(key, sizeof key, "%s.expert_count", l->arch);
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    uint64_t ne = 0;
    if (kv && rvl_kv_get_u64(kv, &ne) == 0 && ne <= UINT32_MAX)
        mp.n_expert = (uint32_t)ne;
    mp.is_70b = !strcmp(l->arch, "llama") && mp.n_layer == 80 && mp.n_head != mp.n_head_kv;
    mp.output_type = mp.embd_type = NONE;
    size_t nfb = 0;
    if ((rc = rvl_qmix_plan(&mp, mt, (size_t)n, types, &nfb)) < 0)
        goto out;
    *n_fallback = nfb;
    for (uint64_t i = 0; i < n; i++)
        ord[i]->type_out = types[i];
out:
    free(ord);
    free(mt);
    free(types);
    return rc;
}

/* Can every conversion the plan asks for be done? Sizes the outputs. */
static int check_plan(const rvl_qmix *mix, mtensor *q, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = q[i].t;
        if (q[i].type_out == t->type && q[i].n_pairs == 0) {
            q[i].bytes_out = t->nbytes;
            continue;
        }
        const rvl_kformat *kin = rvl_kformat_get(t->type), *kout = rvl_kformat_get(q[i].type_out);
        if (!kin || !kin->dequantize)
            return rvl_seterr(RVL_EUNSUPPORTED, "tensor %s: cannot read %s as floats", q[i].name,
                              tname(t->type));
        if (!kout || !kout->quantize || (kout->flags & RVL_KF_ACT) ||
            rvl_qmix_needs_imatrix(mix, q[i].name, q[i].type_out))
            return rvl_seterr(RVL_EUNSUPPORTED, "tensor %s: ruvllm cannot write %s%s (choose "
                              "another with --type)", q[i].name, tname(q[i].type_out),
                              kout && kout->quantize ? " without an importance matrix" : "");
        if (t->ne[0] % kout->block_size != 0)
            return rvl_seterr(RVL_EINVAL, "tensor %s: rows of %llu are not whole %s blocks of %u",
                              q[i].name, (unsigned long long)t->ne[0], tname(q[i].type_out),
                              kout->block_size);
        uint64_t rows = t->ne[0] ? t->n_elements / t->ne[0] : 0;
        if (rvl_mul_ovf(rvl_kformat_row_bytes(kout, t->ne[0]), rows, &q[i].bytes_out))
            return rvl_seterr(RVL_ERANGE, "tensor %s: size overflows", q[i].name);
    }
    return 0;
}

/* ======================================================================
 * The pipeline
 * ====================================================================== */
/* The output's metadata (the base's, with general.file_type for --type)
 * and tensor infos, up to the start of the data. */
static int write_header(rvl_gguf_writer *w, const rvl_file *f, const rvl_qmix *mix,
                        const mtensor *q, uint64_t n)
{
    uint32_t ftype = RVL_FTYPE_NONE, qver = 0;
    const rvl_kv *fkv = rvl_file_find_kv(f, "general.file_type");
    uint64_t fv;
    if (mix) {
        ftype = mix->ftype;
        const rvl_kformat *km = rvl_kformat_get(mix->type);
        qver = km && (km->flags & RVL_KF_QUANTIZED) ? RVL_GGML_QNT_VERSION : 0;
    } else if (fkv && rvl_kv_get_u64(fkv, &fv) == 0 && fv < UINT32_MAX) {
        ftype = (uint32_t)fv;
    }
    static const char *const drop_mix[] = {"split.no", "split.count", "split.tensors.count",
                                           "ruvllm.file_type", NULL};
    static const char *const drop_own[] = {"split.no", "split.count", "split.tensors.count", NULL};
    int rc;
    if ((rc = rvl_convert_write_kvs(w, f, ftype, qver, mix ? drop_mix : drop_own)) < 0)
        return rc;
    if (mix && mix->ftype == RVL_FTYPE_NONE &&
        (rc = rvl_gguf_writer_kv_str(w, "ruvllm.file_type", mix->name)) < 0)
        return rc;
    for (uint64_t i = 0; i < n; i++)
        if ((rc = rvl_gguf_writer_add_tensor(w, q[i].name, q[i].type_out, q[i].t->n_dims,
                                             q[i].t->ne, NULL)) < 0)
            return rc;
    return rvl_gguf_writer_begin_data(w);
}

void rvl_lora_merge_report_free(rvl_lora_merge_report *r)
{
    if (!r)
        return;
    rvl_quantize_report_free(&r->q);
    free(r->adapters);
    memset(r, 0, sizeof *r);
}

int rvl_lora_merge(const char *base, const char *const *specs, size_t n_specs, const char *out,
                   const rvl_lora_merge_params *p, rvl_lora_merge_report *report)
{
    rvl_file *f = NULL;
    rvl_lora *l = NULL;
    rvl_gguf_writer *w = NULL;
    rvl_pool *pool = NULL;
    mtensor *q = NULL;
    float **scratch = NULL;
    char *obuf = NULL;
    rvl_quantize_tensor_stat *st = NULL;
    rvl_lora_info *infos = NULL;
    uint64_t n = 0;
    int nth = 0, rc;
    double t0 = rvl_bench_now();
    const rvl_lora_merge_params dp = {0};

    if (report)
        memset(report, 0, sizeof *report);
    if (!p)
        p = &dp;
    if (n_specs == 0)
        return rvl_seterr(RVL_EINVAL, "no adapters to merge");
    if (!out)
        return rvl_seterr(RVL_EINVAL, "lora-merge: no output path");
    const rvl_qmix *mix = NULL;
    if (p->type && !(mix = rvl_qmix_find(p->type)))
        return rvl_seterr(RVL_EINVAL, "unknown type '%s'", p->type);
    if ((rc = rvl_convert_check_paths(base, out)) < 0)
        return rc;
    if ((rc = rvl_file_open(&f, base)) < 0)
        return rc;
    if ((rc = rvl_lora_open_file(&l, f)) < 0)
        goto fail;
    for (size_t i = 0; i < n_specs; i++) {
        char path[MAX_SPEC_PATH];
        float scale;
        if ((rc = rvl_lora_parse_spec(specs[i], path, sizeof path, &scale)) < 0 ||
            (rc = rvl_lora_add(l, path, scale)) < 0)
            goto fail;
    }

    n = rvl_file_n_tensors(f);
    q = calloc(n ? n : 1, sizeof *q);
    st = calloc(n ? n : 1, sizeof *st);
    if (!q || !st) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }
    uint64_t n_merged = 0;
    if ((rc = plan_tensors(base, f, l, q, n, &n_merged)) < 0)
        goto fail;

    uint64_t n_fallback = 0;
    if (mix && (rc = plan_mix(f, l, mix, q, n, &n_fallback)) < 0)
        goto fail;
    if ((rc = check_plan(mix, q, n)) < 0)
        goto fail;

    uint64_t total_in = 0, total_out = 0, n_el = 0, max_ne0 = 1, max_row = 1, cap = 8ull << 20;
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = q[i].t;
        total_in += t->nbytes;
        total_out += q[i].bytes_out;
        n_el += t->n_elements;
        if (t->ne[0] > max_ne0)
            max_ne0 = t->ne[0];
        if (q[i].type_out != t->type || q[i].n_pairs) {
            uint64_t rb = rvl_kformat_row_bytes(rvl_kformat_get(q[i].type_out), t->ne[0]);
            if (rb > max_row)
                max_row = rb;
        }
        rvl_quantize_tensor_stat *s = &st[i];
        memcpy(s->name, q[i].name, sizeof s->name);
        s->type_in = t->type;
        s->type_out = q[i].type_out;
        s->n_elements = t->n_elements;
        s->bytes_in = t->nbytes;
        s->bytes_out = q[i].bytes_out;
    }

    if ((rc = rvl_pool_open(&pool, p->n_threads)) < 0)
        goto fail;
    nth = rvl_pool_size(pool);
    if (max_ne0 > SIZE_MAX / 8) {
        rc = rvl_seterr(RVL_ERANGE, "%s: rows too long", base);
        goto fail;
    }
    if (cap < max_row)
        cap = max_row;
    scratch = calloc((size_t)nth, sizeof *scratch);
    obuf = malloc((size_t)cap);
    if (!scratch || !obuf) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < nth; i++)
        if (!(scratch[i] = malloc((size_t)max_ne0 * sizeof(float)))) {
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
            goto fail;
        }

    if ((rc = rvl_gguf_writer_open(&w, out)) < 0 || (rc = write_header(w, f, mix, q, n)) < 0)
        goto fail;

    uint64_t done = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (p->progress)
            p->progress(p->ud, &(rvl_convert_progress){i, n, q[i].name, q[i].t->type,
                                                        q[i].type_out, q[i].t->n_dims,
                                                        q[i].t->ne, done, total_in});
        if ((rc = write_tensor(w, i, &q[i], pool, scratch, obuf, cap)) < 0) {
            if (rc != RVL_EINTR)
                rvl_preerr(rc, "tensor %s", q[i].name);
            goto fail;
        }
        done += q[i].t->nbytes;
    }
    if (p->progress)
        p->progress(p->ud, &(rvl_convert_progress){n, n, "", 0, 0, 0, NULL, total_in, total_in});
    rc = rvl_gguf_writer_finish(w);
    w = NULL;
    if (rc < 0)
        goto fail;

    if (report) {
        struct stat sb;
        infos = calloc(l->n, sizeof *infos);
        if (!infos) {
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
            goto fail;
        }
        for (size_t a = 0; a < l->n; a++) {
            infos[a] = l->ad[a].info;
            infos[a].path = specs[a];   /* the caller's, which outlive the report */
        }
        report->q.n_tensors = n;
        report->q.tensors = st;
        st = NULL;
        report->q.n_elements = n_el;
        report->q.bytes_in = total_in;
        report->q.bytes_out = total_out;
        report->q.n_fallback = n_fallback;
        report->q.file_bytes = stat(out, &sb) == 0 ? (uint64_t)sb.st_size : 0;
        report->q.seconds = rvl_bench_now() - t0;
        report->n_adapters = l->n;
        report->adapters = infos;
        infos = NULL;
        report->n_merged = n_merged;
    }
    rc = 0;
    goto done;
fail:
    rvl_gguf_writer_abort(w);
done:
    for (int i = 0; scratch && i < nth; i++)
        free(scratch[i]);
    free(scratch);
    free(obuf);
    for (uint64_t i = 0; q && i < n; i++)
        free(q[i].pairs);
    free(q);
    free(st);
    free(infos);
    rvl_pool_close(pool);
    rvl_lora_close(l);
    rvl_file_close(f);
    return rc;
}
