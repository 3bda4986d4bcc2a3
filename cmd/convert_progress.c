/*
 * convert_progress.c - the progress display of dequant and quantize
 * (convert_progress.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "convert_progress.h"

void cli_human_bytes(char *buf, size_t cap, double b)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) {
        b /= 1024;
        i++;
    }
    snprintf(buf, cap, i ? "%.2f %s" : "%.0f %s", b, u[i]);
}

void cli_convert_progress_init(cli_convert_progress *p, const char *cmd, bool quiet)
{
    memset(p, 0, sizeof *p);
    p->cmd = cmd;
    p->quiet = quiet;
    p->tty = isatty(STDERR_FILENO) != 0;
    p->t0 = rvl_bench_now();
    p->last = -1;
}

static void type_name(char *buf, size_t cap, uint32_t type)
{
    const rvl_type_info *ti = rvl_type_get(type);
    snprintf(buf, cap, "%s", ti ? ti->name : "?");
}

void cli_convert_progress_cb(void *ud, const rvl_convert_progress *pr)
{
    cli_convert_progress *p = ud;
    if (p->quiet)
        return;
    double now = rvl_bench_now(), el = now - p->t0;
    double rate = el > 0 ? (double)pr->done / el : 0;
    if (p->tty) {
        bool end = pr->tensor >= pr->n_tensors;
        if (!end && now - p->last < 0.1 && pr->tensor + 1 != pr->n_tensors)
            return;
        p->last = now;
        char eta[32] = "";
        if (rate > 0 && pr->done > 0 && !end) {
            double left = (double)(pr->total - pr->done) / rate;
            snprintf(eta, sizeof eta, " ETA %dm%02ds", (int)(left / 60), (int)left % 60);
        }
        int pct = pr->total ? (int)(100.0 * (double)pr->done / (double)pr->total) : 100;
        fprintf(stderr, "\r\033[K[%" PRIu64 "/%" PRIu64 "] %3d%% %.1f MB/s%s %s",
                end ? pr->n_tensors : pr->tensor + 1, pr->n_tensors, pct, rate / 1e6, eta,
                pr->name);
        if (end)
            fputs("\r\033[K", stderr);
        fflush(stderr);
        return;
    }
    if (pr->tensor >= pr->n_tensors)
        return;
    char a[24], b[24], shape[96];
    int off = 0;
    type_name(a, sizeof a, pr->type_in);
    type_name(b, sizeof b, pr->type_out);
    for (uint32_t d = 0; d < pr->n_dims && off < (int)sizeof shape - 24; d++)
        off += snprintf(shape + off, sizeof shape - (size_t)off, "%s%" PRIu64, d ? " x " : "",
                        pr->ne[d]);
    if (!pr->n_dims)
        snprintf(shape, sizeof shape, "-");
    fprintf(stderr, "[%4" PRIu64 "/%4" PRIu64 "] %-36s %-20s %-6s -> %s\n", pr->tensor + 1,
            pr->n_tensors, pr->name, shape, a, b);
}

void cli_convert_progress_clear(cli_convert_progress *p)
{
    if (p->tty && !p->quiet) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
}
