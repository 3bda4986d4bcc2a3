/*
 * error.c - error codes and the thread-local detail message.
 */
#include <stdio.h>
#include <string.h>

#include "ruvllm.h"

#define ERRMSG_CAP 1024

static _Thread_local char errmsg[ERRMSG_CAP];

const char *rvl_errmsg(void)
{
    return errmsg;
}

const char *rvl_strerror(int code)
{
    switch (code) {
    case RVL_OK: return "success";
    case RVL_ENOMEM: return "out of memory";
    case RVL_EIO: return "input/output error";
    case RVL_EFORMAT: return "invalid file format";
    case RVL_EINVAL: return "invalid argument";
    case RVL_EUNSUPPORTED: return "not supported";
    case RVL_EINTR: return "interrupted";
    case RVL_ENOTFOUND: return "not found";
    case RVL_ERANGE: return "value out of range";
    case RVL_EBUSY: return "busy";
    default: return "unknown error";
    }
}

int rvl_seterr(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    return code;
}

int rvl_preerr(int code, const char *fmt, ...)
{
    char old[ERRMSG_CAP];
    char pre[ERRMSG_CAP / 2];
    va_list ap;

    memcpy(old, errmsg, sizeof old);
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    /* pre is at most half the buffer; the old message is cut to fit */
    size_t n = strlen(pre);
    memcpy(errmsg, pre, n + 1);
    if (old[0] && n + 2 < sizeof errmsg) {
        errmsg[n] = ':';
        errmsg[n + 1] = ' ';
        size_t room = sizeof errmsg - n - 3;
        size_t m = strlen(old);
        if (m > room)
            m = room;
        memcpy(errmsg + n + 2, old, m);
        errmsg[n + 2 + m] = 0;
    }
    return code;
}
