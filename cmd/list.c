/*
 * list.c - ruvllm list: the models in the store (lib/engine/store.c), as
 * `ollama list` shows them: name, id, size, when modified.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "convert_progress.h"

static bool opt_json, opt_names;

static rvl_opt opts[] = {
    {OPT_FLAG, 'j', "json", NULL, "print the models as a JSON array on standard output", NULL, &opt_json, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "names", NULL, "print only the names, one a line (for shell completion)", NULL, &opt_names, 0, 0, NULL, COMPL_NONE},
    OPT_END
};

/* "3 days ago", as ollama says it */
static void ago(char *buf, size_t cap, int64_t t)
{
    double s = difftime(time(NULL), (time_t)t);
    static const struct { double secs; const char *unit; } units[] = {
        {365 * 86400.0, "year"}, {30 * 86400.0, "month"}, {7 * 86400.0, "week"},
        {86400.0, "day"}, {3600.0, "hour"}, {60.0, "minute"}};
    if (s < 60) {
        snprintf(buf, cap, "just now");
        return;
    }
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (s >= units[i].secs) {
            long n = (long)(s / units[i].secs);
            snprintf(buf, cap, "%ld %s%s ago", n, units[i].unit, n == 1 ? "" : "s");
            return;
        }
}

static void print_json(const rvl_store_entry *e, size_t n)
{
    rvl_jw w;
    rvl_jw_init(&w, stdout, true);
    rvl_jw_arr(&w);
    for (size_t i = 0; i < n; i++) {
        char date[32];
        time_t t = (time_t)e[i].mtime;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
        rvl_jw_obj(&w);
        rvl_jw_key(&w, "name"); rvl_jw_str(&w, e[i].name);
        rvl_jw_key(&w, "path"); rvl_jw_str(&w, e[i].path);
        rvl_jw_key(&w, "size"); rvl_jw_u64(&w, e[i].size);
        rvl_jw_key(&w, "modified"); rvl_jw_str(&w, date);
        rvl_jw_key(&w, "default"); rvl_jw_bool(&w, e[i].is_default);
        rvl_jw_key(&w, "repo"); rvl_jw_str(&w, e[i].repo);
        rvl_jw_key(&w, "file"); rvl_jw_str(&w, e[i].file);
        rvl_jw_key(&w, "sha256"); rvl_jw_str(&w, e[i].sha256);
        rvl_jw_key(&w, "pulled"); rvl_jw_str(&w, e[i].date);
        rvl_jw_obj_end(&w);
    }
    rvl_jw_arr_end(&w);
    fputc('\n', stdout);
}

static int list_main(rvl_cmd *cmd, int argc, char **argv)
{
    (void)argc, (void)argv;
    if (opt_json && opt_names)
        cli_usage(cmd->name, "--json and --names: choose one");
    rvl_store_entry *e;
    size_t n;
    int rc = rvl_store_list(&e, &n);
    if (rc < 0)
        return cli_fail(cmd->name, rc);
    if (opt_json) {
        print_json(e, n);
    } else if (opt_names) {
        for (size_t i = 0; i < n; i++)
            printf("%s\n", e[i].name);
    } else {
        int wn = 4;
        for (size_t i = 0; i < n; i++)
            if ((int)strlen(e[i].name) + (e[i].is_default ? 2 : 0) > wn)
                wn = (int)strlen(e[i].name) + (e[i].is_default ? 2 : 0);
        printf("%-*s  %-12s  %10s  %s\n", wn, "NAME", "ID", "SIZE", "MODIFIED");
        for (size_t i = 0; i < n; i++) {
            char size[32], when[48], name[1024];
            cli_human_bytes(size, sizeof size, (double)e[i].size);
            ago(when, sizeof when, e[i].mtime);
            snprintf(name, sizeof name, "%s%s", e[i].name, e[i].is_default ? " *" : "");
            printf("%-*s  %-12.12s  %10s  %s\n", wn, name, e[i].sha256 ? e[i].sha256 : "-", size,
                   when);
        }
        if (n == 0) {
            char dir[4096] = "?";
            rvl_store_dir(dir, sizeof dir);
            fprintf(stderr, "ruvllm list: no models in %s: `ruvllm pull OWNER/REPO:QUANT` "
                    "fetches one (the default: ruvllm pull %s:%s)\n", dir,
                    RVL_DEFAULT_MODEL_REPO, RVL_DEFAULT_MODEL_QUANT);
        }
    }
    rvl_store_list_free(e, n);
    return 0;
}

rvl_cmd cmd_list_desc = {
    .synopsis = "[options]",
    .description =
        "List the models in the model store ($RUVLLM_MODELS, else "
        "${XDG_CACHE_HOME:-~/.cache}/ruvllm/models): those `ruvllm pull` fetched (named "
        "hf.co/OWNER/REPO:QUANT), the default model (marked *), and any .gguf file put in the "
        "store directory or a folder under it (named by its path there, without .gguf). ID is "
        "the start of the file's sha256 as the hub gave it (- for a file that did not come "
        "from the hub); SIZE its bytes; MODIFIED the file's time.\n"
        "\n"
        "Every command's -m takes these names, case-insensitively: whole, without hf.co/ or "
        "hf.co/OWNER/, or any prefix of these that names one model (a prefix that names several "
        "is refused with their names). A file path is taken as a file first.",
    .examples = "ruvllm list\tthe models, as a table\n"
                "ruvllm list --json\tas JSON (name, path, size, modified, default, repo, file, sha256, pulled)\n"
                "ruvllm list --names\tthe names alone, one a line",
    .opts = opts,
    .pos_compl = COMPL_NONE,
    .min_pos = 0,
    .max_pos = 0,
    .main = list_main,
};
