/*
 * rvl_mtl_device.m - metal/rvl_mtl_device.h on Metal.framework (macOS,
 * built by `make METAL=1` with -fobjc-arc). The only Objective-C of the
 * backend: everything else (metal/rvl_metal_backend.c) is portable C and
 * runs on Linux in the emulator through tests/metal-emu/device_emu.cpp.
 *
 * Objective-C objects are kept in the C structs as retained CF pointers
 * (__bridge_retained on creation, __bridge_transfer on release), so the
 * structs stay plain C and are allocated with calloc.
 *
 * NOT COMPILED ON LINUX: written against Apple's documented API
 * (MTLCreateSystemDefaultDevice, newLibraryWithURL:error:,
 * newComputePipelineStateWithFunction:error:, MTLResourceStorageModeShared
 * buffers, computeCommandEncoder, setBuffer:offset:atIndex:,
 * setBytes:length:atIndex:, setThreadgroupMemoryLength:atIndex:,
 * dispatchThreadgroups:threadsPerThreadgroup:, commit,
 * waitUntilCompleted); see metal/README.md for what is verified where.
 */
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <limits.h>
#include <mach-o/dyld.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ruvllm.h"
#include "rvl_mtl_device.h"

#ifndef RVL_METALLIB_DIR
#define RVL_METALLIB_DIR "/usr/local/share/ruvllm"
#endif

struct rvl_mtl_pipeline {
    void *pso;                       /* id<MTLComputePipelineState> */
    char *name;
    struct rvl_mtl_pipeline *next;
};

struct rvl_mtl_device {
    void *dev;                       /* id<MTLDevice> */
    void *queue;                     /* id<MTLCommandQueue> */
    void *lib;                       /* id<MTLLibrary> */
    char name[128];
    struct rvl_mtl_pipeline *pipes;  /* cache, by name */
};

struct rvl_mtl_buffer {
    void *buf;                       /* id<MTLBuffer> */
    size_t len;
};

struct rvl_mtl_encoder {
    void *cb;                        /* id<MTLCommandBuffer> */
    void *ce;                        /* id<MTLComputeCommandEncoder> */
    struct rvl_mtl_pipeline *pipe;
    int rc;                          /* first error, with msg */
    char msg[256];
};

#define DEV(d) ((__bridge id<MTLDevice>)(d)->dev)
#define ENC(e) ((__bridge id<MTLComputeCommandEncoder>)(e)->ce)

static void release(void **p)
{
    if (*p) {
        id o = (__bridge_transfer id)*p; /* ARC releases it at scope end */
        (void)o;
        *p = NULL;
    }
}

/* The first readable metallib of: library, $RUVLLM_METALLIB, next to the
 * executable, one directory up (build/tests/ -> build/), the install dir. */
static int find_library(const char *library, char *path, size_t cap)
{
    if (library) {
        snprintf(path, cap, "%s", library);
        return 0;
    }
    const char *env = getenv("RUVLLM_METALLIB");
    if (env && *env) {
        snprintf(path, cap, "%s", env);
        return 0;
    }
    char exe[PATH_MAX];
    uint32_t n = sizeof exe;
    if (_NSGetExecutablePath(exe, &n) == 0) {
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(path, cap, "%s/ruvllm.metallib", exe);
            if (access(path, R_OK) == 0)
                return 0;
            snprintf(path, cap, "%s/../ruvllm.metallib", exe);
            if (access(path, R_OK) == 0)
                return 0;
        }
    }
    snprintf(path, cap, "%s/ruvllm.metallib", RVL_METALLIB_DIR);
    if (access(path, R_OK) == 0)
        return 0;
    return rvl_seterr(RVL_ENOTFOUND, "ruvllm.metallib not found (next to the executable, in %s, "
                      "or set RUVLLM_METALLIB)", RVL_METALLIB_DIR);
}

int rvl_mtl_device_open(rvl_mtl_device **out, const char *library)
{
    *out = NULL;
    char path[PATH_MAX + 32];
    int rc = find_library(library, path, sizeof path);
    if (rc < 0)
        return rc;
    @autoreleasepool {
        id<MTLDevice> dev = MTLCreateSystemDefaultDevice();
        if (!dev)
            return rvl_seterr(RVL_EUNSUPPORTED, "no Metal device (MTLCreateSystemDefaultDevice "
                              "returned nil)");
        NSError *err = nil;
        NSURL *url = [NSURL fileURLWithPath:[NSString stringWithUTF8String:path]];
        id<MTLLibrary> lib = [dev newLibraryWithURL:url error:&err];
        if (!lib)
            return rvl_seterr(RVL_EIO, "%s: %s", path,
                              err ? err.localizedDescription.UTF8String : "cannot load the library");
        id<MTLCommandQueue> queue = [dev newCommandQueue];
        if (!queue)
            return rvl_seterr(RVL_EIO, "Metal: cannot create a command queue");
        rvl_mtl_device *d = calloc(1, sizeof *d);
        if (!d)
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        snprintf(d->name, sizeof d->name, "%s", dev.name.UTF8String);
        d->dev = (__bridge_retained void *)dev;
        d->queue = (__bridge_retained void *)queue;
        d->lib = (__bridge_retained void *)lib;
        *out = d;
    }
    return 0;
}

