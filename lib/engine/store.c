/*
 * store.c - the model store: a directory of GGUF files with the names
 * `-m`, `ruvllm list` and `ruvllm rm` take (the layout: lib/ruvllm.h,
 * "The model store"). The store is read afresh at each call: it is a
 * directory people and `ruvllm pull` change, never a database to keep in
 * step.
 *
 * A name is the manifest's ("hf.co/OWNER/REPO:QUANT", as ollama names a
 * Hugging Face model) or, for a file without one, its path relative to the
 * store without ".gguf" (the default model is "SmolLM2-135M-Instruct.Q4_1").
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ruvllm.h"

#define STORE_MAX_DEPTH 8          /* hf.co/OWNER/REPO/ + a few folders of the repo */
#define STORE_MAX_MANIFEST (1u << 20)

/* ---------------------------------------------------------------- the directory */

int rvl_store_dir(char *buf, size_t cap)
{
    const char *env = getenv("RUVLLM_MODELS");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;

    if (env && *env)
        n = snprintf(buf, cap, "%s", env);
    else if (xdg && *xdg)
        n = snprintf(buf, cap, "%s/ruvllm/models", xdg);
    else if (home && *home)
        n = snprintf(buf, cap, "%s/.cache/ruvllm/models", home);
    else
        return rvl_seterr(RVL_ENOTFOUND, "no model store: none of RUVLLM_MODELS, "
                          "XDG_CACHE_HOME, HOME is set");
    if (n < 0 || (size_t)n >= cap)
        return rvl_seterr(RVL_ERANGE, "model store path too long");
    while (n > 1 && buf[n - 1] == '/')   /* "dir/" and "dir" are one store */
        buf[--n] = 0;
    return 0;
}

/* ---------------------------------------------------------------- manifests */

/* The manifest at path, parsed; NULL when absent or not a JSON object
 * (the file is then named by its path, as a plain file). */
static cJSON *manifest_read(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *text = malloc(STORE_MAX_MANIFEST + 1);
    size_t n = text ? fread(text, 1, STORE_MAX_MANIFEST, f) : 0;
    fclose(f);
    if (!text)
        return NULL;
    text[n] = 0;
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (j && !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        j = NULL;
    }
    return j;
}

static char *manifest_str(const cJSON *j, const char *key)
{
    const cJSON *v = j ? cJSON_GetObjectItemCaseSensitive(j, key) : NULL;
    return cJSON_IsString(v) && v->valuestring[0] ? strdup(v->valuestring) : NULL;
}

int rvl_store_write_manifest(const char *path, const char *name, const char *repo,
                             const char *file, const char *sha256, uint64_t size,
                             const char *url)
{
    char mpath[4096], date[32];
    if ((size_t)snprintf(mpath, sizeof mpath, "%s.json", path) >= sizeof mpath)
        return rvl_seterr(RVL_ERANGE, "%s: path too long", path);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);

    cJSON *j = cJSON_CreateObject();
    if (!j || !cJSON_AddStringToObject(j, "name", name) ||
        !cJSON_AddStringToObject(j, "repo", repo) || !cJSON_AddStringToObject(j, "file", file) ||
        !cJSON_AddStringToObject(j, "sha256", sha256) ||
        !cJSON_AddNumberToObject(j, "size", (double)size) ||
        !cJSON_AddStringToObject(j, "date", date) || !cJSON_AddStringToObject(j, "url", url)) {
        cJSON_Delete(j);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    rvl_afile *af;
    int rc = rvl_afile_open(&af, mpath);
    if (rc == 0 && (rc = rvl_afile_write(af, text, strlen(text))) == 0 &&
        (rc = rvl_afile_write(af, "\n", 1)) == 0)
        rc = rvl_afile_commit(af);
    else if (rc != RVL_EINVAL)
        rvl_afile_abort(af);
    free(text);
    return rc;
}

/* ---------------------------------------------------------------- listing */

typedef struct {
    rvl_store_entry *e;
    size_t n, cap;
    const char *root;
    size_t root_len;
    char default_path[4096];
} walk;

static void entry_free(rvl_store_entry *e)
{
    free(e->name);
    free(e->path);
    free(e->manifest);
    free(e->repo);
    free(e->file);
    free(e->sha256);
    free(e->date);
}

void rvl_store_list_free(rvl_store_entry *e, size_t n)
{
    if (!e)
        return;
    for (size_t i = 0; i < n; i++)
        entry_free(&e[i]);
    free(e);
}

/* The name of a manifest-less file: rel without ".gguf". */
static char *stem_name(const char *rel)
{
    size_t len = strlen(rel);
    if (len > 5 && strcasecmp(rel + len - 5, ".gguf") == 0)
        len -= 5;
    return strndup(rel, len);
}

