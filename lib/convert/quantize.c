/*
 * quantize.c - GGUF to quantized GGUF (`ruvllm quantize`).
 *
 *   plan      every tensor's output type (quant_mix.c: llama.cpp's rules)
 *   check     requantizing allowed, quantizer present, imatrix where needed
 *   write     metadata (general.file_type, general.quantization_version),
 *             tensor infos in llama-quantize's order, then the data: chunks
 *             of whole rows split over the thread pool, each row
 *             dequantized to f32 and quantized with its importance weights
 *
 * Memory: one chunk of output rows plus one f32 row per thread; inputs are
 * read from the mapping.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "convert/convert_int.h"
#include "formats.h"

#define NONE UINT32_MAX

/* ======================================================================
 * Importance matrix (llama.cpp's imatrix GGUF: "<tensor>.in_sum2" F32
 * [ne0, n_mat] and "<tensor>.counts" F32 [1, n_mat]; the weights are
 * in_sum2 / count per matrix, 1 where a matrix was never used).
 * ====================================================================== */
typedef struct {
    char *name;             /* the weight's name */
    float *v;               /* ne0 * n_mat values */
    uint64_t ne0, n_mat;
} imat_entry;

typedef struct {
    imat_entry *e;
    size_t n;
    uint32_t chunk_count;
    char *dataset;          /* first of imatrix.datasets, or NULL */
} imatrix;

static void imatrix_free(imatrix *im)
{
    for (size_t i = 0; i < im->n; i++) {
        free(im->e[i].name);
        free(im->e[i].v);
    }
    free(im->e);
    free(im->dataset);
    memset(im, 0, sizeof *im);
}

static int imatrix_load(imatrix *im, const char *path)
{
    rvl_file *f = NULL;
    int rc = rvl_file_open(&f, path);
    memset(im, 0, sizeof *im);
    if (rc < 0)
        return rc;
    if (rvl_file_fmt(f) != RVL_FMT_GGUF) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: not an imatrix GGUF file", path);
        goto out;
    }
    uint64_t nt = rvl_file_n_tensors(f);
    im->e = calloc(nt ? nt : 1, sizeof *im->e);
    if (!im->e) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto out;
    }
    static const char suf[] = ".in_sum2";
    const size_t sl = sizeof suf - 1;
    for (uint64_t i = 0; i < nt; i++) {
        const rvl_tensor_info *s = rvl_file_tensor(f, i);
        if (s->name.len <= sl || memcmp(s->name.ptr + s->name.len - sl, suf, sl) != 0)
            continue;
        size_t bl = (size_t)(s->name.len - sl);
        char cname[256];
        if (bl + 8 > sizeof cname) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: tensor name too long", path);
            goto out;
        }
        memcpy(cname, s->name.ptr, bl);
        strcpy(cname + bl, ".counts");
        const rvl_tensor_info *c = rvl_file_find_tensor(f, cname);
        if (!c) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: %.*s has no %s", path, (int)s->name.len, s->name.ptr, cname);
            goto out;
        }
        if (s->type != RVL_TYPE_F32 || c->type != RVL_TYPE_F32 || c->n_elements == 0 ||
            s->n_elements % c->n_elements != 0 || s->n_elements == 0) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: %.*s: expected F32 sums of n_mat x ne0 and n_mat "
                            "F32 counts (offset %llu)", path, (int)s->name.len, s->name.ptr,
                            (unsigned long long)s->offset);
            goto out;
        }
        if (s->n_elements > SIZE_MAX / sizeof(float)) {
            rc = rvl_seterr(RVL_ERANGE, "%s: imatrix entry too large", path);
            goto out;
        }
        imat_entry *e = &im->e[im->n];
        e->n_mat = c->n_elements;
        e->ne0 = s->n_elements / c->n_elements;
        e->name = strndup(s->name.ptr, bl);
        e->v = malloc((size_t)s->n_elements * sizeof(float));
        if (!e->name || !e->v) {
            free(e->name);
            free(e->v);
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
            goto out;
        }
        im->n++;
        for (uint64_t j = 0; j < e->n_mat; j++) {
            float cnt, x;
            memcpy(&cnt, (const char *)c->data + j * 4, 4);
            for (uint64_t k = 0; k < e->ne0; k++) {
                memcpy(&x, (const char *)s->data + (j * e->ne0 + k) * 4, 4);
                float v = cnt > 0.0f ? x / cnt : 1.0f;
                if (!isfinite(v)) {
                    rc = rvl_seterr(RVL_EFORMAT, "%s: %s: non-finite importance value", path, e->name);
                    goto out;
                }
                e->v[j * e->ne0 + k] = v;
            }
        }
    }
    if (im->n == 0) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: no imatrix entries (<name>.in_sum2 tensors); the "
                        "legacy .dat format is not read", path);
        goto out;
    }
    const rvl_kv *kv = rvl_file_find_kv(f, "imatrix.chunk_count");
    uint64_t cc;
    if (kv && rvl_kv_get_u64(kv, &cc) == 0)
        im->chunk_count = cc > UINT32_MAX ? UINT32_MAX : (uint32_t)cc;
    kv = rvl_file_find_kv(f, "imatrix.datasets");
    if (kv && kv->type == RVL_GGUF_ARRAY && kv->arr_type == RVL_GGUF_STRING && kv->n > 0)
        im->dataset = strndup(kv->strs[0].ptr, (size_t)kv->strs[0].len);
    rc = 0;
