/*
 * model_path.c - where the model comes from: -m, $RUVLLM_MODEL (each a file
 * or a name in the model store, lib/engine/store.c), then the default
 * model in the store.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ruvllm.h"

/* The default model: the file `make model` fetches into the store, else
 * the same model pulled from the hub (RVL_DEFAULT_MODEL_NAME). */
static int default_model(char *buf, size_t cap)
{
    char root[4096];
    int rc = rvl_store_dir(root, sizeof root);
    if (rc < 0)
        return rvl_seterr(rc, "no model given (-m or RUVLLM_MODEL) and %s", rvl_errmsg());
    if ((size_t)snprintf(buf, cap, "%s/%s", root, RVL_DEFAULT_MODEL_FILE) >= cap)
        return rvl_seterr(RVL_ERANGE, "model path too long");
    if (access(buf, R_OK) == 0)
        return 0;

    rvl_store_entry *list;
    size_t n;
    rc = RVL_ENOTFOUND;
    if (rvl_store_list(&list, &n) == 0) {
        for (size_t i = 0; i < n && rc < 0; i++)
            if (strcasecmp(list[i].name, RVL_DEFAULT_MODEL_NAME) == 0 &&
                (size_t)snprintf(buf, cap, "%s", list[i].path) < cap)
                rc = 0;
        rvl_store_list_free(list, n);
    }
    if (rc == 0)
        return 0;
    snprintf(buf, cap, "%s/%s", root, RVL_DEFAULT_MODEL_FILE);
    return rvl_seterr(RVL_ENOTFOUND, "default model %s not found: fetch it with "
                      "`ruvllm pull %s:%s`, or pass -m MODEL (a file, or a name `ruvllm list` "
                      "shows)", buf, RVL_DEFAULT_MODEL_REPO, RVL_DEFAULT_MODEL_QUANT);
}

int rvl_model_path(const char *explicit_path, char *buf, size_t cap)
{
    const char *env = getenv("RUVLLM_MODEL");
    const char *want = explicit_path && *explicit_path ? explicit_path
                       : env && *env                  ? env
                                                      : NULL;
    struct stat st;

    if (!want)
        return default_model(buf, cap);
    /* an existing path first: a file the user names is never shadowed by a name */
    if (stat(want, &st) == 0) {
        if ((size_t)snprintf(buf, cap, "%s", want) >= cap)
            return rvl_seterr(RVL_ERANGE, "model path too long");
        return 0;
    }
    int rc = rvl_store_resolve(want, buf, cap);
    if (rc == RVL_ENOTFOUND) {
        char dir[4096];
        if (rvl_store_dir(dir, sizeof dir) < 0)
            snprintf(dir, sizeof dir, "(none)");
        return rvl_seterr(RVL_ENOTFOUND, "%s: No such file or directory, nor a model name in "
                          "the store %s (`ruvllm list` shows them; `ruvllm pull OWNER/REPO:QUANT` "
                          "fetches one from Hugging Face)", want, dir);
    }
    return rc;
}
