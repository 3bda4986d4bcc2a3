/*
 * test_chat_pty.c - `ruvllm chat` on a real pseudo-terminal.
 *
 * A small expect-like harness: the chat runs as the session leader of a
 * new pseudo-terminal (so Ctrl-C, sent as the byte 0x03, becomes SIGINT
 * through the terminal's line discipline, as with a user at a keyboard),
 * and the test waits for text in what it prints. Checks: the prompt, a
 * reply streamed while it is generated, Ctrl-C stopping a reply and
 * returning to the prompt, Ctrl-C at an empty prompt, several /commands,
 * multi-line input, colors only without NO_COLOR, the history file;
 * ollama's commands, --verbose's timings, the marker of a reply stopped at
 * -n, a multi-line message recalled whole from the history.
 *
 * The binary is $RUVLLM (tests/run.sh sets it) or build/ruvllm; the model
 * is the default one (skipped when it is missing). No -lutil: the
 * terminal is opened with posix_openpt.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>

/* ====================================================================
 * The harness
 * ==================================================================== */

typedef struct {
    pid_t pid;
    int fd;              /* the terminal's master side */
    char *buf;           /* everything the program printed */
    size_t n, cap;
    size_t mark;         /* expectations search from here */
    int n_reads;         /* reads that brought bytes */
} pty_t;

/* How long a prompt, an echo or a message may take to appear: long,
 * because it only costs time when something is wrong, and a run beside
 * another CI run and a debootstrap once took over 5 s to echo "^C". */
#define WAIT_MS 20000

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Start argv on a new terminal of 100x40 with extra environment entries
 * ("NAME=VALUE"; "NAME=" removes NAME). */
static void pty_spawn(pty_t *p, char *const argv[], const char *const *env)
{
    memset(p, 0, sizeof *p);
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    assert_true(m >= 0);
    assert_int_equal(grantpt(m), 0);
    assert_int_equal(unlockpt(m), 0);
    const char *name = ptsname(m);
    assert_non_null(name);
    struct winsize ws = {.ws_row = 40, .ws_col = 100};
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setsid();
        int s = open(name, O_RDWR);
        if (s < 0)
            _exit(127);
        ioctl(s, TIOCSCTTY, 0);
        ioctl(s, TIOCSWINSZ, &ws);
        dup2(s, 0);
        dup2(s, 1);
        dup2(s, 2);
        if (s > 2)
            close(s);
        close(m);
        for (const char *const *e = env; e && *e; e++) {
            const char *eq = strchr(*e, '=');
            char k[256];
            snprintf(k, sizeof k, "%.*s", (int)(eq - *e), *e);
            if (eq[1])
                setenv(k, eq + 1, 1);
            else
                unsetenv(k);
        }
        signal(SIGINT, SIG_DFL);
        execv(argv[0], argv);
        _exit(127);
    }
    p->pid = pid;
    p->fd = m;
    p->cap = 1 << 16;
    p->buf = malloc(p->cap);
    assert_non_null(p->buf);
    p->buf[0] = 0;
}

/* Read what is there within ms milliseconds; false at the end of output. */
static bool pty_read(pty_t *p, int ms)
{
    struct pollfd pf = {.fd = p->fd, .events = POLLIN};
    if (poll(&pf, 1, ms) <= 0)
        return true;
    if (p->n + 4096 + 1 > p->cap) {
        p->cap *= 2;
        p->buf = realloc(p->buf, p->cap);
        assert_non_null(p->buf);
    }
    ssize_t r = read(p->fd, p->buf + p->n, 4096);
    if (r <= 0)
        return false;   /* EIO: the program closed the terminal */
    p->n += (size_t)r;
    p->buf[p->n] = 0;
    p->n_reads++;
    return true;
}

