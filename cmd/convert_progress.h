/*
 * convert_progress.h - the progress display of dequant and quantize.
 *
 * On a terminal (stderr) one line rewritten in place: tensor i/N, the
 * tensor's name, MB/s of input and the time left. Otherwise (that is,
 * when stderr is a pipe or a file) one plain line per tensor.
 */
#ifndef RVL_CONVERT_PROGRESS_H
#define RVL_CONVERT_PROGRESS_H

#include <stdbool.h>

#include "ruvllm.h"
#include "ruvllm_tools.h"

typedef struct {
    const char *cmd;       /* "quantize", for the plain lines */
    bool tty;              /* rewrite one line in place */
    bool quiet;            /* print nothing */
    double t0;             /* start, seconds (rvl_bench_now) */
    double last;           /* last redraw */
} cli_convert_progress;

void cli_convert_progress_init(cli_convert_progress *p, const char *cmd, bool quiet);
/* rvl_convert_progress_fn; ud is a cli_convert_progress. */
void cli_convert_progress_cb(void *ud, const rvl_convert_progress *pr);
/* Clear the in-place line (after a failure, before an error message). */
void cli_convert_progress_clear(cli_convert_progress *p);
/* "56.25 MiB" */
void cli_human_bytes(char *buf, size_t cap, double b);

#endif
