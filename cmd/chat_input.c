/*
 * chat_input.c - how `ruvllm chat` reads messages: a readline prompt on a
 * terminal (history file, completion of /commands, multi-line messages,
 * Ctrl-C that clears the line), or records from a script.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "chat_input.h"
#include "cli.h"
#include "gen.h"

/* ====================================================================
 * Terminal input: readline in callback mode, so that Ctrl-C at the
 * prompt (SIGINT, with the terminal's ISIG) interrupts the wait: the
 * handler only sets a flag, and pselect() unblocks SIGINT atomically.
 * ==================================================================== */

static chat_input_cfg cfg;
static volatile sig_atomic_t prompt_sigint;
static char *rl_result;
static bool rl_got;
static char hist_path[4096];
static bool hist_on;

static void on_prompt_sigint(int sig)
{
    (void)sig;
    prompt_sigint = 1;
}

static void on_line(char *line)
{
    rl_result = line;
    rl_got = true;
    rl_callback_handler_remove();
}

/* 1: a line in *out (owned), 0: end of input, -1: Ctrl-C (*empty: the
 * line was empty). */
static int read_line(const char *prompt, char **out, bool *empty)
{
    struct sigaction sa = {0}, old;
    sigset_t block, orig;
    sa.sa_handler = on_prompt_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &orig);
    sigdelset(&orig, SIGINT);
    prompt_sigint = 0;
    rl_got = false;
    rl_result = NULL;
    rl_callback_handler_install(prompt, on_line);
    int ret = 1, fd = fileno(rl_instream);
    while (!rl_got) {
        fd_set fds;
        FD_ZERO(&fds);
        FD_SET(fd, &fds);
        int r = pselect(fd + 1, &fds, NULL, NULL, NULL, &orig);
        if (prompt_sigint) {
            /* "^C" after what was typed: cleaning up moves to column 0 */
            *empty = rl_end == 0;
            fputs("^C", rl_outstream);
            fflush(rl_outstream);
            rl_free_line_state();
            rl_callback_sigcleanup();
            rl_cleanup_after_signal();
            rl_callback_handler_remove();
            ret = -1;
            break;
        }
        if (r < 0 && errno == EINTR && !rvl_interrupted())
            continue;   /* SIGWINCH ... */
        if (r < 0) {
            /* SIGTERM (the caller's handler set the flag) or an error: the end */
            rl_callback_handler_remove();
            fputc('\n', rl_outstream);
            ret = 0;
            break;
        }
        rl_callback_read_char();
    }
    sigprocmask(SIG_UNBLOCK, &block, NULL);
    sigaction(SIGINT, &old, NULL);
    if (ret == 1) {
        *out = rl_result;
        if (!rl_result)
            ret = 0;
    }
    return ret;
}

/* ${XDG_STATE_HOME:-$HOME/.local/state}/ruvllm/history, mode 0600 */
static void history_open(void)
{
    const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    char dir[4096];
    if (xdg && xdg[0] == '/')
        snprintf(dir, sizeof dir, "%s/ruvllm", xdg);
    else if (home && *home)
        snprintf(dir, sizeof dir, "%s/.local/state/ruvllm", home);
    else
        return;
    /* mkdir -p */
    for (char *s = dir + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
                cli_err("chat", "history: %s: %s (history is not saved)", dir, strerror(errno));
                return;
            }
            *s = c;
            if (!c)
                break;
        }
    }
    if ((size_t)snprintf(hist_path, sizeof hist_path, "%s/history", dir) >= sizeof hist_path)
        return;
    int fd = open(hist_path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        cli_err("chat", "history: %s: %s (history is not saved)", hist_path, strerror(errno));
        return;
    }
    using_history();
