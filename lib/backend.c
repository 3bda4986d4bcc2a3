/*
 * backend.c - the backend registry (lib/backend.h): "cpu" is the session
 * level over rvl_ctx / rvl_decode (lib/forward.c); "metal" is
 * metal/rvl_metal_backend.c when the build has it (make METAL=1 on macOS
 * defines RVL_METAL).
 */
#include <string.h>

#include "backend.h"

static int cpu_open(rvl_backend **out, const rvl_model *m, const rvl_ctx_params *p)
{
    return rvl_ctx_open((rvl_ctx **)out, m, p);
}
static void cpu_close(rvl_backend *b) { rvl_ctx_close((rvl_ctx *)b); }
static int cpu_decode(rvl_backend *b, const int32_t *tokens, uint32_t n, const float **logits)
{
    return rvl_decode((rvl_ctx *)b, tokens, n, logits);
}
static uint32_t cpu_pos(const rvl_backend *b) { return rvl_ctx_pos((const rvl_ctx *)b); }
static void cpu_reset(rvl_backend *b) { rvl_ctx_reset((rvl_ctx *)b); }
static int cpu_truncate(rvl_backend *b, uint32_t pos) { return rvl_ctx_truncate((rvl_ctx *)b, pos); }
static const char *cpu_device_name(const rvl_backend *b)
{
    (void)b;
    return "cpu";
}

static const rvl_backend_ops cpu_ops = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .decode = cpu_decode,
    .pos = cpu_pos,
    .reset = cpu_reset,
    .truncate = cpu_truncate,
    .device_name = cpu_device_name,
};

int rvl_backend_available(const char *name)
{
    if (strcmp(name, "cpu") == 0)
        return 1;
#ifdef RVL_METAL
    if (strcmp(name, "metal") == 0)
        return 1;
#endif
    return 0;
}

const rvl_backend_ops *rvl_backend_find(const char *name)
{
    if (strcmp(name, "cpu") == 0)
        return &cpu_ops;
    if (strcmp(name, "metal") == 0) {
#ifdef RVL_METAL
        return &rvl_metal_backend_ops;
#else
        rvl_seterr(RVL_EUNSUPPORTED, "this build has no Metal backend (build on macOS with make METAL=1)");
        return NULL;
#endif
    }
    rvl_seterr(RVL_EINVAL, "unknown backend '%s' (cpu or metal)", name);
    return NULL;
}
