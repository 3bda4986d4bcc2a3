/*
 * afile.c - atomic output files.
 *
 * A writer gets a temporary "<dest>.tmp.XXXXXX" in the destination's
 * directory; commit fsyncs it, renames it over the destination and fsyncs
 * the directory. Until then the destination is untouched. Temporaries are
 * registered in a fixed table so that the signal handler (interrupt.c) can
 * unlink them with async-signal-safe calls only.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ruvllm.h"

#define MAX_TEMPS 32
#define WBUF_CAP (1u << 20)

static char temp_paths[MAX_TEMPS][PATH_MAX];
static volatile sig_atomic_t temp_used[MAX_TEMPS];

struct rvl_afile {
    int fd;
    int slot;
    uint64_t off;          /* logical offset (including buffered bytes) */
    size_t wlen;           /* bytes in wbuf not yet written */
    char *dest;
    unsigned char *wbuf;
};

void rvl_afile_cleanup_signal(void)
{
    for (int i = 0; i < MAX_TEMPS; i++)
        if (temp_used[i])
            unlink(temp_paths[i]);
}

static int reg_temp(const char *path)
{
    for (int i = 0; i < MAX_TEMPS; i++) {
        if (!temp_used[i]) {
            snprintf(temp_paths[i], PATH_MAX, "%s", path);
            temp_used[i] = 1;
            return i;
        }
    }
    return -1;
}

static void unreg_temp(int slot)
{
    if (slot >= 0)
        temp_used[slot] = 0;
}

int rvl_afile_open(rvl_afile **out, const char *dest_path)
{
    rvl_afile *f;
    char tmp[PATH_MAX];

    *out = NULL;
    if (snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", dest_path) >= (int)sizeof tmp)
        return rvl_seterr(RVL_EINVAL, "%s: path too long", dest_path);
    f = calloc(1, sizeof *f);
    if (!f)
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", dest_path);
    f->dest = strdup(dest_path);
    f->wbuf = malloc(WBUF_CAP);
    if (!f->dest || !f->wbuf) {
        free(f->dest);
        free(f->wbuf);
        free(f);
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", dest_path);
    }
    f->fd = mkstemp(tmp);
    if (f->fd < 0) {
        int e = errno;
        free(f->dest);
        free(f->wbuf);
        free(f);
        return rvl_seterr(RVL_EIO, "%s: cannot create temporary file: %s",
                          dest_path, strerror(e));
    }
    /* mkstemp creates 0600; outputs get the usual 0666 & ~umask */
    mode_t um = umask(0);
    umask(um);
    fchmod(f->fd, 0666 & ~um);
    f->slot = reg_temp(tmp);
    if (f->slot < 0) {
        unlink(tmp);
        close(f->fd);
        free(f->dest);
        free(f->wbuf);
        free(f);
        return rvl_seterr(RVL_ENOMEM, "%s: too many open output files", dest_path);
    }
    *out = f;
    return 0;
}

static int flush_buf(rvl_afile *f)
{
    size_t done = 0;
    while (done < f->wlen) {
        ssize_t n = write(f->fd, f->wbuf + done, f->wlen - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return rvl_seterr(RVL_EIO, "%s: write: %s", f->dest, strerror(errno));
        }
        done += (size_t)n;
    }
    f->wlen = 0;
    return 0;
}

int rvl_afile_write(rvl_afile *f, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    int rc;

    while (n > 0) {
        size_t room = WBUF_CAP - f->wlen;
        if (f->wlen == 0 && n >= WBUF_CAP) {
            /* large write: bypass the buffer */
            ssize_t w = write(f->fd, p, n);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                return rvl_seterr(RVL_EIO, "%s: write: %s", f->dest, strerror(errno));
            }
            p += w;
            n -= (size_t)w;
            f->off += (uint64_t)w;
            continue;
        }
        size_t k = n < room ? n : room;
        memcpy(f->wbuf + f->wlen, p, k);
        f->wlen += k;
        f->off += k;
        p += k;
        n -= k;
        if (f->wlen == WBUF_CAP && (rc = flush_buf(f)) < 0)
            return rc;
    }
    return 0;
}

int rvl_afile_pad(rvl_afile *f, uint64_t align)
{
    static const unsigned char zeros[256];
    if (align == 0)
        return 0;
    uint64_t rem = f->off % align;
    if (rem == 0)
        return 0;
    uint64_t pad = align - rem;
    while (pad > 0) {
        size_t k = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        int rc = rvl_afile_write(f, zeros, k);
        if (rc < 0)
            return rc;
        pad -= k;
    }
    return 0;
}

uint64_t rvl_afile_tell(const rvl_afile *f)
{
    return f->off;
}

static void afile_free(rvl_afile *f)
{
    unreg_temp(f->slot);
    free(f->dest);
    free(f->wbuf);
    free(f);
}

int rvl_afile_commit(rvl_afile *f)
{
    char dir[PATH_MAX];
    int rc = flush_buf(f);

    if (rc == 0 && fsync(f->fd) < 0)
        rc = rvl_seterr(RVL_EIO, "%s: fsync: %s", f->dest, strerror(errno));
    if (close(f->fd) < 0 && rc == 0)
        rc = rvl_seterr(RVL_EIO, "%s: close: %s", f->dest, strerror(errno));
    f->fd = -1;
    if (rc == 0 && rename(temp_paths[f->slot], f->dest) < 0)
        rc = rvl_seterr(RVL_EIO, "%s: rename: %s", f->dest, strerror(errno));
    if (rc < 0) {
        unlink(temp_paths[f->slot]);
        afile_free(f);
        return rc;
    }
    /* make the rename durable */
    snprintf(dir, sizeof dir, "%s", f->dest);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    afile_free(f);
    return 0;
}

void rvl_afile_abort(rvl_afile *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    unlink(temp_paths[f->slot]);
    afile_free(f);
}
