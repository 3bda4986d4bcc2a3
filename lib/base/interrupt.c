/*
 * interrupt.c - Ctrl-C handling shared by every command.
 *
 * The first SIGINT, SIGTERM or SIGHUP (the terminal closed) sets a flag
 * that long-running loops poll (rvl_interrupted) so they can stop cleanly
 * and discard partial outputs. A second signal removes the registered
 * temporaries and exits 130 at once. SIGPIPE is ignored: writers see EPIPE
 * (a closed stderr does not stop the work; a closed stdout stops it where
 * the product is written).
 */
#include <signal.h>
#include <unistd.h>

#include "ruvllm.h"

/* in afile.c: async-signal-safe removal of registered temporaries */
void rvl_afile_cleanup_signal(void);

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    if (interrupted) {
        rvl_afile_cleanup_signal();
        _exit(130);
    }
    interrupted = 1;
}

void rvl_interrupt_install(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

bool rvl_interrupted(void)
{
    return interrupted != 0;
}

void rvl_interrupt_clear(void)
{
    interrupted = 0;
}
