/*
 * pull.c - `ruvllm pull`: a GGUF file from the Hugging Face Hub into the
 * model store (the steps: lib/ruvllm_tools.h, "Pulling a model").
 *
 * libcurl does the HTTP (TLS, redirects, proxies from the environment);
 * OpenSSL's libcrypto the sha256 (libcurl4-openssl-dev already links it,
 * so it adds no library to the process). The file is written to a .part
 * beside its destination, hashed as it arrives, and renamed into place
 * only once its size and sha256 are the hub's: the store holds whole,
 * verified files or nothing, and a .part is only ever continued.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <openssl/evp.h>

#include "ruvllm_tools.h"

#define PULL_MAX_LISTING ((size_t)64 << 20)   /* bytes of tree JSON, all pages */
#define PULL_MAX_PAGES 100
#define PULL_DEFAULT_QUANT "Q4_K_M"           /* llama.cpp's -hf default */
#define PULL_ENDPOINT "https://huggingface.co"

/* ---------------------------------------------------------------- the spec */

static bool name_char(int c)
{
    return isalnum(c) || c == '-' || c == '_' || c == '.';
}

/* A repository or quant part: [A-Za-z0-9._-]+, not starting with '.' or
 * '-' (so never "..", a hidden folder or an option). */
static bool good_part(const char *s, size_t n)
{
    if (n == 0 || s[0] == '.' || s[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!name_char((unsigned char)s[i]))
            return false;
    return true;
}

static bool ends_gguf(const char *s)
{
    size_t n = strlen(s);
    return n > 5 && strcasecmp(s + n - 5, ".gguf") == 0;
}

int rvl_pull_parse(const char *spec, char *repo, size_t repo_cap, char *quant, size_t quant_cap)
{
    static const char *const prefixes[] = {"https://huggingface.co/", "https://hf.co/",
                                           "huggingface.co/", "hf.co/"};
    const char *s = spec;
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (strncasecmp(s, prefixes[i], strlen(prefixes[i])) == 0) {
            s += strlen(prefixes[i]);
            break;
        }
    const char *colon = strchr(s, ':');
    size_t rn = colon ? (size_t)(colon - s) : strlen(s);
    const char *slash = memchr(s, '/', rn);
    if (!slash || !good_part(s, (size_t)(slash - s)) ||
        !good_part(slash + 1, rn - (size_t)(slash - s) - 1))
        return rvl_seterr(RVL_EINVAL, "'%s' is not a Hugging Face model: give OWNER/REPO[:QUANT] "
                          "(e.g. bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M)", spec);
    const char *q = colon ? colon + 1 : "";
    bool ok = colon ? good_part(q, strlen(q)) : true;
    if (colon && ends_gguf(q)) {   /* a file: a path of good parts */
        ok = true;
        for (const char *c = q; c && ok;) {
            const char *e = strchr(c, '/');
            ok = good_part(c, e ? (size_t)(e - c) : strlen(c));
            c = e ? e + 1 : NULL;
        }
    }
    if (!ok)
        return rvl_seterr(RVL_EINVAL, "'%s': the part after ':' must be a quantization type "
                          "(Q4_K_M, Q8_0, ...) or a .gguf file name", spec);
    if (rn >= repo_cap || strlen(q) >= quant_cap)
        return rvl_seterr(RVL_ERANGE, "'%s': name too long", spec);
    memcpy(repo, s, rn);
    repo[rn] = 0;
    strcpy(quant, q);
    return 0;
}

/* ---------------------------------------------------------------- HTTP */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

typedef struct {
    const rvl_pull_params *p;
    const char *endpoint, *token, *ca;
    char auth[4096];
    char next[4096];        /* the listing's next page (Link rel="next"), "" when none */
    char range[64];         /* Content-Range of the last response */
    long status;            /* of the final response, once its body starts */
    /* the body: into mem (listing, error text) or the file */
    rvl_buf mem;
    size_t mem_max;
    int fd;                 /* -1: the body goes to mem */
    uint64_t have;          /* bytes of the file on disk (a .part continued + this body) */
    uint64_t total;         /* the size the hub gave */
    uint64_t resumed_from;
    bool restarted, too_big, write_failed, first;
    int write_errno;
    EVP_MD_CTX *sha;
    CURL *h;
} xfer;

static const char *env_first(const char *a, const char *b, const char *c)
{
    const char *names[] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        const char *v = names[i] ? getenv(names[i]) : NULL;
        if (v && *v)
            return v;
    }
    return NULL;
}