static int add_file(walk *w, const char *path, const struct stat *st)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        rvl_store_entry *e = realloc(w->e, cap * sizeof *e);
        if (!e)
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        w->e = e;
        w->cap = cap;
    }
    rvl_store_entry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    e->size = (uint64_t)st->st_size;
    e->mtime = (int64_t)st->st_mtime;
    e->path = strdup(path);
    e->is_default = strcmp(path, w->default_path) == 0;

    char mpath[4096];
    cJSON *j = NULL;
    if ((size_t)snprintf(mpath, sizeof mpath, "%s.json", path) < sizeof mpath &&
        (j = manifest_read(mpath)) != NULL) {
        e->manifest = strdup(mpath);
        e->name = manifest_str(j, "name");
        e->repo = manifest_str(j, "repo");
        e->file = manifest_str(j, "file");
        e->sha256 = manifest_str(j, "sha256");
        e->date = manifest_str(j, "date");
        cJSON_Delete(j);
    }
    if (!e->name)
        e->name = stem_name(path + w->root_len + 1);
    w->n++;   /* counted before the check, so that the entry is freed */
    if (!e->path || !e->name)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    return 0;
}

static int walk_dir(walk *w, const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (depth == 0 && errno == ENOENT)
            return 0;   /* no store yet: an empty one */
        if (depth == 0)
            return rvl_seterr(RVL_EIO, "%s: %s", dir, strerror(errno));
        return 0;       /* an unreadable folder inside: not ours to judge */
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;   /* ., .., hidden files, rvl_afile temporaries */
        char path[4096];
        struct stat st;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= sizeof path ||
            stat(path, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth < STORE_MAX_DEPTH)
                rc = walk_dir(w, path, depth + 1);
        } else if (S_ISREG(st.st_mode) && strlen(de->d_name) > 5 &&
                   strcasecmp(de->d_name + strlen(de->d_name) - 5, ".gguf") == 0) {
            rc = add_file(w, path, &st);
        }
    }
    closedir(d);
    return rc;
}

static int by_name(const void *a, const void *b)
{
    const rvl_store_entry *x = a, *y = b;
    int c = strcasecmp(x->name, y->name);
    return c ? c : strcmp(x->path, y->path);
}

int rvl_store_list(rvl_store_entry **out, size_t *n)
{
    char root[4096];
    int rc;
    *out = NULL;
    *n = 0;
    if ((rc = rvl_store_dir(root, sizeof root)) < 0)
        return rc;
    walk w = {.root = root, .root_len = strlen(root)};
    if ((size_t)snprintf(w.default_path, sizeof w.default_path, "%s/%s", root,
                         RVL_DEFAULT_MODEL_FILE) >= sizeof w.default_path)
        return rvl_seterr(RVL_ERANGE, "%s: path too long", root);
    if ((rc = walk_dir(&w, root, 0)) < 0) {
        rvl_store_list_free(w.e, w.n);
        return rc;
    }
    if (w.n)
        qsort(w.e, w.n, sizeof *w.e, by_name);
    /* the default model pulled from the hub rather than fetched by `make
     * model` is the default when the plain file is absent */
    bool have_plain = false;
    for (size_t i = 0; i < w.n; i++)
        have_plain |= w.e[i].is_default;
    for (size_t i = 0; i < w.n && !have_plain; i++)
        if (strcasecmp(w.e[i].name, RVL_DEFAULT_MODEL_NAME) == 0) {
            w.e[i].is_default = true;
            break;
        }
    *out = w.e;
    *n = w.n;
    return 0;
}

/* ---------------------------------------------------------------- names */

/* The forms of a name users may type: whole, without "hf.co/", and for a
 * pulled model without "hf.co/OWNER/" (the repository and quant alone). */
static int name_forms(const char *name, const char *forms[3])
{
    int n = 0;
    forms[n++] = name;
    if (strncasecmp(name, "hf.co/", 6) == 0) {
        forms[n++] = name + 6;
        const char *slash = strchr(name + 6, '/');
        if (slash && slash[1])
            forms[n++] = slash + 1;
    }
    return n;
}

static bool name_is(const char *entry, const char *want)
{
    const char *f[3];
    int n = name_forms(entry, f);
    for (int i = 0; i < n; i++)
        if (strcasecmp(f[i], want) == 0)
            return true;
    return false;
}

static bool name_begins(const char *entry, const char *want)
{
    const char *f[3];
    int n = name_forms(entry, f);
    size_t k = strlen(want);
    for (int i = 0; i < n; i++)
        if (strncasecmp(f[i], want, k) == 0)
            return true;
    return false;
}

