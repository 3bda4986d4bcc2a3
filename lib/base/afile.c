/*
 * afile.c - atomic output files and temporary directories.
 *
 * A writer gets a temporary file in the destination's directory; commit
 * fsyncs it, renames it over the destination and fsyncs the directory.
 * Until then the destination is untouched.
 *
 * Temporaries are invisible where the file system allows: an unnamed
 * O_TMPFILE inode that gets a name only at commit (linkat through
 * /proc/self/fd, then rename), so even kill -9 leaves nothing behind.
 * Elsewhere the temporary is a hidden name of our own pattern
 *     .<destination name, shortened>.ruvllm-tmp.<pid>.XXXXXX
 * short enough for any legal destination name (NAME_MAX), and every open
 * in a directory first removes the temporaries there whose process is
 * gone (a SIGKILL, a power cut). Temporary directories (a safetensors
 * export) use the same pattern.
 *
 * Destinations: an existing destination that is not a regular file (a
 * device, a FIFO, a directory) is refused, never replaced; a symbolic link
 * is followed, so the link stays and its target is replaced. A rewrite
 * keeps the old file's mode and owner; a new file gets 0666 & ~umask, or
 * 0600 when the writer says it holds private data (rvl_afile_set_private).
 *
 * Named temporaries are registered in fixed tables so that the signal
 * handler (interrupt.c) can remove them with async-signal-safe calls only.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ruvllm.h"

#define MAX_TEMPS 32
#define WBUF_CAP (1u << 20)
#define TMP_TAG ".ruvllm-tmp."

/* ======================================================================
 * The tables the signal handler reads
 * ====================================================================== */
static char temp_paths[MAX_TEMPS][PATH_MAX];
static volatile sig_atomic_t temp_used[MAX_TEMPS];   /* 1 file, 2 directory */

static int reg_temp(const char *path, int kind)
{
    for (int i = 0; i < MAX_TEMPS; i++) {
        if (!temp_used[i]) {
            snprintf(temp_paths[i], PATH_MAX, "%s", path);
            temp_used[i] = kind;
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

/* Remove the entries of a temporary directory (one level: ours hold
 * files only) and the directory, with system calls alone. */
static void remove_dir_signal_safe(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        char buf[4096];
        long n;
        while ((n = syscall(SYS_getdents64, dfd, buf, sizeof buf)) > 0) {
            for (long off = 0; off < n;) {
                /* struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, name */
                unsigned short reclen;
                memcpy(&reclen, buf + off + 16, sizeof reclen);
                const char *name = buf + off + 19;
                if (strcmp(name, ".") && strcmp(name, ".."))
                    unlinkat(dfd, name, 0);
                off += reclen;
            }
        }
        close(dfd);
    }
    rmdir(dir);
}

void rvl_afile_cleanup_signal(void)
{
    for (int i = 0; i < MAX_TEMPS; i++) {
        if (temp_used[i] == 1)
            unlink(temp_paths[i]);
        else if (temp_used[i] == 2)
            remove_dir_signal_safe(temp_paths[i]);
    }
}

/* ======================================================================
 * Names
 * ====================================================================== */

/* Split path into its directory ("." when none) and base name. */
static int split_path(const char *path, char *dir, size_t dcap, const char **base)
{
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    if (!**base)
        return rvl_seterr(RVL_EINVAL, "%s: names a directory, not a file", path);
    int n = !slash ? snprintf(dir, dcap, ".")
                   : slash == path ? snprintf(dir, dcap, "/")
                                   : snprintf(dir, dcap, "%.*s", (int)(slash - path), path);
    if (n < 0 || (size_t)n >= dcap)
        return rvl_seterr(RVL_EINVAL, "%s: path too long", path);
    return 0;
}

/* dir/.<base, shortened>.ruvllm-tmp.<pid>.XXXXXX: fits NAME_MAX whatever
 * base's length. */
static int temp_name(const char *dest, char *out, size_t cap)
{
    char dir[PATH_MAX];
    const char *base;
    int rc = split_path(dest, dir, sizeof dir, &base);
    if (rc < 0)
        return rc;
    char tail[64];
    int nt = snprintf(tail, sizeof tail, TMP_TAG "%ld.XXXXXX", (long)getpid());
    size_t keep = strlen(base), room = NAME_MAX - 1 - (size_t)nt;
    if (keep > room)
        keep = room;
    int n = snprintf(out, cap, "%s/.%.*s%s", dir, (int)keep, base, tail);
    if (n < 0 || (size_t)n >= cap)
        return rvl_seterr(RVL_EINVAL, "%s: path too long", dest);
    return 0;
}

/* Remove, in dest's directory, our temporaries whose process is gone
 * (left by a SIGKILL or a crash): names with TMP_TAG<pid>. owned by us.
 * Best effort. */
static void remove_stale(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *t = strstr(de->d_name, TMP_TAG);
        if (de->d_name[0] != '.' || !t)
            continue;
        char *end;
        long pid = strtol(t + strlen(TMP_TAG), &end, 10);
        if (pid <= 0 || *end != '.' || strlen(end + 1) != 6)
            continue;
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_uid != geteuid())
            continue;
        char p[PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p)
            continue;
        if (S_ISDIR(st.st_mode))
            remove_dir_signal_safe(p);
        else if (S_ISREG(st.st_mode))
            unlink(p);
    }
    closedir(d);
}

