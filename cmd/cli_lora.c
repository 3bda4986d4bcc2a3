/*
 * cli_lora.c - the --lora option run and chat share: adapters loaded
 * against the model and attached to the context (lib/engine/lora.c).
 */
#include "cli.h"

int cli_lora_attach(const char *cmd, const opt_list *specs, const rvl_model *m, rvl_ctx *c,
                    rvl_lora **out)
{
    rvl_lora *l = NULL;
    int rc;
    *out = NULL;
    if (specs->n == 0)
        return 0;
    if ((rc = rvl_lora_open(&l, m)) < 0)
        return cli_fail(cmd, rc);
    for (int i = 0; i < specs->n; i++) {
        char path[4096];
        float scale;
        if ((rc = rvl_lora_parse_spec(specs->items[i], path, sizeof path, &scale)) < 0 ||
            (rc = rvl_lora_add(l, path, scale)) < 0) {
            rvl_lora_close(l);
            return cli_fail(cmd, rc);
        }
    }
    if ((rc = rvl_ctx_set_lora(c, l)) < 0) {
        rvl_lora_close(l);
        return cli_fail(cmd, rc);
    }
    *out = l;
    return 0;
}