long rvl_store_find(const rvl_store_entry *list, size_t n, const char *name)
{
    long hit = -1;
    size_t count = 0;
    if (!name || !*name)
        return rvl_seterr(RVL_EINVAL, "empty model name");
    for (int pass = 0; pass < 2 && count == 0; pass++)
        for (size_t i = 0; i < n; i++)
            if (pass == 0 ? name_is(list[i].name, name) : name_begins(list[i].name, name)) {
                if (count++ == 0)
                    hit = (long)i;
            }
    if (count == 1)
        return hit;
    if (count == 0)
        return rvl_seterr(RVL_ENOTFOUND, "no model named '%s' in the store", name);

    /* ambiguous: list the candidates (exact duplicates or prefixes alike) */
    bool exact = false;
    for (size_t i = 0; i < n && !exact; i++)
        exact = name_is(list[i].name, name);
    rvl_buf b = {0};
    const char *sep = "";
    for (size_t i = 0; i < n; i++)
        if (exact ? name_is(list[i].name, name) : name_begins(list[i].name, name)) {
            rvl_buf_adds(&b, sep);
            rvl_buf_adds(&b, list[i].name);
            sep = ", ";
        }
    char *msg = rvl_buf_take(&b);
    int rc = rvl_seterr(RVL_EINVAL, "'%s' is ambiguous: it names %zu models (%s); give more "
                        "of the name", name, count, msg ? msg : "?");
    free(msg);
    return rc;
}

int rvl_store_resolve(const char *name, char *buf, size_t cap)
{
    rvl_store_entry *list;
    size_t n;
    int rc = rvl_store_list(&list, &n);
    if (rc < 0)
        return rc;
    long i = rvl_store_find(list, n, name);
    if (i >= 0) {
        if ((size_t)snprintf(buf, cap, "%s", list[i].path) >= cap)
            i = rvl_seterr(RVL_ERANGE, "%s: path too long", list[i].path);
    }
    rvl_store_list_free(list, n);
    return i < 0 ? (int)i : 0;
}

/* Remove the now empty folders from dir up to (not including) root. */
static void prune_dirs(const char *root, const char *file)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", file);
    size_t rl = strlen(root);
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) <= rl)
            break;
        *slash = 0;
        if (strncmp(dir, root, rl) != 0 || dir[rl] != '/' || rmdir(dir) != 0)
            break;
    }
}

int rvl_store_remove(const char *name, char *removed, size_t cap)
{
    rvl_store_entry *list;
    size_t n;
    char root[4096];
    int rc = rvl_store_dir(root, sizeof root);
    if (rc < 0 || (rc = rvl_store_list(&list, &n)) < 0)
        return rc;
    long i = rvl_store_find(list, n, name);
    if (i < 0) {
        rvl_store_list_free(list, n);
        return (int)i;
    }
    const rvl_store_entry *e = &list[i];
    if (unlink(e->path) != 0 && errno != ENOENT)
        rc = rvl_seterr(RVL_EIO, "%s: %s", e->path, strerror(errno));
    else {
        char part[4096];
        if (e->manifest)
            unlink(e->manifest);
        if ((size_t)snprintf(part, sizeof part, "%s.part", e->path) < sizeof part)
            unlink(part);
        prune_dirs(root, e->path);
        if (removed)
            snprintf(removed, cap, "%s", e->name);
    }
    rvl_store_list_free(list, n);
    return rc;
}

int rvl_store_name_of(const char *path, char *buf, size_t cap)
{
    char mpath[4096], root[4096];
    int n = -1;
    if ((size_t)snprintf(mpath, sizeof mpath, "%s.json", path) < sizeof mpath) {
        cJSON *j = manifest_read(mpath);
        char *name = manifest_str(j, "name");
        cJSON_Delete(j);
        if (name)
            n = snprintf(buf, cap, "%s", name);
        free(name);
    }
    if (n < 0 && rvl_store_dir(root, sizeof root) == 0) {
        char *rroot = realpath(root, NULL), *rpath = realpath(path, NULL);
        size_t rl = rroot ? strlen(rroot) : 0;
        if (rroot && rpath && strncmp(rpath, rroot, rl) == 0 && rpath[rl] == '/') {
            char *s = stem_name(rpath + rl + 1);
            if (s)
                n = snprintf(buf, cap, "%s", s);
            free(s);
        }
        free(rroot);
        free(rpath);
    }
    if (n < 0) {
        const char *base = strrchr(path, '/');
        char *s = stem_name(base ? base + 1 : path);
        n = s ? snprintf(buf, cap, "%s", s) : snprintf(buf, cap, "%s", path);
        free(s);
    }
    if (n < 0 || (size_t)n >= cap)
        return rvl_seterr(RVL_ERANGE, "%s: model name too long", path);
    return 0;
}