static void pty_dump(const pty_t *p, const char *why)
{
    fprintf(stderr, "# %s; the terminal showed:\n", why);
    for (size_t i = 0; i < p->n; i++) {
        unsigned char c = (unsigned char)p->buf[i];
        if (c == '\n')
            fputs("\n#   ", stderr);
        else if (c < 32 || c == 127)
            fprintf(stderr, "\\x%02x", c);
        else
            fputc(c, stderr);
    }
    fputc('\n', stderr);
}

/* Position just after the first `s` past the mark, or -1. */
static long pty_find(const pty_t *p, const char *s)
{
    const char *at = p->n > p->mark ? memmem(p->buf + p->mark, p->n - p->mark, s, strlen(s)) : NULL;
    return at ? (long)(at - p->buf + strlen(s)) : -1;
}

/* Wait up to ms for `s` past the mark; move the mark after it. */
static void pty_expect(pty_t *p, const char *s, int ms)
{
    double end = now_ms() + ms;
    long at;
    while ((at = pty_find(p, s)) < 0) {
        double left = end - now_ms();
        if (left <= 0 || !pty_read(p, left > 100 ? 100 : (int)left + 1)) {
            if ((at = pty_find(p, s)) >= 0)
                break;
            char why[256];
            snprintf(why, sizeof why, "'%s' did not appear within %d ms", s, ms);
            pty_dump(p, why);
            fail_msg("%s", why);
        }
    }
    p->mark = (size_t)at;
}

static void pty_send(pty_t *p, const char *s)
{
    size_t n = strlen(s);
    assert_int_equal(write(p->fd, s, n), (ssize_t)n);
}

/* Wait for the program to end (reading its output); its exit status. */
static int pty_wait(pty_t *p, int ms)
{
    double end = now_ms() + ms;
    int st = 0;
    while (now_ms() < end) {
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid) {
            while (pty_read(p, 10) && p->n)
                if (!pty_read(p, 10))
                    break;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        pty_read(p, 20);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &st, 0);
    pty_dump(p, "the program did not end");
    fail_msg("the program did not end within %d ms", ms);
    return -1;
}

/* RVL_PTY_DUMP=1 shows what the terminal showed, also when tests pass */
static void pty_close(pty_t *p)
{
    if (getenv("RVL_PTY_DUMP"))
        pty_dump(p, "done");
    close(p->fd);
    free(p->buf);
}

/* ====================================================================
 * Set-up: the binary, the model, a state directory for the history
 * ==================================================================== */

static char bin[4096], model[4096], state[256];