out:
    rvl_file_close(f);
    if (rc < 0)
        imatrix_free(im);
    return rc;
}

static const imat_entry *imatrix_find(const imatrix *im, const char *name)
{
    for (size_t i = 0; i < im->n; i++)
        if (strcmp(im->e[i].name, name) == 0)
            return &im->e[i];
    return NULL;
}

/* ======================================================================
 * Model facts the rules need
 * ====================================================================== */
static uint32_t kv_u32(const rvl_file *f, const char *arch, const char *suffix)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    uint64_t v = 0;
    if (!kv)
        return 0;
    if (kv->type == RVL_GGUF_ARRAY) {        /* per-layer values: the first */
        if (kv->n == 0 || kv->arr_type == RVL_GGUF_STRING)
            return 0;
        int64_t x = rvl_kv_arr_i64(kv, 0);
        return x < 0 || x > UINT32_MAX ? 0 : (uint32_t)x;
    }
    if (rvl_kv_get_u64(kv, &v) < 0 || v > UINT32_MAX)
        return 0;
    return (uint32_t)v;
}

/* ======================================================================
 * The per-chunk worker
 * ====================================================================== */
typedef struct {
    const rvl_kformat *kin, *kout;
    const char *src;         /* first input row of the chunk */
    char *dst;               /* first output row of the chunk */
    uint64_t in_row, out_row, ne0;
    uint64_t row0, m;        /* global index of the first row, rows in the chunk */
    uint64_t rows_per_mat;   /* ne[1]: rows of one matrix (expert) */
    const imat_entry *im;
    float **scratch;         /* per thread: 2 * ne0 floats */
    double *sse, *ssx;       /* per thread, with stats */
    bool stats;
} chunk_job;

static void chunk_run(void *arg, int ith, int nth)
{
    chunk_job *j = arg;
    uint64_t per = (j->m + (uint64_t)nth - 1) / (uint64_t)nth;
    uint64_t a = per * (uint64_t)ith, b = a + per < j->m ? a + per : j->m;
    float *x = j->scratch[ith], *y = x + j->ne0;
    double sse = 0, ssx = 0;
    for (uint64_t r = a; r < b; r++) {
        const float *qw = NULL;
        if (j->im) {
            uint64_t mat = (j->row0 + r) / j->rows_per_mat;
            qw = j->im->v + (mat < j->im->n_mat ? mat : 0) * j->ne0;
        }
        j->kin->dequantize(j->src + r * j->in_row, x, (int64_t)j->ne0);
        char *out = j->dst + r * j->out_row;
        j->kout->quantize(x, out, (int64_t)j->ne0, qw);
        if (j->stats) {
            j->kout->dequantize(out, y, (int64_t)j->ne0);
            for (uint64_t k = 0; k < j->ne0; k++) {
                double d = (double)y[k] - (double)x[k];
                sse += d * d;
                ssx += (double)x[k] * (double)x[k];
            }
        }
    }
    if (j->stats) {
        j->sse[ith] += sse;
        j->ssx[ith] += ssx;
    }
}

