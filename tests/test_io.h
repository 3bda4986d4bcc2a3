/*
 * test_io.h - reading a whole file in the cmocka tests (include after
 * cmocka.h).
 */
#ifndef RVL_TEST_IO_H
#define RVL_TEST_IO_H

#include <stdio.h>
#include <stdlib.h>

/* The file's bytes, NUL-terminated (owned: free); *len (may be NULL) gets
 * their count (0 on failure). NULL when the file cannot be opened; out of memory or a
 * short read fails the test. */
static inline char *test_slurp(const char *path, size_t *len)
{
    if (len)
        *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *p = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n + 65536 + 1 > cap) {
            cap = cap ? 2 * cap : 1 << 16;
            char *q = realloc(p, cap + 1);
            assert_non_null(q);
            p = q;
        }
        r = fread(p + n, 1, cap - n, f);
        n += r;
    } while (r > 0);
    assert_false(ferror(f));
    fclose(f);
    p[n] = 0;
    if (len)
        *len = n;
    return p;
}

#endif