void rvl_mtl_device_close(rvl_mtl_device *d)
{
    if (!d)
        return;
    for (struct rvl_mtl_pipeline *p = d->pipes, *next; p; p = next) {
        next = p->next;
        release(&p->pso);
        free(p->name);
        free(p);
    }
    release(&d->lib);
    release(&d->queue);
    release(&d->dev);
    free(d);
}

const char *rvl_mtl_device_name(const rvl_mtl_device *d) { return d->name; }

int rvl_mtl_pipeline_get(rvl_mtl_device *d, const char *name, rvl_mtl_pipeline **out)
{
    *out = NULL;
    for (struct rvl_mtl_pipeline *p = d->pipes; p; p = p->next)
        if (strcmp(p->name, name) == 0) {
            *out = p;
            return 0;
        }
    @autoreleasepool {
        id<MTLLibrary> lib = (__bridge id<MTLLibrary>)d->lib;
        id<MTLFunction> fn = [lib newFunctionWithName:[NSString stringWithUTF8String:name]];
        if (!fn)
            return rvl_seterr(RVL_ENOTFOUND, "Metal kernel %s is not in the library", name);
        NSError *err = nil;
        id<MTLComputePipelineState> ps = [DEV(d) newComputePipelineStateWithFunction:fn error:&err];
        if (!ps)
            return rvl_seterr(RVL_EIO, "Metal kernel %s: %s", name,
                              err ? err.localizedDescription.UTF8String : "no pipeline");
        struct rvl_mtl_pipeline *p = calloc(1, sizeof *p);
        if (!p || !(p->name = strdup(name))) {
            free(p);
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        }
        p->pso = (__bridge_retained void *)ps;
        p->next = d->pipes;
        d->pipes = p;
        *out = p;
    }
    return 0;
}

uint32_t rvl_mtl_pipeline_max_threads(const rvl_mtl_pipeline *p)
{
    id<MTLComputePipelineState> ps = (__bridge id<MTLComputePipelineState>)p->pso;
    return (uint32_t)ps.maxTotalThreadsPerThreadgroup;
}

int rvl_mtl_buffer_new(rvl_mtl_device *d, size_t bytes, const void *init, const char *label,
                       rvl_mtl_buffer **out)
{
    *out = NULL;
    if (bytes == 0)
        bytes = 16; /* Metal refuses empty buffers */
    @autoreleasepool {
        id<MTLBuffer> b = init ? [DEV(d) newBufferWithBytes:init length:bytes
                                                    options:MTLResourceStorageModeShared]
                               : [DEV(d) newBufferWithLength:bytes
                                                     options:MTLResourceStorageModeShared];
        if (!b)
            return rvl_seterr(RVL_ENOMEM, "Metal: cannot allocate %zu bytes for %s", bytes, label);
        if (label)
            b.label = [NSString stringWithUTF8String:label];
        rvl_mtl_buffer *mb = calloc(1, sizeof *mb);
        if (!mb)
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        mb->buf = (__bridge_retained void *)b;
        mb->len = bytes;
        *out = mb;
    }
    return 0;
}

void rvl_mtl_buffer_free(rvl_mtl_buffer *b)
{
    if (!b)
        return;
    release(&b->buf);
    free(b);
}

size_t rvl_mtl_buffer_length(const rvl_mtl_buffer *b) { return b->len; }

void *rvl_mtl_buffer_contents(rvl_mtl_buffer *b)
{
    return [(__bridge id<MTLBuffer>)b->buf contents];
}

int rvl_mtl_buffer_upload(rvl_mtl_buffer *b, size_t off, const void *src, size_t n)
{
    if (off > b->len || n > b->len - off)
        return rvl_seterr(RVL_ERANGE, "upload of %zu bytes at %zu past the end (%zu)", n, off, b->len);
    memcpy((char *)rvl_mtl_buffer_contents(b) + off, src, n);
    return 0;
}

int rvl_mtl_buffer_download(rvl_mtl_buffer *b, size_t off, void *dst, size_t n)
{
    if (off > b->len || n > b->len - off)
        return rvl_seterr(RVL_ERANGE, "download of %zu bytes at %zu past the end (%zu)", n, off, b->len);
    memcpy(dst, (const char *)rvl_mtl_buffer_contents(b) + off, n);
    return 0;
}