/* ======================================================================
 * The pipeline
 * ====================================================================== */
typedef struct {
    const rvl_tensor_info *t;
    char name[64];
    uint32_t type_out;
    uint64_t bytes_out;
    const imat_entry *im;
    bool fallback;
} qtensor;

void rvl_quantize_report_free(rvl_quantize_report *r)
{
    if (!r)
        return;
    free(r->tensors);
    memset(r, 0, sizeof *r);
}

static int layer_of(const char *name)
{
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1)
        l = -1;
    return l;
}

static int by_layer_name(const void *a, const void *b)
{
    const qtensor *x = a, *y = b;
    int lx = layer_of(x->name), ly = layer_of(y->name);
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return strcmp(x->name, y->name);
}

static const char *tname(uint32_t type)
{
    const rvl_type_info *ti = rvl_type_get(type);
    return ti ? ti->name : "?";
}

/* Plan every tensor and check that the plan can be carried out. */
static int plan(const char *in, const rvl_file *f, const rvl_quantize_params *p,
                const rvl_qmix *mix, const imatrix *im, qtensor *q, uint64_t n,
                uint64_t *n_fallback, uint64_t *n_no_imatrix)
{
    rvl_qmix_tensor *mt = calloc(n ? n : 1, sizeof *mt);
    uint32_t *types = calloc(n ? n : 1, sizeof *types);
    int rc = 0;
    if (!mt || !types) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto out;
    }
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = q[i].t;
        if (t->n_dims > 4) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: %s: %u dimensions", in, q[i].name, t->n_dims);
            goto out;
        }
        mt[i].name = q[i].name;
        mt[i].type = t->type;
        mt[i].n_dims = t->n_dims;
        for (uint32_t d = 0; d < 4; d++)
            mt[i].ne[d] = d < t->n_dims ? t->ne[d] : 1;
    }

    rvl_qmix_params mp = {0};
    const rvl_kv *akv = rvl_file_find_kv(f, "general.architecture");
    rvl_str as = {0};
    char arch[32] = "";
    if (akv && rvl_kv_get_str(akv, &as) == 0)
        snprintf(arch, sizeof arch, "%.*s", (int)(as.len > 31 ? 31 : as.len), as.ptr);
    mp.mix = mix;
    mp.arch = arch;
    mp.n_layer = kv_u32(f, arch, "block_count");
    mp.n_head = kv_u32(f, arch, "attention.head_count");
    mp.n_head_kv = kv_u32(f, arch, "attention.head_count_kv");
    if (!mp.n_head_kv)
        mp.n_head_kv = mp.n_head;
    mp.n_expert = kv_u32(f, arch, "expert_count");
    mp.is_70b = strcmp(arch, "llama") == 0 && mp.n_layer == 80 && mp.n_head != mp.n_head_kv;
    mp.has_imatrix = im->n > 0;
    mp.pure = p->pure;
    mp.leave_output = p->leave_output;
    mp.output_type = p->output_type;
    mp.embd_type = p->embd_type;
    mp.overrides = p->overrides;
    mp.n_overrides = p->n_overrides;
    size_t nfb = 0;
    if ((rc = rvl_qmix_plan(&mp, mt, (size_t)n, types, &nfb)) < 0)
        goto out;
    *n_fallback = nfb;

    *n_no_imatrix = 0;
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = q[i].t;
        uint32_t to = types[i];
        q[i].type_out = to;
        if (to == t->type) {
            q[i].bytes_out = t->nbytes;
            continue;
        }
        const rvl_kformat *kin = rvl_kformat_get(t->type), *kout = rvl_kformat_get(to);
        if (!kin || !kin->dequantize) {
            rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %s: cannot read %s as floats", in,
                            q[i].name, tname(t->type));
            goto out;
        }
        if (!kout || !kout->quantize || (kout->flags & RVL_KF_ACT)) {
            rc = rvl_seterr(RVL_EUNSUPPORTED, "tensor %s: ruvllm has no quantizer for %s",
                            q[i].name, tname(to));
            goto out;
        }
        if ((kin->flags & RVL_KF_QUANTIZED) && !p->allow_requantize) {
            rc = rvl_seterr(RVL_EINVAL, "%s: tensor %s is already %s: requantizing loses "
                            "quality (use --allow-requantize, or start from an F16/BF16/F32 file)",
                            in, q[i].name, tname(t->type));
            goto out;
        }
        uint64_t rows = t->ne[0] ? t->n_elements / t->ne[0] : 0;
        if (t->ne[0] % kout->block_size != 0) {
            rc = rvl_seterr(RVL_EINVAL, "tensor %s: rows of %llu are not whole %s blocks of %u",
                            q[i].name, (unsigned long long)t->ne[0], tname(to), kout->block_size);
            goto out;
        }
        uint64_t rb = rvl_kformat_row_bytes(kout, t->ne[0]);
        if (rvl_mul_ovf(rb, rows, &q[i].bytes_out)) {
            rc = rvl_seterr(RVL_ERANGE, "tensor %s: size overflows", q[i].name);
            goto out;
        }
        const rvl_kformat *kmix = rvl_kformat_get(mix->type);
        q[i].fallback = kmix && (t->ne[0] % kmix->block_size) != 0;
        if (im->n) {
            const imat_entry *e = imatrix_find(im, q[i].name);
            uint64_t n_mat = t->n_dims >= 3 ? t->ne[2] : 1;
            if (e && (e->ne0 != t->ne[0] || e->n_mat != n_mat)) {
                bool embd = strcmp(q[i].name, "token_embd.weight") == 0;
                if (!embd) {
                    rc = rvl_seterr(RVL_EINVAL, "imatrix entry %s has %llu x %llu values, the "
                                    "tensor needs %llu x %llu", q[i].name,
                                    (unsigned long long)e->n_mat, (unsigned long long)e->ne0,
                                    (unsigned long long)n_mat, (unsigned long long)t->ne[0]);
                    goto out;
                }
                e = NULL;
            }
            q[i].im = e;
            if (!e)
                (*n_no_imatrix)++;
        }
        if (!q[i].im && rvl_qmix_needs_imatrix(mix, q[i].name, to) && !p->dry_run) {
            rc = rvl_seterr(RVL_EINVAL, "tensor %s: %s in a %s file needs an importance matrix "
                            "(--imatrix FILE)", q[i].name, tname(to), mix->name);
            goto out;
        }
    }
