/*
 * buf.c - the growable byte buffer (rvl_buf, ruvllm.h): text or binary,
 * NUL-terminated once it holds anything, doubling from 256 bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ruvllm.h"

#define BUF_MIN 256

int rvl_buf_reserve(rvl_buf *b, size_t n)
{
    if (b->oom)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    if (b->p && b->cap - b->n > n)
        return 0;
    if (n >= SIZE_MAX - b->n)
        goto oom;
    const size_t need = b->n + n + 1;
    size_t cap = b->cap ? b->cap : BUF_MIN;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : 2 * cap;
    char *p = realloc(b->p, cap);
    if (!p)
        goto oom;
    if (!b->p)
        p[0] = 0;
    b->p = p;
    b->cap = cap;
    return 0;
oom:
    b->oom = true;
    return rvl_seterr(RVL_ENOMEM, "out of memory");
}

int rvl_buf_add(rvl_buf *b, const void *s, size_t n)
{
    int rc = rvl_buf_reserve(b, n);
    if (rc < 0)
        return rc;
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int rvl_buf_adds(rvl_buf *b, const char *s)
{
    return rvl_buf_add(b, s, s ? strlen(s) : 0);
}

char *rvl_buf_take(rvl_buf *b)
{
    char *p = NULL;
    if (rvl_buf_reserve(b, 0) == 0) {
        p = b->p;
        b->p = NULL;
    }
    rvl_buf_free(b);
    return p;
}

void rvl_buf_free(rvl_buf *b)
{
    if (!b)
        return;
    free(b->p);
    *b = (rvl_buf){0};
}
