/*
 * pull.c - ruvllm pull: a GGUF model from the Hugging Face Hub into the
 * model store, by the name ollama and llama.cpp's -hf take
 * (OWNER/REPO[:QUANT]). The work is lib/tools/pull.c's rvl_pull; this file
 * is the progress bar and the last line.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "convert_progress.h"
#include "ruvllm_tools.h"

static bool opt_quiet;

static rvl_opt opts[] = {
    {OPT_FLAG, 'q', "quiet", NULL, "print no progress and no summary (the name still goes to standard output)", NULL, &opt_quiet, 0, 0, NULL, COMPL_NONE},
    OPT_END
};

typedef struct {
    bool tty;
    double t0, last;
    uint64_t first;     /* bytes already there when the bar started */
    uint64_t shown;     /* bytes the bar last showed */
    bool started;
} bar;

static void on_start(void *ud, const rvl_pull_result *r)
{
    bar *b = ud;
    char sz[32];
    if (opt_quiet)
        return;
    cli_human_bytes(sz, sizeof sz, (double)r->size);
    fprintf(stderr, "ruvllm pull: %s: %s (%s) from %s\n", r->name, r->file, sz, r->url);
    b->t0 = rvl_bench_now();
}

static void on_progress(void *ud, uint64_t done, uint64_t total)
{
    bar *b = ud;
    if (opt_quiet || !b->tty)
        return;
    double now = rvl_bench_now();
    if (!b->started) {
        b->started = true;
        b->first = done;
        b->t0 = now;
    } else if ((now - b->last < 0.1 && done != total) || (done == total && b->shown == total)) {
        return;
    }
    b->shown = done;
    b->last = now;
    char a[32], t[32], rate[32] = "", eta[32] = "";
    double el = now - b->t0, bps = el > 0.5 ? (double)(done - b->first) / el : 0;
    cli_human_bytes(a, sizeof a, (double)done);
    cli_human_bytes(t, sizeof t, (double)total);
    if (bps > 0) {
        cli_human_bytes(rate, sizeof rate, bps);
        strcat(rate, "/s");
        if (total > done) {
            double left = (double)(total - done) / bps;
            snprintf(eta, sizeof eta, " ETA %dm%02ds", (int)(left / 60), (int)left % 60);
        }
    }
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 0, w = 30;
    char fill[31];
    int k = pct * w / 100;
    memset(fill, '#', (size_t)k);
    memset(fill + k, '.', (size_t)(w - k));
    fill[w] = 0;
    fprintf(stderr, "\r\033[K%3d%% [%s] %s / %s %s%s", pct, fill, a, t, rate, eta);
    fflush(stderr);
}

static void bar_clear(const bar *b)
{
    if (b->tty && b->started && !opt_quiet) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
}

static int pull_main(rvl_cmd *cmd, int argc, char **argv)
{
    (void)argc;
    char repo[256], quant[256];
    if (rvl_pull_parse(argv[0], repo, sizeof repo, quant, sizeof quant) < 0)
        cli_usage(cmd->name, "%s", rvl_errmsg());
    bar b = {.tty = isatty(STDERR_FILENO) != 0};
    rvl_pull_params p = {.start = on_start, .progress = on_progress, .user = &b};
    rvl_pull_result r;
    int rc = rvl_pull(argv[0], &p, &r);
    bar_clear(&b);
    if (rc < 0)
        return cli_fail(cmd->name, rc);
    if (!opt_quiet) {
        char sz[32];
        cli_human_bytes(sz, sizeof sz, (double)r.size);
        if (r.already)
            fprintf(stderr, "ruvllm pull: %s is up to date (%s, sha256 %.12s)\n", r.name, r.path,
                    r.sha256);
        else
            fprintf(stderr, "ruvllm pull: %s: %s, sha256 %s%s%s%s\n", r.name, sz, r.sha256,
                    r.unverified ? " (the hub gives no sha256 for it: size checked only)"
                                 : " verified",
                    r.resumed_from && !r.restarted ? ", continued a partial download"
                    : r.restarted ? ", the server ignored the range: downloaded again"
                                  : "",
                    "");
        fprintf(stderr, "ruvllm pull: run it with: ruvllm run -m %s \"Hello\"\n", r.name);
    }
    printf("%s\n", r.name);
    return 0;
}

rvl_cmd cmd_pull_desc = {
    .synopsis = "[options] OWNER/REPO[:QUANT]",
    .description =
        "Download a GGUF model from the Hugging Face Hub into the model store ($RUVLLM_MODELS, "
        "else ${XDG_CACHE_HOME:-~/.cache}/ruvllm/models), as `ollama pull hf.co/OWNER/REPO:QUANT` "
        "and `llama-cli -hf OWNER/REPO:QUANT` do. QUANT picks the file by its quantization type "
        "in the file name, case-insensitively (Q4_K_M, q8_0, IQ4_XS ...), or is a file name "
        "ending in .gguf; without it, Q4_K_M, else the repository's first GGUF file. The model's "
        "name is then hf.co/OWNER/REPO:QUANT, which -m takes whole, without hf.co/ or "
        "hf.co/OWNER/, or as any prefix of these that names one model (ruvllm list shows the "
        "names).\n"
        "\n"
        "The file list and each file's sha256 come from the hub's API "
        "(/api/models/OWNER/REPO/tree/main); the file from /OWNER/REPO/resolve/main/FILE, "
        "following redirects. It is written to FILE.part and renamed into place only once its "
        "size and sha256 are the hub's; a mismatch deletes it. Ctrl-C or a lost connection "
        "leaves the .part, and the next pull continues it with a range request (from the start "
        "when the server ignores ranges). A file already in the store with the hub's sha256 is "
        "not downloaded again. Split models (-00001-of-0000N.gguf) are refused: ruvllm reads "
        "one-file GGUF models.\n"
        "\n"
        "Environment: HF_TOKEN is sent as a bearer token (gated and private repositories); "
        "RUVLLM_HF_ENDPOINT or HF_ENDPOINT replaces https://huggingface.co (a mirror); "
        "RUVLLM_CA_BUNDLE, CURL_CA_BUNDLE or SSL_CERT_FILE names the CA certificates to trust; "
        "the usual https_proxy variables are libcurl's. Progress goes to standard error when it "
        "is a terminal; the model's name to standard output.",
    .examples = "ruvllm pull bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M\ta model by repository and quantization\n"
                "ruvllm pull " RVL_DEFAULT_MODEL_REPO ":" RVL_DEFAULT_MODEL_QUANT "\tthe default model\n"
                "ruvllm run -m llama-3.2-1b \"Hello\"\trun it by a prefix of its name",
    .opts = opts,
    .pos_compl = COMPL_NONE,
    .min_pos = 1,
    .max_pos = 1,
    .main = pull_main,
};
