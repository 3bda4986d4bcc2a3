/*
 * stop.c - stop strings over generated text (ruvllm.h "Stop strings"):
 * where the earliest one starts, and how much of the text's end must be
 * held back because a stop string may still begin there.
 */
#include <string.h>

#include "ruvllm.h"

size_t rvl_stop_holdback(const char *const *stops, const char *s, size_t n)
{
    size_t keep = 0;
    for (; stops && *stops; stops++) {
        size_t sl = strlen(*stops);
        for (size_t k = sl > 1 ? sl - 1 : 0; k > keep; k--)
            if (k <= n && memcmp(s + n - k, *stops, k) == 0) {
                keep = k;
                break;
            }
    }
    return keep;
}

long rvl_stop_find(const char *const *stops, const char *s, size_t n)
{
    long best = -1;
    for (; stops && *stops; stops++) {
        if (!**stops)
            continue;
        const char *m = memmem(s, n, *stops, strlen(*stops));
        if (m && (best < 0 || m - s < best))
            best = m - s;
    }
    return best;
}