/* Header lines, for every response (redirects too): the last status line
 * resets what the previous response said. */
static size_t on_header(char *line, size_t size, size_t n, void *ud)
{
    xfer *x = ud;
    size_t len = size * n;
    char buf[4096];
    size_t k = len < sizeof buf - 1 ? len : sizeof buf - 1;
    memcpy(buf, line, k);
    buf[k] = 0;
    while (k && (buf[k - 1] == '\r' || buf[k - 1] == '\n'))
        buf[--k] = 0;
    if (strncasecmp(buf, "HTTP/", 5) == 0) {
        x->next[0] = x->range[0] = 0;
    } else if (strncasecmp(buf, "Content-Range:", 14) == 0) {
        snprintf(x->range, sizeof x->range, "%s", buf + 14 + strspn(buf + 14, " \t"));
    } else if (strncasecmp(buf, "Link:", 5) == 0) {
        /* <URL>; rel="next" (one link per header in the hub's answers) */
        char *lt = strchr(buf, '<'), *gt = lt ? strchr(lt, '>') : NULL;
        if (lt && gt && strstr(gt, "rel=\"next\"") && (size_t)(gt - lt - 1) < sizeof x->next) {
            memcpy(x->next, lt + 1, (size_t)(gt - lt - 1));
            x->next[gt - lt - 1] = 0;
        }
    }
    return len;
}

/* The start of a body: a range the server did not honour restarts the
 * file from 0 (and its hash). */
static int body_start(xfer *x)
{
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->fd < 0 || (x->status != 200 && x->status != 206))
        return 0;
    if (x->status == 206) {
        unsigned long long from = 0;
        if (sscanf(x->range, "bytes %llu-", &from) != 1 || from != x->have)
            return -1;   /* not the range asked for: refused below */
        return 0;
    }
    if (x->have > 0) {   /* 200 to a Range request: the whole file again */
        if (ftruncate(x->fd, 0) != 0 || lseek(x->fd, 0, SEEK_SET) != 0) {
            x->write_failed = true;
            x->write_errno = errno;
            return -1;
        }
        x->have = 0;
        x->restarted = true;
        EVP_DigestInit_ex(x->sha, EVP_sha256(), NULL);
    }
    return 0;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud)
{
    xfer *x = ud;
    size_t len = size * n;
    if (x->first) {
        x->first = false;
        if (body_start(x) < 0)
            return 0;
    }
    if (x->fd < 0 || (x->status != 200 && x->status != 206)) {
        /* a listing, or an error's text (kept short) */
        size_t room = x->mem.n < x->mem_max ? x->mem_max - x->mem.n : 0;
        if (len > room) {
            if (x->fd < 0 && x->status < 300) {
                x->too_big = true;
                return 0;
            }
            len = room;   /* an error's text: its beginning is enough */
        }
        if (rvl_buf_add(&x->mem, data, len) < 0)
            return 0;
        return size * n;
    }
    if (x->total && x->have + len > x->total) {
        x->too_big = true;
        return 0;
    }
    for (size_t off = 0; off < len;) {
        ssize_t w = write(x->fd, data + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            x->write_failed = true;
            x->write_errno = errno;
            return 0;
        }
        off += (size_t)w;
    }
    EVP_DigestUpdate(x->sha, data, len);
    x->have += len;
    return len;
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    xfer *x = ud;
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    if (rvl_interrupted())
        return 1;
    if (x->fd >= 0 && x->p && x->p->progress && !x->first)
        x->p->progress(x->p->user, x->have, x->total);
    return 0;
}