int rvl_afile_check_dest(const char *dest, char *resolved, size_t cap)
{
    struct stat st;
    if (snprintf(resolved, cap, "%s", dest) >= (int)cap)
        return rvl_seterr(RVL_EINVAL, "%s: path too long", dest);
    if (lstat(dest, &st) < 0)
        return errno == ENOENT ? 0 : rvl_seterr(RVL_EIO, "%s: %s", dest, strerror(errno));
    if (S_ISLNK(st.st_mode)) {
        char *r = realpath(dest, NULL);
        if (!r) {   /* a dangling link: write where it points */
            char target[PATH_MAX], dir[PATH_MAX];
            const char *base;
            ssize_t n = readlink(dest, target, sizeof target - 1);
            if (n < 0)
                return rvl_seterr(RVL_EIO, "%s: %s", dest, strerror(errno));
            target[n] = 0;
            int rc = split_path(dest, dir, sizeof dir, &base);
            if (rc < 0)
                return rc;
            int k = target[0] == '/' ? snprintf(resolved, cap, "%s", target)
                                     : snprintf(resolved, cap, "%s/%s", dir, target);
            if (k < 0 || (size_t)k >= cap)
                return rvl_seterr(RVL_EINVAL, "%s: path too long", dest);
            return 0;
        }
        int k = snprintf(resolved, cap, "%s", r);
        free(r);
        if (k < 0 || (size_t)k >= cap)
            return rvl_seterr(RVL_EINVAL, "%s: path too long", dest);
        if (stat(resolved, &st) < 0)
            return 0;
    }
    if (!S_ISREG(st.st_mode))
        return rvl_seterr(RVL_EINVAL, "%s: exists and is %s; refusing to replace it (name a "
                          "regular file)", dest, rvl_input_kind(st.st_mode));
    return 0;
}

/* ======================================================================
 * Files
 * ====================================================================== */
struct rvl_afile {
    int fd;
    int slot;              /* in temp_paths once the temporary has a name */
    bool unnamed;          /* O_TMPFILE: no name until commit */
    bool private_;         /* a new destination gets 0600 */
    uint64_t off;          /* logical offset (including buffered bytes) */
    size_t wlen;           /* bytes in wbuf not yet written */
    char *dest;            /* the destination, symbolic links resolved */
    char *shown;           /* as the caller named it, for messages */
    char dir[PATH_MAX];
    char tmp[PATH_MAX];    /* the temporary's name (a template while unnamed) */
    unsigned char *wbuf;
};

static void afile_free(rvl_afile *f)
{
    unreg_temp(f->slot);
    free(f->dest);
    free(f->shown);
    free(f->wbuf);
    free(f);
}

