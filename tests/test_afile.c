/*
 * test_afile.c - atomic outputs (lib/base/afile.c), signals
 * (lib/base/interrupt.c) and checked inputs (lib/base/input.c): what is
 * never replaced, which modes files get, that no temporary survives an
 * interruption or a SIGKILL, that any legal destination name works, that a
 * FIFO input is refused at once and a text input is bounded.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ruvllm.h"

static char dir[PATH_MAX];

static const char *tpath(const char *name)
{
    static char p[4][PATH_MAX + 300];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* Entries of the test directory, hidden ones included. */
static int n_entries(void)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "%s/rvl-afile.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int write_file(const char *path, const char *text, bool private_)
{
    rvl_afile *f;
    int rc = rvl_afile_open(&f, path);
    if (rc < 0)
        return rc;
    if (private_)
        rvl_afile_set_private(f);
    if ((rc = rvl_afile_write(f, text, strlen(text))) < 0) {
        rvl_afile_abort(f);
        return rc;
    }
    return rvl_afile_commit(f);
}

static void slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
}

/* ====================================================================
 * Destinations that are not regular files
 * ==================================================================== */

static void test_afile_refuses_a_fifo_destination(void **state)
{
    (void)state;
    assert_int_equal(mkfifo(tpath("fifo"), 0644), 0);
    assert_int_equal(write_file(tpath("fifo"), "data", false), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "is a FIFO; refusing to replace it"));
    struct stat st;
    assert_int_equal(lstat(tpath("fifo"), &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(n_entries(), 1);   /* no temporary either */
    unlink(tpath("fifo"));
}

/* As root (CI), /dev/null was replaced by a regular file: a device node of
 * our own stands for it here. */
static void test_afile_refuses_a_device_destination(void **state)
{
    (void)state;
    const char *dev = tpath("null");
    if (mknod(dev, S_IFCHR | 0666, makedev(1, 3)) < 0)
        dev = "/dev/null";   /* not root: the real one, which we cannot replace anyway */
    assert_int_equal(write_file(dev, "data", false), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "is a character device"));
    struct stat st;
    assert_int_equal(lstat(dev, &st), 0);
    assert_true(S_ISCHR(st.st_mode));
    unlink(tpath("null"));
}

static void test_afile_refuses_a_directory_destination(void **state)
{
    (void)state;
    assert_int_equal(mkdir(tpath("d"), 0755), 0);
    assert_int_equal(write_file(tpath("d"), "data", false), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "is a directory"));
    rmdir(tpath("d"));
}

