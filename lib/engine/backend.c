/*
 * backend.c - the backend registry (lib/engine/backend.h): "cpu" is the session
 * level over rvl_ctx / rvl_decode (lib/engine/forward.c); "metal" is
 * metal/rvl_metal_backend.c when the build has it (make METAL=1 on macOS
 * defines RVL_METAL), or when a program that links it registers it
 * (rvl_backend_register: the emulator's test_backend).
 */
#include <string.h>

#include "engine/backend.h"

static int cpu_open(rvl_backend **out, const rvl_model *m, const rvl_ctx_params *p)
{
    if (p && p->backend) { /* this is the CPU, whatever p names */
        rvl_ctx_params cp = *p;
        cp.backend = NULL;
        return rvl_ctx_open((rvl_ctx **)out, m, &cp);
    }
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

/* Backends registered at run time (rvl_backend_register). */
#define MAX_REGISTERED 4
static const rvl_backend_ops *registered[MAX_REGISTERED];

int rvl_backend_register(const rvl_backend_ops *ops)
{
    if (!ops || !ops->name || strcmp(ops->name, "cpu") == 0 || !ops->open || !ops->close ||
        !ops->decode || !ops->pos || !ops->reset || !ops->truncate || !ops->device_name)
        return rvl_seterr(RVL_EINVAL, "backend registration: incomplete operation table or "
                          "reserved name");
    for (int i = 0; i < MAX_REGISTERED; i++)
        if (!registered[i] || strcmp(registered[i]->name, ops->name) == 0) {
            registered[i] = ops;
            return 0;
        }
    return rvl_seterr(RVL_ERANGE, "backend registration: more than %d backends", MAX_REGISTERED);
}

static const rvl_backend_ops *lookup(const char *name)
{
    if (strcmp(name, "cpu") == 0)
        return &cpu_ops;
    for (int i = 0; i < MAX_REGISTERED && registered[i]; i++)
        if (strcmp(registered[i]->name, name) == 0)
            return registered[i];
#ifdef RVL_METAL
    if (strcmp(name, "metal") == 0)
        return &rvl_metal_backend_ops;
#endif
    return NULL;
}

int rvl_backend_available(const char *name) { return lookup(name) != NULL; }

int rvl_backend_get(const char *name, const rvl_backend_ops **out)
{
    *out = lookup(name);
    if (*out)
        return 0;
    if (strcmp(name, "metal") == 0)
        return rvl_seterr(RVL_EUNSUPPORTED, "this build has no Metal backend (build on macOS "
                          "with make METAL=1)");
    return rvl_seterr(RVL_EINVAL, "unknown backend '%s' (cpu or metal)", name);
}

const rvl_backend_ops *rvl_backend_find(const char *name)
{
    const rvl_backend_ops *o;
    return rvl_backend_get(name, &o) < 0 ? NULL : o;
}