#if defined(RL_READLINE_VERSION) && RL_READLINE_VERSION >= 0x0800
    /* A multi-line message is one entry, in the file too: each entry
     * follows a timestamp line ("#<seconds>", as bash's history file with
     * lithist), and the lines up to the next one are one entry. A file of
     * one line per entry (written before) is read as such and rewritten
     * stamped. */
    char first[2] = {0};
    bool stamped = read(fd, first, 2) == 2 && first[0] == '#' && first[1] >= '0' && first[1] <= '9';
    close(fd);
    history_comment_char = '#';
    history_write_timestamps = 1;
    history_multiline_entries = stamped;
    read_history(hist_path);
    if (!stamped && history_length > 0)
        write_history(hist_path);
#else
    close(fd);
    read_history(hist_path);
#endif
    hist_on = true;
}

static void history_add(const char *line)
{
    if (!*line || !hist_on)
        return;
    HIST_ENTRY *h = history_length > 0 ? history_get(history_base + history_length - 1) : NULL;
    if (h && strcmp(h->line, line) == 0)
        return;   /* no duplicates in a row */
    add_history(line);
    append_history(1, hist_path);
}


/* Complete /commands at the start of a line, settings after /set, file
 * names elsewhere. */
static char *gen_word(const char *text, int state, bool cmds)
{
    static size_t i;
    static size_t len;
    if (!state) {
        i = 0;
        len = strlen(text);
    }
    const char *const *words = cmds ? cfg.commands : cfg.settings;
    while (words && words[i]) {
        const char *w = words[i++];
        if (cmds) {
            if (len >= 1 && strncmp(w, text + 1, len - 1) == 0) {
                char *r = malloc(strlen(w) + 2);
                if (r)
                    sprintf(r, "/%s", w);
                return r;
            }
        } else if (strncmp(w, text, len) == 0) {
            return strdup(w);
        }
    }
    return NULL;
}
static char *gen_cmd(const char *text, int state) { return gen_word(text, state, true); }
static char *gen_set(const char *text, int state) { return gen_word(text, state, false); }

static char **complete(const char *text, int start, int end)
{
    (void)end;
    if (start == 0 && text[0] == '/') {
        rl_attempted_completion_over = 1;
        return rl_completion_matches(text, gen_cmd);
    }
    if (strncmp(rl_line_buffer, "/set ", 5) == 0 && start == 5) {
        rl_attempted_completion_over = 1;
        return rl_completion_matches(text, gen_set);
    }
    return NULL;
}

void chat_input_open(const chat_input_cfg *c)
{
    cfg = *c;
    rl_readline_name = "ruvllm";
    rl_catch_signals = 0;   /* SIGINT is ours: see read_line */
    rl_attempted_completion_function = complete;
    history_open();
}

void chat_input_close(void)
{
    if (hist_on)
        history_truncate_file(hist_path, 2000);
    hist_on = false;
}

/* A message being read: its text, the lines as typed (the history entry),
 * and the lines of a recalled multi-line entry not yet taken. */
typedef struct {
    rvl_buf text, typed;
    char *queued;               /* owned: the rest of a recalled entry */
    size_t at;                  /* its next line */
    bool block, cont;           /* inside """ ... """; after a trailing backslash */
} reading;

/* The next line: from a recalled entry's rest, else from the terminal. A
 * line with newlines in it (a multi-line entry recalled from the history
 * and sent) is taken line by line, as it was first typed. */
static int next_line(reading *rd, const char *prompt, char **line, bool *empty)
{
    if (!rd->queued) {
        int r = read_line(prompt, line, empty);
        if (r != 1 || !strchr(*line, '\n'))
            return r;
        rd->queued = *line;
        rd->at = 0;
    }
    const char *p = rd->queued + rd->at;
    size_t len = strcspn(p, "\n");
    *line = strndup(p, len);
    if (p[len])
        rd->at += len + 1;
    else {
        free(rd->queued);
        rd->queued = NULL;
    }
    return *line ? 1 : -2;
}

/* The message is complete (or dropped): the lines as typed become one
 * history entry. 1 with *msg, or 0 when out of memory. */