/* GET url into x (its fd or mem); `range`: continue from x->have. */
static int http_get(xfer *x, const char *url, bool range)
{
    char err[CURL_ERROR_SIZE] = "", rng[40];
    struct curl_slist *hdr = NULL;
    x->h = curl_easy_init();
    if (!x->h)
        return rvl_seterr(RVL_ENOMEM, "libcurl: out of memory");
    x->status = 0;
    x->first = true;
    x->too_big = x->write_failed = false;
    if (x->auth[0])
        hdr = curl_slist_append(hdr, x->auth);
    curl_easy_setopt(x->h, CURLOPT_URL, url);
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(x->h, CURLOPT_USERAGENT, "ruvllm/" RVL_VERSION);
    curl_easy_setopt(x->h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(x->h, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(x->h, CURLOPT_PROTOCOLS_STR, "https,http");
    curl_easy_setopt(x->h, CURLOPT_REDIR_PROTOCOLS_STR, "https,http");
    curl_easy_setopt(x->h, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(x->h, CURLOPT_LOW_SPEED_LIMIT, 1L);     /* a stalled transfer: */
    curl_easy_setopt(x->h, CURLOPT_LOW_SPEED_TIME, 120L);    /* given up, .part kept */
    curl_easy_setopt(x->h, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(x->h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(x->h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(x->h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(x->h, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(x->h, CURLOPT_ACCEPT_ENCODING, x->fd < 0 ? "" : NULL);
    if (x->ca)
        curl_easy_setopt(x->h, CURLOPT_CAINFO, x->ca);
    if (range && x->have > 0) {
        /* set by hand, not CURLOPT_RESUME_FROM: libcurl would fail on a
         * server that answers 200, which must restart the file instead */
        snprintf(rng, sizeof rng, "%llu-", (unsigned long long)x->have);
        curl_easy_setopt(x->h, CURLOPT_RANGE, rng);
    }
    CURLcode cc = curl_easy_perform(x->h);
    if (x->status == 0)
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
    curl_easy_cleanup(x->h);
    x->h = NULL;
    curl_slist_free_all(hdr);

    if (cc == CURLE_ABORTED_BY_CALLBACK && rvl_interrupted())
        return rvl_seterr(RVL_EINTR, "interrupted");
    if (x->write_failed)
        return rvl_seterr(RVL_EIO, "writing the download: %s", strerror(x->write_errno));
    if (x->too_big && x->fd < 0)
        return rvl_seterr(RVL_EFORMAT, "%s: the file listing is over %zu bytes", url, x->mem_max);
    if (x->too_big)
        return rvl_seterr(RVL_EFORMAT, "%s: the server sends more bytes than the hub says "
                          "the file has (%llu)", url, (unsigned long long)x->total);
    if (x->status >= 400) {
        const char *why = x->status == 401 || x->status == 403
                              ? ": not found, or private or gated (set HF_TOKEN to a token "
                                "that may read it)"
                          : x->status == 404 ? ": not found"
                                             : "";
        return rvl_seterr(x->status == 404 || x->status == 401 ? RVL_ENOTFOUND : RVL_EIO,
                          "%s: HTTP %ld%s", url, x->status, why);
    }
    if (x->status == 206 && cc == CURLE_WRITE_ERROR)
        return rvl_seterr(RVL_EIO, "%s: the server answered the range '%s', not bytes %llu-",
                          url, x->range, (unsigned long long)x->have);
    if (cc != CURLE_OK)
        return rvl_seterr(RVL_EIO, "%s: %s", url, err[0] ? err : curl_easy_strerror(cc));
    if (x->status != 200 && x->status != 206)
        return rvl_seterr(RVL_EIO, "%s: unexpected HTTP %ld", url, x->status);
    return 0;
}

/* ---------------------------------------------------------------- the listing */

typedef struct {
    char *path;
    uint64_t size;
    char sha256[65];    /* "" when the hub gives none (not an LFS file) */
} gguf_file;

static bool is_hex64(const char *s)
{
    if (!s || strlen(s) != 64)
        return false;
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    return true;
}

/* A repository path we may mirror under the store: relative, no "." or
 * ".." or hidden component, no empty one, printable. */
static bool safe_path(const char *p)
{
    if (!*p || *p == '/' || strlen(p) > 1000)
        return false;
    for (const char *c = p; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == '\\')
            return false;
    for (const char *s = p; s;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 0 || s[0] == '.')
            return false;
        s = e ? e + 1 : NULL;
    }
    return true;
}

/* The page's GGUF files appended to *files. */
static int parse_page(const char *json, const char *url, gguf_file **files, size_t *n)
{
    cJSON *j = cJSON_Parse(json);
    if (!cJSON_IsArray(j)) {
        cJSON_Delete(j);
        return rvl_seterr(RVL_EFORMAT, "%s: not the hub's file listing (a JSON array)", url);
    }
    int rc = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, j) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "type");
        const cJSON *path = cJSON_GetObjectItemCaseSensitive(e, "path");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(e, "size");
        const cJSON *lfs = cJSON_GetObjectItemCaseSensitive(e, "lfs");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "file") != 0 ||
            !cJSON_IsString(path) || !ends_gguf(path->valuestring))
            continue;
        if (!safe_path(path->valuestring))
            continue;   /* nothing a hub lists, and nothing we will write */
        const cJSON *oid = cJSON_GetObjectItemCaseSensitive(lfs, "oid");
        const cJSON *lsize = cJSON_GetObjectItemCaseSensitive(lfs, "size");
        const cJSON *sz = cJSON_IsNumber(lsize) ? lsize : size;
        if (!cJSON_IsNumber(sz) || sz->valuedouble < 0 || sz->valuedouble > 9.0e15)
            continue;
        gguf_file *f = realloc(*files, (*n + 1) * sizeof *f);
        if (!f) {
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
            break;
        }
        *files = f;
        f = &f[*n];
        f->path = strdup(path->valuestring);
        f->size = (uint64_t)sz->valuedouble;
        f->sha256[0] = 0;
        if (cJSON_IsString(oid) && strncmp(oid->valuestring, "sha256:", 7) == 0 &&
            is_hex64(oid->valuestring + 7))
            snprintf(f->sha256, sizeof f->sha256, "%s", oid->valuestring + 7);
        else if (cJSON_IsString(oid) && is_hex64(oid->valuestring))
            snprintf(f->sha256, sizeof f->sha256, "%s", oid->valuestring);
        for (char *c = f->sha256; *c; c++)
            *c = (char)tolower((unsigned char)*c);
        if (!f->path) {
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
            break;
        }
        (*n)++;
    }
    cJSON_Delete(j);
    return rc;
}

static int list_gguf(xfer *x, const char *repo, gguf_file **files, size_t *n)
{
    char url[4096];
    int rc = 0;
    snprintf(url, sizeof url, "%s/api/models/%s/tree/main?recursive=true", x->endpoint, repo);
    for (int page = 0; page < PULL_MAX_PAGES; page++) {
        x->fd = -1;
        x->mem_max = PULL_MAX_LISTING;
        rvl_buf_free(&x->mem);
        if ((rc = http_get(x, url, false)) < 0) {
            if (rc == RVL_ENOTFOUND)
                rvl_seterr(rc, "%s: no such model repository on %s (%s)", repo, x->endpoint,
                           rvl_errmsg());
            break;
        }
        if ((rc = rvl_buf_add(&x->mem, "", 0)) < 0 ||
            (rc = parse_page(x->mem.p, url, files, n)) < 0 || !x->next[0])
            break;
        snprintf(url, sizeof url, "%s", x->next);
    }
    rvl_buf_free(&x->mem);
    return rc;
}

/* ---------------------------------------------------------------- choosing */

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* quant appears in the file name as a word: after the start or one of
 * "-._", followed by '-' or '.' (so "Q4_K" is not found in "Q4_K_M"). */
static bool has_quant(const char *path, const char *quant)
{
    const char *b = base_name(path);
    size_t k = strlen(quant);
    for (const char *s = b; *s; s++)
        if ((s == b || strchr("-._", s[-1])) && strncasecmp(s, quant, k) == 0 &&
            (s[k] == '-' || s[k] == '.'))
            return true;
    return false;
}

/* ... and ends the name: "X-Q4_K_M.gguf" rather than "X-Q4_K_M-imat.gguf" */
static bool ends_with_quant(const char *path, const char *quant)
{
    const char *b = base_name(path);
    size_t n = strlen(b), k = strlen(quant);
    return n >= k + 6 && strncasecmp(b + n - 5 - k, quant, k) == 0 && strchr("-._", b[n - 6 - k]);
}

static bool is_split(const char *path)
{
    const char *m = strstr(base_name(path), "-of-");
    unsigned a, b;
    return m && m - base_name(path) >= 6 && sscanf(m - 6, "-%5u-of-%5u", &a, &b) == 2;
}

static bool is_mmproj(const char *path)
{
    return strncasecmp(base_name(path), "mmproj", 6) == 0;
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const gguf_file *)a)->path, ((const gguf_file *)b)->path);
}