static int setup(void **st)
{
    (void)st;
    const char *r = getenv("RUVLLM");
    snprintf(bin, sizeof bin, "%s", r && *r ? r : "build/ruvllm");
    const char *m = getenv("RUVLLM_TEST_MODEL"), *cache = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (m && *m)
        snprintf(model, sizeof model, "%s", m);
    else if (cache && *cache)
        snprintf(model, sizeof model, "%s/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    else
        snprintf(model, sizeof model, "%s/.cache/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : "");
    snprintf(state, sizeof state, "%s/ruvllm-pty.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(state))
        return -1;
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", state);
    return system(cmd) == 0 ? 0 : -1;
}

static bool have_model(void)
{
    if (access(model, R_OK) == 0 && access(bin, X_OK) == 0)
        return true;
    fprintf(stderr, "# skipped: no model at %s or no binary at %s\n", model, bin);
    return false;
}

static char xdg_env[300];

/* extra: one more option (NULL: none) */
static void spawn_chat_with(pty_t *p, bool no_color, const char *max_tokens, const char *extra)
{
    char *argv[] = {bin, "chat", "-m", model, "--temp", "0", "-c", "1024", "-t", "2",
                    "-n", (char *)max_tokens, (char *)extra, NULL};
    snprintf(xdg_env, sizeof xdg_env, "XDG_STATE_HOME=%s", state);
    const char *env[] = {xdg_env, "TERM=xterm", no_color ? "NO_COLOR=1" : "NO_COLOR=",
                         "INPUTRC=/dev/null", NULL};
    pty_spawn(p, argv, env);
}

static void spawn_chat(pty_t *p, bool no_color, const char *max_tokens)
{
    spawn_chat_with(p, no_color, max_tokens, NULL);
}

/* Was `s` printed between `from` and the mark? */
static bool pty_seen_since(const pty_t *p, size_t from, const char *s)
{
    return p->mark > from && memmem(p->buf + from, p->mark - from, s, strlen(s)) != NULL;
}

/* ====================================================================
 * Tests
 * ==================================================================== */

static void test_chat_pty_prompt_streams_and_ctrl_c_interrupts(void **st)
{
    (void)st;
    if (!have_model())
        skip();
    pty_t p;
    spawn_chat(&p, false, "300");

    /* the banner and a colored prompt */
    pty_expect(&p, "/help for commands", 20000);
    pty_expect(&p, "\033[1;32m>>> ", WAIT_MS);

    /* a reply, then the prompt again */
    pty_send(&p, "Say hello.\r");
    pty_expect(&p, "Say hello.", WAIT_MS);
    pty_expect(&p, "Hello", 30000);
    pty_expect(&p, ">>> ", 30000);

    /* a long reply: text arrives while it is generated (streaming);
     * Ctrl-C stops it and the prompt comes back */
    pty_send(&p, "Write a very long story about a dragon who loves to read books.\r");
    pty_expect(&p, "books.", WAIT_MS);
    size_t start = p.mark;
    int reads0 = p.n_reads;
    double t0 = now_ms();
    /* wait for 40 bytes of the reply */
    while (p.n - start < 40 && now_ms() - t0 < 30000)
        pty_read(&p, 100);
    assert_true(p.n - start >= 40);
    assert_null(memmem(p.buf + start, p.n - start, ">>> ", 4)); /* the reply is not over */
    assert_true(p.n_reads - reads0 >= 2);                       /* it came in pieces */
    pty_send(&p, "\003");
    pty_expect(&p, "[interrupted]", 10000);
    pty_expect(&p, ">>> ", 10000);
    /* interrupted long before 300 tokens (~1200 bytes) */
    assert_true(p.mark - start < 1100);

    /* the partial reply is part of the conversation: 2 exchanges */
    pty_send(&p, "/stats\r");
    pty_expect(&p, "messages   4 (2 exchanges)", WAIT_MS);
    pty_expect(&p, "of 1024 tokens used", WAIT_MS);
    pty_expect(&p, "KV cache", WAIT_MS);
    pty_expect(&p, "finish: interrupted", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);

    /* /undo drops it */
    pty_send(&p, "/undo\r");
    pty_expect(&p, "removed the last exchange", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);
    pty_send(&p, "/stats\r");
    pty_expect(&p, "messages   2 (1 exchange)", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);

    /* /help lists the commands */
    pty_send(&p, "/help\r");
    pty_expect(&p, "/retry", WAIT_MS);
    pty_expect(&p, "/exit", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);

    /* an unknown command is an error with a suggestion; chat goes on */
    pty_send(&p, "/stast\r");
    pty_expect(&p, "did you mean '/stats'?", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);

    /* Ctrl-C at an empty prompt says how to leave; with text, clears it */
    pty_send(&p, "\003");
    pty_expect(&p, "to leave, type /exit or press Ctrl-D", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);
    pty_send(&p, "half a line");
    pty_expect(&p, "half a line", WAIT_MS);
    pty_send(&p, "\003");
    pty_expect(&p, "^C", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);

    /* multi-line input: a trailing backslash, then a """ block */
    pty_send(&p, "/set max-tokens 4\r");
    pty_expect(&p, "(max-tokens = 4)", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);
    pty_send(&p, "Say:\\\r");
    pty_expect(&p, "... ", WAIT_MS);
    pty_send(&p, "yes\r");
    pty_expect(&p, ">>> ", 30000);
    pty_send(&p, "\"\"\"\r");
    pty_expect(&p, "... ", WAIT_MS);
    pty_send(&p, "Say:\r");
    pty_expect(&p, "... ", WAIT_MS);
    pty_send(&p, "no\"\"\"\r");
    pty_expect(&p, ">>> ", 30000);
    pty_send(&p, "/stats\r");
    pty_expect(&p, "messages   6 (3 exchanges)", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);

    pty_send(&p, "/exit\r");
    assert_int_equal(pty_wait(&p, 10000), 0);
    pty_close(&p);

    /* the history file: private, with what was typed, one line each */
    char path[512];
    struct stat sb;
    snprintf(path, sizeof path, "%s/ruvllm/history", state);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char hist[8192];
    size_t hn = fread(hist, 1, sizeof hist - 1, f);
    fclose(f);
    hist[hn] = 0;
    assert_non_null(strstr(hist, "Say hello.\n"));
    assert_non_null(strstr(hist, "/stats\n"));
    assert_non_null(strstr(hist, "/undo\n"));
    assert_non_null(strstr(hist, "no\"\"\"\n"));
    assert_null(strstr(hist, "half a line"));   /* cleared with Ctrl-C */
}

static void test_chat_pty_no_color_history_recall_and_ctrl_d(void **st)
{
    (void)st;
    if (!have_model())
        skip();
    pty_t p;
    spawn_chat(&p, true, "4");
    pty_expect(&p, ">>> ", 20000);
    /* up arrow: the last line of the history (from the first test, or
     * the line typed here) */
    pty_send(&p, "/system Be brief.\r");
    pty_expect(&p, "(system message set)", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);
    pty_send(&p, "\033[A");
    pty_expect(&p, "/system Be brief.", WAIT_MS);
    pty_send(&p, "\025");   /* Ctrl-U: kill the line */
    pty_send(&p, "/system\r");
    pty_expect(&p, "system: Be brief.", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);
    pty_send(&p, "\004");   /* Ctrl-D leaves */
    assert_int_equal(pty_wait(&p, 10000), 0);
    assert_null(memmem(p.buf, p.n, "\033[1;32m", 7));   /* NO_COLOR: no colors */
    pty_close(&p);
}

/* ollama's commands, --verbose's timings, the -n marker */
static void test_chat_pty_ollama_commands_verbose_and_limit_marker(void **st)
{
    (void)st;
    if (!have_model())
        skip();
    pty_t p;
    spawn_chat_with(&p, false, "4", "--verbose");
    pty_expect(&p, ">>> ", 20000);

    /* /? lists the commands, ollama's names too */
    pty_send(&p, "/?\r");
    pty_expect(&p, "/bye", WAIT_MS);
    pty_expect(&p, "/clear", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);

    /* a reply cut at -n: the marker (dimmed), then ollama's timings */
    pty_send(&p, "Write a long story about a cat.\r");
    pty_expect(&p, "\033[2m[stopped at -n 4 tokens]", 30000);
    pty_expect(&p, "total duration:", WAIT_MS);
    pty_expect(&p, "load duration:", WAIT_MS);
    pty_expect(&p, "prompt eval count:", WAIT_MS);
    pty_expect(&p, "prompt eval rate:", WAIT_MS);
    pty_expect(&p, "eval count:           4 tokens", WAIT_MS);
    pty_expect(&p, "eval rate:", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);

    /* /set quiet: no timings; /set verbose: again */
    pty_send(&p, "/set quiet\r");
    pty_expect(&p, "(quiet", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);
    size_t from = p.mark;
    pty_send(&p, "Say hi.\r");
    pty_expect(&p, "[stopped at -n 4 tokens]", 30000);
    pty_expect(&p, ">>> ", WAIT_MS);
    assert_false(pty_seen_since(&p, from, "eval rate:"));
    pty_send(&p, "/set verbose\r");
    pty_expect(&p, "(verbose", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);

    /* /set parameter with ollama's names */
    pty_send(&p, "/set parameter num_predict 2\r");
    pty_expect(&p, "(num_predict = 2, as max-tokens)", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);
    pty_send(&p, "/set parameter temperature 0.2\r");
    pty_expect(&p, "(temperature = 0.2, as temp)", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);
    pty_send(&p, "Tell me a story.\r");
    pty_expect(&p, "[stopped at -n 2 tokens]", 30000);
    pty_expect(&p, "eval rate:", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);

    /* /set system, /show system, /show info, /clear */
    pty_send(&p, "/set system Be brief.\r");
    pty_expect(&p, "(system message set)", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);
    pty_send(&p, "/show system\r");
    pty_expect(&p, "system: Be brief.", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);
    pty_send(&p, "/show info\r");
    pty_expect(&p, "architecture", WAIT_MS);
    pty_expect(&p, "context length", WAIT_MS);
    pty_expect(&p, "quantization         Q4_1", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);
    pty_send(&p, "/stats\r");
    pty_expect(&p, "messages   7 (3 exchanges)", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);
    pty_send(&p, "/clear\r");
    pty_expect(&p, "(a new conversation; the system message stays)", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);
    pty_send(&p, "/stats\r");
    pty_expect(&p, "messages   1 (0 exchanges)", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);

    /* /bye leaves */
    pty_send(&p, "/bye\r");
    assert_int_equal(pty_wait(&p, 10000), 0);
    pty_close(&p);
}

/* A multi-line message is one history entry: the Up arrow recalls all of
 * it, sending it again sends the same message, and the history file keeps
 * it whole for the next chat. */
static void test_chat_pty_multi_line_message_recalled_whole(void **st)
{
    (void)st;
    if (!have_model())
        skip();
    pty_t p;
    spawn_chat(&p, true, "4");
    pty_expect(&p, ">>> ", 20000);
    pty_send(&p, "\"\"\"\r");
    pty_expect(&p, "... ", WAIT_MS);
    pty_send(&p, "Recall me:\r");
    pty_expect(&p, "... ", WAIT_MS);
    pty_send(&p, "one, two\"\"\"\r");
    pty_expect(&p, ">>> ", 30000);
    /* a backslash continuation too */
    pty_send(&p, "Also:\\\r");
    pty_expect(&p, "... ", WAIT_MS);
    pty_send(&p, "three\r");
    pty_expect(&p, ">>> ", 30000);

    /* Up twice: the """ message, all of its lines */
    pty_send(&p, "\033[A");
    pty_expect(&p, "Also:\\", WAIT_MS);
    pty_expect(&p, "three", WAIT_MS);
    pty_send(&p, "\033[A");
    pty_expect(&p, "Recall me:", WAIT_MS);
    pty_expect(&p, "one, two\"\"\"", WAIT_MS);
    /* sent again: one message, answered, the prompt back (not "... ") */
    pty_send(&p, "\r");
    pty_expect(&p, ">>> ", 30000);
    pty_send(&p, "/stats\r");
    pty_expect(&p, "messages   6 (3 exchanges)", WAIT_MS);
    pty_expect(&p, ">>> ", WAIT_MS);
    pty_send(&p, "/exit\r");
    assert_int_equal(pty_wait(&p, 10000), 0);
    pty_close(&p);

    /* the next chat recalls it whole from the history file: /exit, /stats,
     * then the message (sent twice, kept once) */
    spawn_chat(&p, true, "4");
    pty_expect(&p, ">>> ", 20000);
    pty_send(&p, "\033[A\033[A\033[A");
    pty_expect(&p, "Recall me:", WAIT_MS);
    pty_expect(&p, "one, two", WAIT_MS);
    pty_send(&p, "\025\004");   /* Ctrl-U, Ctrl-D: leave */
    assert_int_equal(pty_wait(&p, 10000), 0);
    pty_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_pty_prompt_streams_and_ctrl_c_interrupts),
        cmocka_unit_test(test_chat_pty_no_color_history_recall_and_ctrl_d),
        cmocka_unit_test(test_chat_pty_ollama_commands_verbose_and_limit_marker),
        cmocka_unit_test(test_chat_pty_multi_line_message_recalled_whole),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
