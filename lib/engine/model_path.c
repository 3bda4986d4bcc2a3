/*
 * model_path.c - where the model comes from: -m, $RUVLLM_MODEL, then the
 * default model in ${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ruvllm.h"

int rvl_model_path(const char *explicit_path, char *buf, size_t cap)
{
    const char *env = getenv("RUVLLM_MODEL");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;

    if (explicit_path && *explicit_path)
        n = snprintf(buf, cap, "%s", explicit_path);
    else if (env && *env)
        n = snprintf(buf, cap, "%s", env);
    else {
        if (xdg && *xdg)
            n = snprintf(buf, cap, "%s/ruvllm/models/%s", xdg, RVL_DEFAULT_MODEL_FILE);
        else if (home && *home)
            n = snprintf(buf, cap, "%s/.cache/ruvllm/models/%s", home, RVL_DEFAULT_MODEL_FILE);
        else
            return rvl_seterr(RVL_ENOTFOUND,
                              "no model given (-m or RUVLLM_MODEL) and neither XDG_CACHE_HOME nor HOME is set");
        if (n < 0 || (size_t)n >= cap)
            return rvl_seterr(RVL_ERANGE, "model path too long");
        if (access(buf, R_OK) != 0)
            return rvl_seterr(RVL_ENOTFOUND,
                              "default model %s not found; fetch it with 'make model' "
                              "(or scripts/fetch-model.sh), or pass -m MODEL",
                              buf);
        return 0;
    }
    if (n < 0 || (size_t)n >= cap)
        return rvl_seterr(RVL_ERANGE, "model path too long");
    return 0;
}