out:
    free(mt);
    free(types);
    return rc;
}

static int quantize_tensor(rvl_gguf_writer *w, uint64_t idx, const qtensor *q, rvl_pool *pool,
                           float **scratch, char *obuf, uint64_t obuf_cap, bool stats,
                           double *sse, double *ssx, rvl_quantize_tensor_stat *st)
{
    const rvl_tensor_info *t = q->t;
    if (q->type_out == t->type)
        return rvl_gguf_writer_tensor_data(w, idx, t->data, t->nbytes);

    int nth = rvl_pool_size(pool);
    chunk_job j = {0};
    j.kin = rvl_kformat_get(t->type);
    j.kout = rvl_kformat_get(q->type_out);
    j.ne0 = t->ne[0];
    j.in_row = rvl_kformat_row_bytes(j.kin, j.ne0);
    j.out_row = rvl_kformat_row_bytes(j.kout, j.ne0);
    j.rows_per_mat = t->n_dims >= 2 && t->ne[1] ? t->ne[1] : 1;
    j.im = q->im;
    j.scratch = scratch;
    j.stats = stats;
    j.sse = sse;
    j.ssx = ssx;
    for (int i = 0; i < nth; i++)
        sse[i] = ssx[i] = 0;
    uint64_t rows = j.ne0 ? t->n_elements / j.ne0 : 0;
    uint64_t chunk = obuf_cap / j.out_row;
    for (uint64_t r = 0; r < rows; r += chunk) {
        if (rvl_interrupted())
            return rvl_seterr(RVL_EINTR, "interrupted");
        j.row0 = r;
        j.m = rows - r < chunk ? rows - r : chunk;
        j.src = (const char *)t->data + r * j.in_row;
        j.dst = obuf;
        rvl_pool_run(pool, chunk_run, &j);
        if (w) {
            int rc = rvl_gguf_writer_tensor_data(w, idx, obuf, j.m * j.out_row);
            if (rc < 0)
                return rc;
        }
    }
    if (stats) {
        double e = 0, x = 0;
        for (int i = 0; i < nth; i++) {
            e += sse[i];
            x += ssx[i];
        }
        st->rmse = t->n_elements ? sqrt(e / (double)t->n_elements) : 0;
        st->rms = t->n_elements ? sqrt(x / (double)t->n_elements) : 0;
    }
    return 0;
}