static int reading_end(reading *rd, char **msg)
{
    if (rd->typed.n && rvl_buf_add(&rd->typed, "", 1) == 0)
        history_add(rd->typed.p);
    rvl_buf_free(&rd->typed);
    free(rd->queued);
    rd->queued = NULL;
    if (!msg) {
        rvl_buf_free(&rd->text);
        return 0;
    }
    *msg = rd->text.p ? rd->text.p : strdup("");
    return *msg ? 1 : 0;
}

/* Add one line (without its newline) to the message: 1 when the message
 * is complete, 0 when more lines follow, -1 when out of memory. */
static int take_line(reading *rd, const char *line)
{
    size_t len = strlen(line);
    rvl_buf *b = &rd->text;
    if ((rd->typed.n && rvl_buf_add(&rd->typed, "\n", 1) < 0) ||
        rvl_buf_add(&rd->typed, line, len) < 0)
        return -1;
    if (rd->block) {
        bool end = len >= 3 && strcmp(line + len - 3, "\"\"\"") == 0;
        if ((b->n && rvl_buf_add(b, "\n", 1) < 0) || rvl_buf_add(b, line, end ? len - 3 : len) < 0)
            return -1;
        return end;
    }
    if (!rd->cont && len >= 3 && strncmp(line, "\"\"\"", 3) == 0) {
        const char *rest = line + 3;
        size_t rl = len - 3;
        if (rl >= 3 && strcmp(rest + rl - 3, "\"\"\"") == 0)   /* """one line""" */
            return rvl_buf_add(b, rest, rl - 3) < 0 ? -1 : 1;
        rd->block = true;
        return rvl_buf_add(b, rest, rl) < 0 ? -1 : 0;
    }
    bool more = len && line[len - 1] == '\\';
    if ((rd->cont && rvl_buf_add(b, "\n", 1) < 0) || rvl_buf_add(b, line, more ? len - 1 : len) < 0)
        return -1;
    rd->cont = more;
    return !more;
}

int chat_input_message(char **msg)
{
    reading rd = {0};
    char prompt[64];
    for (;;) {
        const char *p = rd.block || rd.cont ? "... " : ">>> ";
        snprintf(prompt, sizeof prompt, "%s%s%s", cfg.color ? "\001\033[1;32m\002" : "", p,
                 cfg.color ? "\001\033[0m\002" : "");
        char *line = NULL;
        bool empty = false;
        int r = next_line(&rd, prompt, &line, &empty);
        if (r == -2)
            break;
        if (r < 0) {
            fputs("\n", stdout);
            if (empty && !rd.block && !rd.cont)
                cfg.hint(cfg.ud, "(to leave, type /exit or press Ctrl-D)");
            fflush(stdout);
            reading_end(&rd, NULL);   /* what was typed before stays in the history */
            return -1;
        }
        if (r == 0) {
            if (rd.text.n && !rvl_interrupted())   /* Ctrl-D inside a multi-line message: send it */
                return reading_end(&rd, msg) ? 1 : (cli_err("chat", "out of memory"), 0);
            reading_end(&rd, NULL);
            return 0;
        }
        int done = take_line(&rd, line);
        free(line);
        if (done < 0)
            break;
        if (done)
            return reading_end(&rd, msg) ? 1 : (cli_err("chat", "out of memory"), 0);
    }
    reading_end(&rd, NULL);
    cli_err("chat", "out of memory");
    return 0;
}

int chat_input_record(FILE *in, bool nul, char **msg)
{
    char *line = NULL;
    size_t cap = 0;
    errno = 0;
    ssize_t n = getdelim(&line, &cap, nul ? '\0' : '\n', in);
    if (n < 0) {
        free(line);
        if (rvl_interrupted() || errno == EINTR)
            return -1;
        if (ferror(in)) {
            cli_err("chat", "standard input: %s", strerror(errno ? errno : EIO));
            return -1;
        }
        return 0;
    }
    if (!nul) {
        if (n && line[n - 1] == '\n')
            line[--n] = 0;
        if (n && line[n - 1] == '\r')
            line[--n] = 0;
    } else if (n && line[n - 1] == '\0') {
        n--;
    }
    *msg = line;
    return 1;
}