int rvl_afile_open(rvl_afile **out, const char *dest_path)
{
    char resolved[PATH_MAX];
    const char *base;
    int rc;

    *out = NULL;
    if ((rc = rvl_afile_check_dest(dest_path, resolved, sizeof resolved)) < 0)
        return rc;
    rvl_afile *f = calloc(1, sizeof *f);
    if (!f)
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", dest_path);
    f->fd = -1;
    f->slot = -1;
    f->dest = strdup(resolved);
    f->shown = strdup(dest_path);
    f->wbuf = malloc(WBUF_CAP);
    if (!f->dest || !f->shown || !f->wbuf) {
        afile_free(f);
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", dest_path);
    }
    if ((rc = split_path(f->dest, f->dir, sizeof f->dir, &base)) < 0 ||
        (rc = temp_name(f->dest, f->tmp, sizeof f->tmp)) < 0) {
        afile_free(f);
        return rc;
    }
    remove_stale(f->dir);
#ifdef O_TMPFILE
    f->fd = open(f->dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    f->unnamed = f->fd >= 0;
#endif
    if (f->fd < 0) {
        f->fd = mkstemp(f->tmp);   /* 0600 */
        if (f->fd < 0) {
            int e = errno;
            afile_free(f);
            return rvl_seterr(RVL_EIO, "%s: cannot create a temporary file: %s", dest_path,
                              strerror(e));
        }
        if ((f->slot = reg_temp(f->tmp, 1)) < 0) {
            unlink(f->tmp);
            close(f->fd);
            afile_free(f);
            return rvl_seterr(RVL_ENOMEM, "%s: too many open output files", dest_path);
        }
    }
    *out = f;
    return 0;
}

void rvl_afile_set_private(rvl_afile *f) { f->private_ = true; }

static int flush_buf(rvl_afile *f)
{
    size_t done = 0;
    while (done < f->wlen) {
        ssize_t n = write(f->fd, f->wbuf + done, f->wlen - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return rvl_seterr(RVL_EIO, "%s: write: %s", f->shown, strerror(errno));
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
                return rvl_seterr(RVL_EIO, "%s: write: %s", f->shown, strerror(errno));
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

/* The new file's mode and owner: the old destination's when there is one
 * (checked again: it may have changed since open), else 0600 for private
 * data or 0666 & ~umask. */
static int set_mode(rvl_afile *f)
{
    struct stat st;
    if (stat(f->dest, &st) == 0) {
        if (!S_ISREG(st.st_mode))
            return rvl_seterr(RVL_EINVAL, "%s: exists and is %s; refusing to replace it",
                              f->shown, rvl_input_kind(st.st_mode));
        if (fchown(f->fd, st.st_uid, st.st_gid) < 0 && fchown(f->fd, (uid_t)-1, st.st_gid) < 0) {
            /* not ours to give away: keep our owner */
        }
        fchmod(f->fd, st.st_mode & 07777);
        return 0;
    }
    mode_t um = umask(0);
    umask(um);
    fchmod(f->fd, f->private_ ? 0600 : 0666 & ~um);
    return 0;
}

/* Give an unnamed temporary its name (the window until the rename is the
 * only one in which a SIGKILL leaves a file, and the next open removes
 * it). */
static int link_unnamed(rvl_afile *f)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", f->fd);
    int fd = mkstemp(f->tmp);   /* reserve a unique name, then link over it */
    if (fd < 0)
        return rvl_seterr(RVL_EIO, "%s: cannot create a temporary name: %s", f->shown,
                          strerror(errno));
    close(fd);
    if ((f->slot = reg_temp(f->tmp, 1)) < 0) {
        unlink(f->tmp);
        return rvl_seterr(RVL_ENOMEM, "%s: too many open output files", f->shown);
    }
    unlink(f->tmp);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, f->tmp, AT_SYMLINK_FOLLOW) < 0 &&
        linkat(f->fd, "", AT_FDCWD, f->tmp, AT_EMPTY_PATH) < 0)
        return rvl_seterr(RVL_EIO, "%s: cannot name the temporary file: %s", f->shown,
                          strerror(errno));
    f->unnamed = false;
    return 0;
}

static void fsync_dir(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
}

int rvl_afile_commit(rvl_afile *f)
{
    int rc = flush_buf(f);

    if (rc == 0)
        rc = set_mode(f);
    if (rc == 0 && fsync(f->fd) < 0)
        rc = rvl_seterr(RVL_EIO, "%s: fsync: %s", f->shown, strerror(errno));
    if (rc == 0 && f->unnamed)
        rc = link_unnamed(f);
    if (close(f->fd) < 0 && rc == 0)
        rc = rvl_seterr(RVL_EIO, "%s: close: %s", f->shown, strerror(errno));
    f->fd = -1;
    if (rc == 0 && rename(f->tmp, f->dest) < 0)
        rc = rvl_seterr(RVL_EIO, "%s: rename: %s", f->shown, strerror(errno));
    if (rc < 0) {
        if (!f->unnamed)
            unlink(f->tmp);
        afile_free(f);
        return rc;
    }
    fsync_dir(f->dir);   /* make the rename durable */
    afile_free(f);
    return 0;
}

void rvl_afile_abort(rvl_afile *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    if (!f->unnamed)
        unlink(f->tmp);
    afile_free(f);
}

/* ======================================================================
 * Temporary directories
 * ====================================================================== */
int rvl_afile_mkdtemp(const char *dest, char *tmp, size_t cap)
{
    char dir[PATH_MAX];
    const char *base;
    int rc;
    if ((rc = split_path(dest, dir, sizeof dir, &base)) < 0 ||
        (rc = temp_name(dest, tmp, cap)) < 0)
        return rc;
    remove_stale(dir);
    if (!mkdtemp(tmp))
        return rvl_seterr(RVL_EIO, "%s: cannot create a temporary directory: %s", dest,
                          strerror(errno));
    if (reg_temp(tmp, 2) < 0) {
        rmdir(tmp);
        return rvl_seterr(RVL_ENOMEM, "%s: too many open output files", dest);
    }
    mode_t um = umask(0);
    umask(um);
    chmod(tmp, 0777 & ~um);   /* mkdtemp makes 0700; the result is an ordinary directory */
    return 0;
}

static int dir_slot(const char *tmp)
{
    for (int i = 0; i < MAX_TEMPS; i++)
        if (temp_used[i] == 2 && !strcmp(temp_paths[i], tmp))
            return i;
    return -1;
}

int rvl_afile_dtemp_commit(const char *tmp, const char *dest)
{
    char dir[PATH_MAX];
    const char *base;
    int rc = split_path(dest, dir, sizeof dir, &base);
    if (rc == 0 && rename(tmp, dest) < 0)
        rc = rvl_seterr(RVL_EIO, "%s: %s", dest, strerror(errno));
    if (rc < 0) {
        rvl_afile_dtemp_abort(tmp);
        return rc;
    }
    unreg_temp(dir_slot(tmp));
    fsync_dir(dir);
    return 0;
}

void rvl_afile_dtemp_abort(const char *tmp)
{
    remove_dir_signal_safe(tmp);
    unreg_temp(dir_slot(tmp));
}