/* The tag of a name chosen without a quant: the file name's last word. */
static void tag_of(const char *path, char *tag, size_t cap)
{
    const char *b = base_name(path);
    size_t n = strlen(b) - 5;
    size_t s = n;
    while (s > 0 && b[s - 1] != '-' && b[s - 1] != '.')
        s--;
    if (s == n)
        s = 0;
    snprintf(tag, cap, "%.*s", (int)(n - s), b + s);
}

static int choose(const char *repo, const char *quant, gguf_file *f, size_t n, long *pick,
                  char *tag, size_t tag_cap)
{
    if (n) /* a repository without files: f may be NULL */
        qsort(f, n, sizeof *f, by_path);
    size_t cand[256], nc = 0;
    const char *want = *quant ? quant : PULL_DEFAULT_QUANT;
    bool by_file = ends_gguf(want);
    for (size_t i = 0; i < n && nc < 256; i++)
        if (!is_mmproj(f[i].path) &&
            (by_file ? strcasecmp(f[i].path, want) == 0 || strcasecmp(base_name(f[i].path), want) == 0
                     : has_quant(f[i].path, want)))
            cand[nc++] = i;
    if (nc == 0 && !*quant)   /* no Q4_K_M: the first GGUF file, as llama.cpp */
        for (size_t i = 0; i < n && nc == 0; i++)
            if (!is_mmproj(f[i].path))
                cand[nc++] = i;
    if (nc > 1 && !by_file) {   /* prefer the names that end with the quant */
        size_t k = 0;
        for (size_t i = 0; i < nc; i++)
            if (ends_with_quant(f[cand[i]].path, want))
                cand[k++] = cand[i];
        if (k)
            nc = k;
    }

    rvl_buf b = {0};
    const char *sep = "";
    for (size_t i = 0; i < (nc ? nc : n); i++) {
        const char *p = f[nc ? cand[i] : i].path;
        if (!nc && is_mmproj(p))
            continue;
        rvl_buf_adds(&b, sep);
        rvl_buf_adds(&b, p);
        sep = ", ";
    }
    char *list = rvl_buf_take(&b);
    int rc = 0;
    if (n == 0)
        rc = rvl_seterr(RVL_ENOTFOUND, "%s has no GGUF file", repo);
    else if (nc == 0)
        rc = rvl_seterr(RVL_ENOTFOUND, "%s has no GGUF file for '%s'; its GGUF files: %s", repo,
                        want, list ? list : "?");
    else if (is_split(f[cand[0]].path))
        rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: '%s' is split into several files (%s): ruvllm "
                        "reads one-file GGUF models; merge them with llama-gguf-split --merge, "
                        "or choose another quantization", repo, want, list ? list : "?");
    else if (nc > 1)
        rc = rvl_seterr(RVL_EINVAL, "%s: '%s' matches %zu files (%s): give the file, "
                        "%s:FILE.gguf", repo, want, nc, list ? list : "?", repo);
    free(list);
    if (rc < 0)
        return rc;
    *pick = (long)cand[0];
    if (*quant && !by_file) {
        snprintf(tag, tag_cap, "%s", quant);
        for (char *c = tag; *c; c++)
            *c = (char)toupper((unsigned char)*c);
    } else if (!*quant && has_quant(f[cand[0]].path, PULL_DEFAULT_QUANT)) {
        snprintf(tag, tag_cap, "%s", PULL_DEFAULT_QUANT);
    } else {
        tag_of(f[cand[0]].path, tag, tag_cap);
    }
    return 0;
}

