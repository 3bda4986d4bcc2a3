/*
 * rm.c - ruvllm rm: remove models from the store (lib/engine/store.c).
 */
#include <stdio.h>

#include "cli.h"

static rvl_opt opts[] = {
    OPT_END
};

static int rm_main(rvl_cmd *cmd, int argc, char **argv)
{
    int status = 0;
    for (int i = 0; i < argc; i++) {
        char name[1024];
        int rc = rvl_store_remove(argv[i], name, sizeof name);
        if (rc < 0) {
            cli_fail(cmd->name, rc);
            status = cli_exit_code(rc);
            continue;
        }
        fprintf(stderr, "ruvllm rm: deleted '%s'\n", name);
    }
    return status;
}

rvl_cmd cmd_rm_desc = {
    .synopsis = "NAME...",
    .description =
        "Remove models from the model store: the file, its manifest, a partial download of it "
        "and the folders left empty. NAME is as `ruvllm list` shows it, whole, without hf.co/ "
        "or hf.co/OWNER/, or a prefix of these that names one model; a name that matches several models is refused, "
        "listing them, and nothing is removed for it. Files outside the store are never "
        "touched.",
    .examples = "ruvllm rm hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M\tremove a pulled model",
    .opts = opts,
    .pos_compl = COMPL_NONE,
    .min_pos = 1,
    .max_pos = -1,
    .main = rm_main,
};
