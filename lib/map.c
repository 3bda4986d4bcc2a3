/*
 * map.c - read-only whole-file mappings.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

static const char empty_map[1];

/* Files of 2 MiB and more are mapped at a 2 MiB boundary: the page
 * cache may then be mapped with 2 MiB entries (the kernel does so for
 * large folios of a file whose mapping is MADV_HUGEPAGE, as
 * rvl_file_prefault asks for a model's weights), which a GEMV streaming
 * the weights needs: on this project's 2-core VM a read pass over 480
 * MiB ran at 25-26 GB/s with 4 KiB pages and 33-35 GB/s with 2 MiB ones
 * (the TLB misses of 4 KiB pages). A reservation of size + 2 MiB, the
 * file mapped over its aligned part, the rest given back. */
#define MAP_ALIGN ((size_t)2 << 20)

static void *map_aligned(int fd, size_t size)
{
    if (size < MAP_ALIGN)
        return mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = (size + pg - 1) / pg * pg;
    char *r = mmap(NULL, len + MAP_ALIGN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED)
        return mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    char *a = (char *)(((uintptr_t)r + MAP_ALIGN - 1) & ~(uintptr_t)(MAP_ALIGN - 1));
    void *p = mmap(a, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
        munmap(r, len + MAP_ALIGN);
        return MAP_FAILED;
    }
    /* the reservation's pages before and after the file's */
    if (a > r)
        munmap(r, (size_t)(a - r));
    if (r + MAP_ALIGN > a)
        munmap(a + len, (size_t)(r + MAP_ALIGN - a));
    return p;
}

int rvl_map_file(rvl_map *m, const char *path)
{
    struct stat st;
    int fd;

    m->base = NULL;
    m->size = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rvl_seterr(errno == ENOENT ? RVL_ENOTFOUND : RVL_EIO,
                          "%s: %s", path, strerror(errno));
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return rvl_seterr(RVL_EIO, "%s: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return rvl_seterr(RVL_EINVAL, "%s: is a directory", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return rvl_seterr(RVL_EINVAL, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        m->base = (void *)empty_map;
        return 0;
    }
    m->base = map_aligned(fd, (size_t)st.st_size);
    close(fd);
    if (m->base == MAP_FAILED) {
        m->base = NULL;
        return rvl_seterr(RVL_EIO, "%s: mmap: %s", path, strerror(errno));
    }
    m->size = (uint64_t)st.st_size;
    return 0;
}

void rvl_map_unmap(rvl_map *m)
{
    if (m->base && m->base != (void *)empty_map)
        munmap(m->base, (size_t)m->size);
    m->base = NULL;
    m->size = 0;
}