rvl_mtl_encoder *rvl_mtl_encoder_begin(rvl_mtl_device *d)
{
    rvl_mtl_encoder *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    @autoreleasepool {
        id<MTLCommandQueue> q = (__bridge id<MTLCommandQueue>)d->queue;
        id<MTLCommandBuffer> cb = [q commandBuffer];
        id<MTLComputeCommandEncoder> ce = cb ? [cb computeCommandEncoder] : nil;
        if (!ce) {
            e->rc = RVL_EIO;
            snprintf(e->msg, sizeof e->msg, "Metal: cannot create a command buffer");
            return e;
        }
        e->cb = (__bridge_retained void *)cb;
        e->ce = (__bridge_retained void *)ce;
    }
    return e;
}

static void fail(rvl_mtl_encoder *e, int rc, const char *msg)
{
    if (!e->rc) {
        e->rc = rc;
        snprintf(e->msg, sizeof e->msg, "%s", msg);
    }
}

void rvl_mtl_enc_set_pipeline(rvl_mtl_encoder *e, rvl_mtl_pipeline *p)
{
    if (e->rc)
        return;
    e->pipe = p;
    [ENC(e) setComputePipelineState:(__bridge id<MTLComputePipelineState>)p->pso];
}

void rvl_mtl_enc_set_buffer(rvl_mtl_encoder *e, uint32_t index, rvl_mtl_buffer *b, size_t off)
{
    if (e->rc)
        return;
    if (off > b->len)
        { fail(e, RVL_ERANGE, "buffer offset past the end"); return; }
    [ENC(e) setBuffer:(__bridge id<MTLBuffer>)b->buf offset:off atIndex:index];
}

void rvl_mtl_enc_set_bytes(rvl_mtl_encoder *e, uint32_t index, const void *p, size_t n)
{
    if (e->rc)
        return;
    if (n > 4096)
        { fail(e, RVL_EINVAL, "setBytes of more than 4096 bytes"); return; }
    [ENC(e) setBytes:p length:n atIndex:index];
}

void rvl_mtl_enc_set_tg_memory(rvl_mtl_encoder *e, uint32_t index, size_t bytes)
{
    if (e->rc)
        return;
    /* Metal wants a multiple of 16 bytes */
    [ENC(e) setThreadgroupMemoryLength:(bytes + 15) & ~(size_t)15 atIndex:index];
}

void rvl_mtl_enc_dispatch(rvl_mtl_encoder *e, const uint32_t groups[3], const uint32_t threads[3])
{
    if (e->rc)
        return;
    if (!e->pipe)
        { fail(e, RVL_EINVAL, "dispatch without a pipeline"); return; }
    if (!groups[0] || !groups[1] || !groups[2])
        return; /* nothing to do */
    const uint64_t nt = (uint64_t)threads[0] * threads[1] * threads[2];
    if (nt > rvl_mtl_pipeline_max_threads(e->pipe)) {
        char m[200];
        snprintf(m, sizeof m, "kernel %s: %llu threads per threadgroup, the pipeline allows %u",
                 e->pipe->name, (unsigned long long)nt, rvl_mtl_pipeline_max_threads(e->pipe));
        { fail(e, RVL_EUNSUPPORTED, m); return; }
    }
    [ENC(e) dispatchThreadgroups:MTLSizeMake(groups[0], groups[1], groups[2])
           threadsPerThreadgroup:MTLSizeMake(threads[0], threads[1], threads[2])];
}

int rvl_mtl_encoder_commit_wait(rvl_mtl_encoder *e)
{
    if (!e)
        return rvl_seterr(RVL_ENOMEM, "out of memory for a command encoder");
    int rc = e->rc;
    char msg[300];
    snprintf(msg, sizeof msg, "%s", e->msg);
    @autoreleasepool {
        if (e->ce)
            [ENC(e) endEncoding];
        if (e->cb) {
            id<MTLCommandBuffer> cb = (__bridge id<MTLCommandBuffer>)e->cb;
            if (rc == 0) {
                [cb commit];
                [cb waitUntilCompleted];
                if (cb.status == MTLCommandBufferStatusError) {
                    rc = RVL_EIO;
                    snprintf(msg, sizeof msg, "Metal command buffer failed: %s",
                             cb.error ? cb.error.localizedDescription.UTF8String : "unknown error");
                }
            }
        }
        release(&e->ce);
        release(&e->cb);
    }
    free(e);
    if (rc)
        rvl_seterr(rc, "%s", msg);
    return rc;
}