int rvl_quantize_gguf(const char *in, const char *out, const rvl_quantize_params *p,
                      rvl_quantize_report *report)
{
    rvl_file *f = NULL;
    rvl_gguf_writer *w = NULL;
    rvl_pool *pool = NULL;
    imatrix im = {0};
    qtensor *q = NULL;
    float **scratch = NULL;
    double *sse = NULL, *ssx = NULL;
    char *obuf = NULL;
    rvl_quantize_tensor_stat *st = NULL;
    int nth = 0, rc;
    double t0 = rvl_bench_now();

    if (report)
        memset(report, 0, sizeof *report);
    const rvl_qmix *mix = p->mix ? rvl_qmix_find(p->mix) : NULL;
    if (!mix)
        return rvl_seterr(RVL_EINVAL, "unknown quantization type '%s'", p->mix ? p->mix : "");
    if (!p->dry_run && !out)
        return rvl_seterr(RVL_EINVAL, "quantize: no output path");
    if (!p->dry_run && (rc = rvl_convert_check_paths(in, out)) < 0)
        return rc;
    if ((rc = rvl_convert_open_input(in, out, &f)) < 0)
        return rc;
    if (p->imatrix && (rc = imatrix_load(&im, p->imatrix)) < 0)
        goto fail;

    uint64_t n = rvl_file_n_tensors(f);
    q = calloc(n ? n : 1, sizeof *q);
    st = calloc(n ? n : 1, sizeof *st);
    if (!q || !st) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        q[i].t = t;
        if (t->name.len >= sizeof q[i].name) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: tensor name of %llu bytes (at most 63)", in,
                            (unsigned long long)t->name.len);
            goto fail;
        }
        memcpy(q[i].name, t->name.ptr, (size_t)t->name.len);
    }
    qsort(q, (size_t)n, sizeof *q, by_layer_name);   /* llama-quantize's order */
    uint64_t n_fallback = 0, n_no_im = 0;
    if ((rc = plan(in, f, p, mix, &im, q, n, &n_fallback, &n_no_im)) < 0)
        goto fail;

    uint64_t total_in = 0, total_out = 0, n_el = 0, max_ne0 = 1, max_row = 1, cap = 8ull << 20;
    for (uint64_t i = 0; i < n; i++) {
        total_in += q[i].t->nbytes;
        total_out += q[i].bytes_out;
        n_el += q[i].t->n_elements;
        if (q[i].t->ne[0] > max_ne0)
            max_ne0 = q[i].t->ne[0];
        const rvl_kformat *ko = rvl_kformat_get(q[i].type_out);
        if (ko && q[i].type_out != q[i].t->type) {
            uint64_t rb = rvl_kformat_row_bytes(ko, q[i].t->ne[0]);
            if (rb > max_row)
                max_row = rb;
        }
        rvl_quantize_tensor_stat *s = &st[i];
        memcpy(s->name, q[i].name, sizeof s->name);
        s->type_in = q[i].t->type;
        s->type_out = q[i].type_out;
        s->n_elements = q[i].t->n_elements;
        s->bytes_in = q[i].t->nbytes;
        s->bytes_out = q[i].bytes_out;
        s->fallback = q[i].fallback;
        s->imatrix = q[i].im != NULL;
    }

    if (!p->dry_run) {
        if ((rc = rvl_pool_open(&pool, p->n_threads)) < 0)
            goto fail;
        nth = rvl_pool_size(pool);
        if (max_ne0 > SIZE_MAX / 8) {
            rc = rvl_seterr(RVL_ERANGE, "%s: rows too long", in);
            goto fail;
        }
        scratch = calloc((size_t)nth, sizeof *scratch);
        sse = calloc((size_t)nth, sizeof *sse);
        ssx = calloc((size_t)nth, sizeof *ssx);
        /* output chunk: ~8 MiB, at least one row */
        if (cap < max_row)
            cap = max_row;
        obuf = malloc((size_t)cap);
        if (!scratch || !sse || !ssx || !obuf) {
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
            goto fail;
        }
        for (int i = 0; i < nth; i++)
            if (!(scratch[i] = malloc((size_t)max_ne0 * 2 * sizeof(float)))) {
                rc = rvl_seterr(RVL_ENOMEM, "out of memory");
                goto fail;
            }

        static const char *const drop[] = {"split.no", "split.count", "split.tensors.count",
                                           "ruvllm.file_type", "quantize.imatrix.file",
                                           "quantize.imatrix.dataset",
                                           "quantize.imatrix.entries_count",
                                           "quantize.imatrix.chunks_count", NULL};
        if ((rc = rvl_gguf_writer_open(&w, out)) < 0 ||
            (rc = rvl_convert_write_kvs(w, f, mix->ftype, RVL_GGML_QNT_VERSION, drop)) < 0)
            goto fail;
        if (mix->ftype == RVL_FTYPE_NONE &&
            (rc = rvl_gguf_writer_kv_str(w, "ruvllm.file_type", mix->name)) < 0)
            goto fail;
        if (p->imatrix && ((rc = rvl_gguf_writer_kv_str(w, "quantize.imatrix.file", p->imatrix)) < 0 ||
                           (im.dataset && (rc = rvl_gguf_writer_kv_str(w, "quantize.imatrix.dataset",
                                                                       im.dataset)) < 0) ||
                           (rc = rvl_gguf_writer_kv_i32(w, "quantize.imatrix.entries_count",
                                                        (int32_t)im.n)) < 0 ||
                           (rc = rvl_gguf_writer_kv_i32(w, "quantize.imatrix.chunks_count",
                                                        (int32_t)im.chunk_count)) < 0))
            goto fail;
        for (uint64_t i = 0; i < n; i++)
            if ((rc = rvl_gguf_writer_add_tensor(w, q[i].name, q[i].type_out, q[i].t->n_dims,
                                                 q[i].t->ne, NULL)) < 0)
                goto fail;
        if ((rc = rvl_gguf_writer_begin_data(w)) < 0)
            goto fail;
    }

    uint64_t done = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (p->progress)
            p->progress(p->ud, &(rvl_convert_progress){i, n, q[i].name, q[i].t->type,
                                                        q[i].type_out, q[i].t->n_dims,
                                                        q[i].t->ne, done, total_in});
        if (!p->dry_run &&
            (rc = quantize_tensor(w, i, &q[i], pool, scratch, obuf, cap,
                                  p->stats, sse, ssx, &st[i])) < 0) {
            if (rc != RVL_EINTR)
                rvl_preerr(rc, "tensor %s", q[i].name);
            goto fail;
        }
        done += q[i].t->nbytes;
    }
    if (p->progress)
        p->progress(p->ud, &(rvl_convert_progress){n, n, "", 0, 0, 0, NULL, total_in, total_in});

    uint64_t file_bytes = 0;
    if (!p->dry_run) {
        rc = rvl_gguf_writer_finish(w);
        w = NULL;
        if (rc < 0)
            goto fail;
        struct stat sb;
        if (stat(out, &sb) == 0)
            file_bytes = (uint64_t)sb.st_size;
    }
    if (report) {
        report->n_tensors = n;
        report->tensors = st;
        st = NULL;
        report->n_elements = n_el;
        report->bytes_in = total_in;
        report->bytes_out = total_out;
        report->n_fallback = n_fallback;
        report->n_no_imatrix = n_no_im;
        report->file_bytes = file_bytes;
        report->seconds = rvl_bench_now() - t0;
    }
    rc = 0;
    goto done;
fail:
    rvl_gguf_writer_abort(w);
done:
    for (int i = 0; scratch && i < nth; i++)
        free(scratch[i]);
    free(scratch);
    free(sse);
    free(ssx);
    free(obuf);
    free(q);
    free(st);
    rvl_pool_close(pool);
    imatrix_free(&im);
    rvl_file_close(f);
    return rc;
}
