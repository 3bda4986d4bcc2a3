/*
 * map.c - read-only whole-file mappings.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/format_int.h"

static const char empty_map[1];

int rvl_map_file(rvl_map *m, const char *path)
{
    struct stat st;
    int fd;

    m->base = NULL;
    m->size = 0;
    int rc = rvl_input_open(path, &fd, NULL);   /* a FIFO is refused, not waited on */
    if (rc < 0)
        return rc;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return rvl_seterr(RVL_EIO, "%s: %s", path, strerror(e));
    }
    if (st.st_size == 0) {
        close(fd);
        m->base = (void *)empty_map;
        return 0;
    }
    m->base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
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