/* ---------------------------------------------------------------- files */

static int mkdirs(const char *file)
{
    char dir[4096];
    if ((size_t)snprintf(dir, sizeof dir, "%s", file) >= sizeof dir)
        return rvl_seterr(RVL_ERANGE, "%s: path too long", file);
    for (char *s = dir + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(dir, 0755) != 0 && errno != EEXIST)
                return rvl_seterr(RVL_EIO, "%s: %s", dir, strerror(errno));
            *s = '/';
        }
    return 0;
}

static void hex(const unsigned char *d, unsigned n, char *out)
{
    for (unsigned i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* Hash the first x->have bytes of x->fd into x->sha (a .part continued). */
static int hash_existing(xfer *x, const char *part)
{
    unsigned char buf[1 << 16];
    uint64_t left = x->have;
    if (lseek(x->fd, 0, SEEK_SET) != 0)
        return rvl_seterr(RVL_EIO, "%s: %s", part, strerror(errno));
    while (left) {
        if (rvl_interrupted())
            return rvl_seterr(RVL_EINTR, "interrupted");
        ssize_t r = read(x->fd, buf, left < sizeof buf ? (size_t)left : sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return rvl_seterr(RVL_EIO, "%s: %s", part, r < 0 ? strerror(errno) : "short read");
        EVP_DigestUpdate(x->sha, buf, (size_t)r);
        left -= (uint64_t)r;
    }
    return lseek(x->fd, 0, SEEK_END) < 0 ? rvl_seterr(RVL_EIO, "%s: %s", part, strerror(errno)) : 0;
}

static bool already_there(const rvl_pull_result *r)
{
    rvl_store_entry *list;
    size_t n;
    bool yes = false;
    struct stat st;
    if (!r->sha256[0] || stat(r->path, &st) != 0 || (uint64_t)st.st_size != r->size ||
        rvl_store_list(&list, &n) < 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i].path, r->path) == 0 && list[i].sha256 &&
            strcmp(list[i].sha256, r->sha256) == 0)
            yes = true;
    rvl_store_list_free(list, n);
    return yes;
}

/* Download into r->path + ".part", check, commit. */
static int fetch(xfer *x, rvl_pull_result *r)
{
    char part[4200];
    int rc;
    snprintf(part, sizeof part, "%s.part", r->path);
    if ((rc = mkdirs(part)) < 0)
        return rc;
    x->fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (x->fd < 0)
        return rvl_seterr(RVL_EIO, "%s: %s", part, strerror(errno));
    struct stat st;
    if (fstat(x->fd, &st) != 0) {
        rc = rvl_seterr(RVL_EIO, "%s: %s", part, strerror(errno));
        goto out;
    }
    x->have = (uint64_t)st.st_size;
    x->total = r->size;
    if (x->have > r->size) {   /* not a prefix of this file: start again */
        if (ftruncate(x->fd, 0) != 0) {
            rc = rvl_seterr(RVL_EIO, "%s: %s", part, strerror(errno));
            goto out;
        }
        x->have = 0;
    }
    if (!(x->sha = EVP_MD_CTX_new()) || !EVP_DigestInit_ex(x->sha, EVP_sha256(), NULL)) {
        rc = rvl_seterr(RVL_ENOMEM, "libcrypto: cannot start a sha256");
        goto out;
    }
    if ((rc = hash_existing(x, part)) < 0)
        goto out;
    r->resumed_from = x->have;
    if (x->have < r->size) {
        x->mem_max = 4096;
        rvl_buf_free(&x->mem);
        rc = http_get(x, r->url, true);
        r->restarted = x->restarted;
        if (rc == RVL_EIO && x->have < r->size && x->status / 100 == 2)
            rvl_seterr(rc, "%s; %llu of %llu bytes are in %s: pull again to continue",
                       rvl_errmsg(), (unsigned long long)x->have,
                       (unsigned long long)r->size, part);
        if (rc < 0)
            goto out;
    }
    if (x->have != r->size) {
        rc = rvl_seterr(RVL_EIO, "%s: the download ended at %llu of %llu bytes; pull again to "
                        "continue", r->url, (unsigned long long)x->have,
                        (unsigned long long)r->size);
        goto out;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdn = 0;
    char got[65];
    EVP_DigestFinal_ex(x->sha, md, &mdn);
    hex(md, 32, got);
    if (r->sha256[0] && strcmp(got, r->sha256) != 0) {
        unlink(part);
        rc = rvl_seterr(RVL_EFORMAT, "%s: sha256 mismatch: the download's is %s, the hub's is "
                        "%s; the file was deleted (pull again; if it repeats, the server or a "
                        "proxy corrupts it)", r->file, got, r->sha256);
        goto out;
    }
    snprintf(r->sha256, sizeof r->sha256, "%s", got);
    if (fsync(x->fd) != 0) {
        rc = rvl_seterr(RVL_EIO, "%s: fsync: %s", part, strerror(errno));
        goto out;
    }
    if ((rc = rvl_store_write_manifest(r->path, r->name, r->repo, r->file, r->sha256, r->size,
                                       r->url)) < 0)
        goto out;
    if (rename(part, r->path) != 0) {
        rc = rvl_seterr(RVL_EIO, "%s: %s", r->path, strerror(errno));
        goto out;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", r->path);
    *strrchr(dir, '/') = 0;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
out:
    EVP_MD_CTX_free(x->sha);
    x->sha = NULL;
    close(x->fd);
    x->fd = -1;
    if (rc < 0 && rc != RVL_EFORMAT && x->have == 0)
        unlink(part);   /* nothing to continue: no empty .part left behind */
    return rc;
}

/* ---------------------------------------------------------------- rvl_pull */

int rvl_pull(const char *spec, const rvl_pull_params *p, rvl_pull_result *r)
{
    static const rvl_pull_params none = {0};
    char quant[256], root[4096], tag[256];
    int rc;
    memset(r, 0, sizeof *r);
    if (!p)
        p = &none;
    if ((rc = rvl_pull_parse(spec, r->repo, sizeof r->repo, quant, sizeof quant)) < 0 ||
        (rc = rvl_store_dir(root, sizeof root)) < 0)
        return rc;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return rvl_seterr(RVL_EIO, "libcurl: %s", curl_easy_strerror(curl_init_rc));

    xfer x = {.p = p, .fd = -1};
    x.endpoint = p->endpoint ? p->endpoint : env_first("RUVLLM_HF_ENDPOINT", "HF_ENDPOINT", NULL);
    if (!x.endpoint)
        x.endpoint = PULL_ENDPOINT;
    char endpoint[1024];
    snprintf(endpoint, sizeof endpoint, "%s", x.endpoint);
    for (size_t k = strlen(endpoint); k > 0 && endpoint[k - 1] == '/';)
        endpoint[--k] = 0;
    x.endpoint = endpoint;
    x.token = p->token ? p->token : env_first("HF_TOKEN", NULL, NULL);
    x.ca = p->ca_bundle ? p->ca_bundle
                        : env_first("RUVLLM_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE");
    if (x.token && *x.token)
        snprintf(x.auth, sizeof x.auth, "Authorization: Bearer %s", x.token);

    gguf_file *files = NULL;
    size_t n = 0;
    long pick = -1;
    if ((rc = list_gguf(&x, r->repo, &files, &n)) < 0 ||
        (rc = choose(r->repo, quant, files, n, &pick, tag, sizeof tag)) < 0)
        goto out;
    const gguf_file *f = &files[pick];
    snprintf(r->file, sizeof r->file, "%s", f->path);
    if ((size_t)snprintf(r->name, sizeof r->name, "hf.co/%s:%s", r->repo, tag) >= sizeof r->name) {
        rc = rvl_seterr(RVL_ERANGE, "%s: name too long", r->repo);
        goto out;
    }
    snprintf(r->sha256, sizeof r->sha256, "%s", f->sha256);
    r->unverified = !f->sha256[0];
    r->size = f->size;
    if ((size_t)snprintf(r->path, sizeof r->path, "%s/hf.co/%s/%s", root, r->repo, f->path) >=
        sizeof r->path) {
        rc = rvl_seterr(RVL_ERANGE, "%s: store path too long", f->path);
        goto out;
    }
    /* the URL: the path's components escaped, its slashes kept */
    rvl_buf u = {0};
    rvl_buf_adds(&u, x.endpoint);
    rvl_buf_adds(&u, "/");
    rvl_buf_adds(&u, r->repo);
    rvl_buf_adds(&u, "/resolve/main");
    for (const char *s = f->path; s;) {
        const char *e = strchr(s, '/');
        char *esc = curl_easy_escape(NULL, s, e ? (int)(e - s) : (int)strlen(s));
        rvl_buf_adds(&u, "/");
        rvl_buf_adds(&u, esc ? esc : "");
        curl_free(esc);
        s = e ? e + 1 : NULL;
    }
    char *url = rvl_buf_take(&u);
    if (!url || strlen(url) >= sizeof r->url) {
        free(url);
        rc = rvl_seterr(RVL_ERANGE, "%s: URL too long", f->path);
        goto out;
    }
    snprintf(r->url, sizeof r->url, "%s", url);
    free(url);

    if (p->start)
        p->start(p->user, r);
    if (already_there(r)) {
        r->already = true;
        goto out;
    }
    rc = fetch(&x, r);
out:
    for (size_t i = 0; i < n; i++)
        free(files[i].path);
    free(files);
    rvl_buf_free(&x.mem);
    return rc;
}
