/*
 * input.c - reading inputs safely (rvl_input_*).
 *
 * Two kinds of input:
 *  - files that must be files (a model, a session, a template, a file to
 *    inspect or convert): opened non-blocking, so a FIFO given by mistake is
 *    refused at once instead of blocking forever in open, and checked with
 *    fstat before anything is read;
 *  - texts (a prompt, a perplexity text) that may come from a pipe, stdin or
 *    a FIFO: read whole, but never past a limit, so /dev/zero or an endless
 *    producer ends with an error naming the limit instead of exhausting
 *    memory. The limit is RUVLLM_MAX_INPUT (bytes, with an optional K, M or G
 *    suffix), 256 MiB by default.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ruvllm.h"

#define DEFAULT_LIMIT ((size_t)256 << 20)

const char *rvl_input_kind(unsigned mode)
{
    const mode_t m = (mode_t)mode;
    return S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISFIFO(m) ? "a FIFO"
         : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

int rvl_input_open(const char *path, int *fd_out, uint64_t *size)
{
    *fd_out = -1;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return rvl_seterr(errno == ENOENT ? RVL_ENOTFOUND : RVL_EIO, "%s: %s", path,
                          strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return rvl_seterr(RVL_EIO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return rvl_seterr(RVL_EINVAL, "%s: is %s, not a regular file", path,
                          rvl_input_kind(st.st_mode));
    }
    /* back to blocking reads (a regular file never blocks, but NFS may
     * return EAGAIN otherwise) */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *fd_out = fd;
    if (size)
        *size = (uint64_t)st.st_size;
    return 0;
}

size_t rvl_input_limit(void)
{
    const char *s = getenv("RUVLLM_MAX_INPUT");
    if (!s || !*s)
        return DEFAULT_LIMIT;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (errno || end == s || *end || v == 0 || v > (SIZE_MAX >> shift) / 2)
        return DEFAULT_LIMIT;   /* a malformed value is ignored (cmd/ may warn) */
    return (size_t)v << shift;
}

/* "256 MiB" */
static void fmt_bytes(size_t n, char *out, size_t cap)
{
    if (n >= ((size_t)1 << 30) && n % ((size_t)1 << 30) == 0)
        snprintf(out, cap, "%zu GiB", n >> 30);
    else if (n >= ((size_t)1 << 20) && n % ((size_t)1 << 20) == 0)
        snprintf(out, cap, "%zu MiB", n >> 20);
    else if (n >= 1024 && n % 1024 == 0)
        snprintf(out, cap, "%zu KiB", n >> 10);
    else
        snprintf(out, cap, "%zu bytes", n);
}

int rvl_input_read_fd(int fd, const char *name, size_t limit, char **buf, size_t *len)
{
    rvl_buf b = {0};
    *buf = NULL;
    *len = 0;
    for (;;) {
        /* read at most one byte past the limit: enough to know it was passed */
        size_t want = limit + 1 - b.n < 65536 ? limit + 1 - b.n : 65536;
        if (rvl_buf_reserve(&b, want) < 0) {
            rvl_buf_free(&b);
            return rvl_seterr(RVL_ENOMEM, "%s: out of memory after %zu bytes", name, b.n);
        }
        /* a Ctrl-C that came before the read (while a terminal's prompt
         * was being printed) ends it as one during the read would */
        if (rvl_interrupted()) {
            rvl_buf_free(&b);
            return rvl_seterr(RVL_EINTR, "interrupted");
        }
        ssize_t k = read(fd, b.p + b.n, want);
        if (k < 0) {
            int e = errno;
            if (e == EINTR && !rvl_interrupted())
                continue;
            rvl_buf_free(&b);
            return e == EINTR ? rvl_seterr(RVL_EINTR, "interrupted")
                              : rvl_seterr(RVL_EIO, "%s: read: %s", name, strerror(e));
        }
        if (k == 0)
            break;
        b.n += (size_t)k;
        b.p[b.n] = 0;
        if (b.n > limit) {
            char lim[32];
            fmt_bytes(limit, lim, sizeof lim);
            rvl_buf_free(&b);
            return rvl_seterr(RVL_ERANGE, "%s: input larger than the limit of %s (set "
                              "RUVLLM_MAX_INPUT=BYTES to raise it)", name, lim);
        }
    }
    *len = b.n;
    if (!(*buf = rvl_buf_take(&b)))
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", name);
    return 0;
}

int rvl_input_read(const char *path, size_t limit, char **buf, size_t *len)
{
    if (!strcmp(path, "-"))
        return rvl_input_read_fd(STDIN_FILENO, "standard input", limit, buf, len);
    int fd = open(path, O_RDONLY | O_CLOEXEC);   /* a FIFO is a fine text source */
    if (fd < 0 && errno == EINTR)
        return rvl_seterr(RVL_EINTR, "interrupted");
    if (fd < 0)
        return rvl_seterr(errno == ENOENT ? RVL_ENOTFOUND : RVL_EIO, "%s: %s", path,
                          strerror(errno));
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        close(fd);
        return rvl_seterr(RVL_EINVAL, "%s: is a directory", path);
    }
    int rc = rvl_input_read_fd(fd, path, limit, buf, len);
    close(fd);
    return rc;
}
