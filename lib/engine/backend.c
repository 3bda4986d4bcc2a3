/*
 * backend.c - the backend registry (ruvllm.h "Backends"): "cpu" is the
 * CPU forward pass (lib/engine/forward.c); "metal" is
 * metal/rvl_metal_backend.c when the build has it (make METAL=1 on macOS
 * defines RVL_METAL), or when a program that links it registers it
 * (rvl_backend_register: the emulator's test_backend).
 */
#include <string.h>

#include "engine/backend.h"

/* The backends this build links. */
static const rvl_backend_ops *const builtin[] = {
    &rvl_forward_ops,
#ifdef RVL_METAL
    &rvl_metal_backend_ops,
#endif
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

/* what the program registered first: it replaces a linked backend of the
 * same name ("cpu" cannot be registered) */
static const rvl_backend_ops *lookup(const char *name)
{
    for (int i = 0; i < MAX_REGISTERED && registered[i]; i++)
        if (strcmp(registered[i]->name, name) == 0)
            return registered[i];
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
        if (strcmp(builtin[i]->name, name) == 0)
            return builtin[i];
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