/* A symbolic link stays a link; its target gets the new contents. */
static void test_afile_writes_through_a_symlink(void **state)
{
    (void)state;
    char buf[64];
    assert_int_equal(write_file(tpath("target"), "old", false), 0);
    assert_int_equal(symlink("target", tpath("link")), 0);
    assert_int_equal(write_file(tpath("link"), "new", false), 0);
    struct stat st;
    assert_int_equal(lstat(tpath("link"), &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    slurp(tpath("target"), buf, sizeof buf);
    assert_string_equal(buf, "new");
    assert_int_equal(n_entries(), 2);
    unlink(tpath("link"));
    unlink(tpath("target"));
}

/* ====================================================================
 * Modes
 * ==================================================================== */

static void test_afile_rewrite_keeps_the_mode(void **state)
{
    (void)state;
    struct stat st;
    assert_int_equal(write_file(tpath("conv.json"), "one", false), 0);
    assert_int_equal(chmod(tpath("conv.json"), 0600), 0);
    assert_int_equal(write_file(tpath("conv.json"), "two", false), 0);
    assert_int_equal(stat(tpath("conv.json"), &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(chmod(tpath("conv.json"), 0640), 0);
    assert_int_equal(write_file(tpath("conv.json"), "three", true), 0);
    assert_int_equal(stat(tpath("conv.json"), &st), 0);
    assert_int_equal(st.st_mode & 07777, 0640);   /* the user's choice wins over private */
    unlink(tpath("conv.json"));
}

static void test_afile_new_private_file_is_0600(void **state)
{
    (void)state;
    struct stat st;
    mode_t old = umask(022);
    assert_int_equal(write_file(tpath("session"), "private", true), 0);
    assert_int_equal(stat(tpath("session"), &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(write_file(tpath("model.gguf"), "public", false), 0);
    assert_int_equal(stat(tpath("model.gguf"), &st), 0);
    assert_int_equal(st.st_mode & 07777, 0644);
    umask(old);
    unlink(tpath("session"));
    unlink(tpath("model.gguf"));
}

/* ====================================================================
 * Names
 * ==================================================================== */

/* NAME_MAX-long destination names are legal: the temporary's name must
 * fit too ("<dest>.tmp.XXXXXX" did not past 244 bytes). */
static void test_afile_longest_legal_name_works(void **state)
{
    (void)state;
    char name[NAME_MAX + 1];
    for (size_t len = 240; len <= NAME_MAX; len += 5) {
        memset(name, 'n', len);
        name[len] = 0;
        if (write_file(tpath(name), "x", false) < 0)
            fail_msg("a %zu-byte name: %s", len, rvl_errmsg());
        assert_int_equal(access(tpath(name), F_OK), 0);
        unlink(tpath(name));
    }
    assert_int_equal(n_entries(), 0);
}

/* ====================================================================
 * Temporaries: interrupted, killed
 * ==================================================================== */

/* A writer killed with SIGKILL mid-write: nothing visible is left, at
 * latest after the next open in that directory. */
static void test_afile_sigkill_leaves_nothing_after_next_open(void **state)
{
    (void)state;
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        rvl_afile *f;
        if (rvl_afile_open(&f, tpath("big.bin")) < 0)
            _exit(1);
        static char block[1 << 16];
        for (int i = 0; i < 64; i++)
            rvl_afile_write(f, block, sizeof block);
        (void)!write(ready[1], "r", 1);
        for (;;)
            pause();
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(ready[0]);
    close(ready[1]);
    assert_true(access(tpath("big.bin"), F_OK) != 0);
    assert_int_equal(write_file(tpath("other"), "x", false), 0);
    assert_int_equal(n_entries(), 1);   /* only "other" */
    unlink(tpath("other"));
}

/* A stale named temporary of a dead process (a file system without
 * O_TMPFILE, or a kill between linkat and rename) is removed by the next
 * open; one of a live process, and files of other names, are not. */
static void test_afile_next_open_removes_stale_temporaries(void **state)
{
    (void)state;
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    waitpid(pid, NULL, 0);   /* a pid that no longer runs */
    char stale[128], live[128];
    snprintf(stale, sizeof stale, ".out.gguf.ruvllm-tmp.%ld.Ab12Cd", (long)pid);
    snprintf(live, sizeof live, ".out.gguf.ruvllm-tmp.%ld.Ab12Cd", (long)getppid());
    FILE *f = fopen(tpath(stale), "w");
    fclose(f);
    f = fopen(tpath(live), "w");
    fclose(f);
    f = fopen(tpath("notes.ruvllm-tmp.txt"), "w");
    fclose(f);
    assert_int_equal(write_file(tpath("out.gguf"), "x", false), 0);
    assert_true(access(tpath(stale), F_OK) != 0);
    assert_int_equal(access(tpath(live), F_OK), 0);
    assert_int_equal(access(tpath("notes.ruvllm-tmp.txt"), F_OK), 0);
    unlink(tpath(live));
    unlink(tpath("notes.ruvllm-tmp.txt"));
    unlink(tpath("out.gguf"));
}

/* Two signals (the second one exits at once) remove a temporary
 * directory with the files already in it, as for a temporary file;
 * SIGHUP counts like SIGINT. */
static void run_double_signal(int sig)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        rvl_interrupt_install();
        char tmp[PATH_MAX];
        if (rvl_afile_mkdtemp(tpath("export"), tmp, sizeof tmp) < 0)
            _exit(1);
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/config.json", tmp);
        if (write_file(p, "{}", false) < 0)
            _exit(1);
        rvl_afile *f;
        snprintf(p, sizeof p, "%s/model.safetensors", tmp);
        if (rvl_afile_open(&f, p) < 0)
            _exit(1);
        (void)!write(ready[1], "r", 1);
        while (!rvl_interrupted())
            usleep(1000);
        for (;;)
            pause();   /* the second signal exits */
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    kill(pid, sig);
    usleep(20000);
    kill(pid, sig);
    int status;
    waitpid(pid, &status, 0);
    close(ready[0]);
    close(ready[1]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    assert_int_equal(n_entries(), 0);
}

static void test_afile_double_sigint_removes_temporary_directory(void **state)
{
    (void)state;
    run_double_signal(SIGINT);
}

static void test_afile_double_sighup_removes_temporary_directory(void **state)
{
    (void)state;
    run_double_signal(SIGHUP);
}

static void test_afile_dtemp_commit_and_abort(void **state)
{
    (void)state;
    char tmp[PATH_MAX], p[PATH_MAX + 32];
    assert_int_equal(rvl_afile_mkdtemp(tpath("out"), tmp, sizeof tmp), 0);
    snprintf(p, sizeof p, "%s/a", tmp);
    assert_int_equal(write_file(p, "a", false), 0);
    assert_int_equal(rvl_afile_dtemp_commit(tmp, tpath("out")), 0);
    assert_int_equal(access(tpath("out/a"), F_OK), 0);
    assert_int_equal(rvl_afile_mkdtemp(tpath("out2"), tmp, sizeof tmp), 0);
    snprintf(p, sizeof p, "%s/b", tmp);
    assert_int_equal(write_file(p, "b", false), 0);
    rvl_afile_dtemp_abort(tmp);
    assert_int_equal(n_entries(), 1);   /* "out" */
    unlink(tpath("out/a"));
    rmdir(tpath("out"));
}

/* SIGPIPE no longer kills: a write to a closed pipe fails with EPIPE. */
static void test_interrupt_sigpipe_is_an_error_not_a_death(void **state)
{
    (void)state;
    pid_t pid = fork();
    if (pid == 0) {
        rvl_interrupt_install();
        int p[2];
        if (pipe(p) < 0)
            _exit(1);
        close(p[0]);
        ssize_t n = write(p[1], "x", 1);
        _exit(n < 0 && errno == EPIPE ? 0 : 2);
    }
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* ====================================================================
 * Inputs
 * ==================================================================== */

/* A FIFO where a file must be is refused at once (it used to block in
 * open until a writer came, forever). */
static void test_input_open_refuses_a_fifo_at_once(void **state)
{
    (void)state;
    assert_int_equal(mkfifo(tpath("model.gguf"), 0644), 0);
    alarm(10);   /* a regression hangs: make it fail instead */
    int fd = -2;
    assert_int_equal(rvl_input_open(tpath("model.gguf"), &fd, NULL), RVL_EINVAL);
    assert_int_equal(fd, -1);
    assert_non_null(strstr(rvl_errmsg(), "is a FIFO, not a regular file"));
    rvl_file *f = NULL;
    assert_int_equal(rvl_file_open(&f, tpath("model.gguf")), RVL_EINVAL);
    alarm(0);
    unlink(tpath("model.gguf"));
}

static void test_input_read_stops_at_the_limit(void **state)
{
    (void)state;
    char *buf = (char *)1;
    size_t n = 7;
    assert_int_equal(rvl_input_read("/dev/zero", (size_t)1 << 20, &buf, &n), RVL_ERANGE);
    assert_null(buf);
    assert_non_null(strstr(rvl_errmsg(), "/dev/zero: input larger than the limit of 1 MiB"));
    assert_non_null(strstr(rvl_errmsg(), "RUVLLM_MAX_INPUT"));
    /* exactly the limit is fine, one byte more is not */
    FILE *f = fopen(tpath("text"), "w");
    for (int i = 0; i < 1000; i++)
        fputc('a', f);
    fclose(f);
    assert_int_equal(rvl_input_read(tpath("text"), 1000, &buf, &n), 0);
    assert_int_equal(n, 1000);
    assert_int_equal(buf[1000], 0);
    free(buf);
    assert_int_equal(rvl_input_read(tpath("text"), 999, &buf, &n), RVL_ERANGE);
    unlink(tpath("text"));
}

static void test_input_limit_from_environment(void **state)
{
    (void)state;
    unsetenv("RUVLLM_MAX_INPUT");
    assert_int_equal(rvl_input_limit(), (size_t)256 << 20);
    setenv("RUVLLM_MAX_INPUT", "4K", 1);
    assert_int_equal(rvl_input_limit(), 4096);
    setenv("RUVLLM_MAX_INPUT", "2G", 1);
    assert_int_equal(rvl_input_limit(), (size_t)2 << 30);
    setenv("RUVLLM_MAX_INPUT", "lots", 1);
    assert_int_equal(rvl_input_limit(), (size_t)256 << 20);
    unsetenv("RUVLLM_MAX_INPUT");
}

/* ====================================================================
 * Sessions used by two processes
 * ==================================================================== */

/* A second conversation on the same session file is refused, naming the
 * first one's pid; once that one ends, the file is free again. */
static void test_session_lock_refuses_a_second_holder(void **state)
{
    (void)state;
    int ready[2], done[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(done), 0);
    pid_t pid = fork();
    if (pid == 0) {
        int l;
        if (rvl_session_lock(tpath("chat.session"), &l) < 0)
            _exit(1);
        (void)!write(ready[1], "r", 1);
        char c;
        (void)!read(done[0], &c, 1);
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    int l = -2;
    assert_int_equal(rvl_session_lock(tpath("chat.session"), &l), RVL_EINVAL);
    assert_int_equal(l, -1);
    char want[64];
    snprintf(want, sizeof want, "in use by another ruvllm (pid %ld)", (long)pid);
    assert_non_null(strstr(rvl_errmsg(), want));
    (void)!write(done[1], "d", 1);
    waitpid(pid, NULL, 0);
    assert_int_equal(rvl_session_lock(tpath("chat.session"), &l), 0);
    rvl_session_unlock(l);
    close(ready[0]);
    close(ready[1]);
    close(done[0]);
    close(done[1]);
    unlink(tpath(".chat.session.lock"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_afile_refuses_a_fifo_destination),
        cmocka_unit_test(test_afile_refuses_a_device_destination),
        cmocka_unit_test(test_afile_refuses_a_directory_destination),
        cmocka_unit_test(test_afile_writes_through_a_symlink),
        cmocka_unit_test(test_afile_rewrite_keeps_the_mode),
        cmocka_unit_test(test_afile_new_private_file_is_0600),
        cmocka_unit_test(test_afile_longest_legal_name_works),
        cmocka_unit_test(test_afile_sigkill_leaves_nothing_after_next_open),
        cmocka_unit_test(test_afile_next_open_removes_stale_temporaries),
        cmocka_unit_test(test_afile_double_sigint_removes_temporary_directory),
        cmocka_unit_test(test_afile_double_sighup_removes_temporary_directory),
        cmocka_unit_test(test_afile_dtemp_commit_and_abort),
        cmocka_unit_test(test_interrupt_sigpipe_is_an_error_not_a_death),
        cmocka_unit_test(test_input_open_refuses_a_fifo_at_once),
        cmocka_unit_test(test_input_read_stops_at_the_limit),
        cmocka_unit_test(test_input_limit_from_environment),
        cmocka_unit_test(test_session_lock_refuses_a_second_holder),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
