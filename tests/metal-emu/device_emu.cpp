/*
 * device_emu.cpp - metal/rvl_mtl_device.h on the Metal emulator (emu.h):
 * what lets metal/rvl_metal_backend.c run its forward pass on Linux, with
 * the shipped .metal kernels linked into the program.
 *
 * The emulator runs a dispatch at once, so "commit and wait" only reports
 * the first error an encoder kept. Buffers are emu::Buffer (exact size,
 * poisoned, guarded); an encoder records its bindings and replays them on a
 * fresh emu::Encoder for each dispatch, which keeps Metal's rule that
 * bindings survive a change of pipeline.
 */
#include <stdlib.h>
#include <string.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "emu.h"
#include "ruvllm.h"
#include "rvl_mtl_device.h"

struct rvl_mtl_pipeline {
    std::string name;
};

struct rvl_mtl_device {
    std::map<std::string, std::unique_ptr<rvl_mtl_pipeline>> pipes;
    std::string kernels; /* emu::kernel_names(): "  name (file)" per line */
};

struct rvl_mtl_buffer {
    emu::Buffer b;
    rvl_mtl_buffer(size_t n, const char *label) : b(n, label) {}
    rvl_mtl_buffer(const void *init, size_t n, const char *label) : b(init, n, label) {}
};

namespace {
enum { MAX_INDEX = 31 };
struct binding {
    enum { NONE, BUFFER, BYTES } kind = NONE;
    rvl_mtl_buffer *buf = nullptr;
    size_t off = 0;
    std::vector<unsigned char> bytes;
};
} // namespace

struct rvl_mtl_encoder {
    rvl_mtl_pipeline *pipe = nullptr;
    binding bind[MAX_INDEX];
    size_t tg_mem[MAX_INDEX] = {};
    int rc = 0;                /* first error */
    std::string err;
};

extern "C" {

int rvl_mtl_device_open(rvl_mtl_device **out, const char *library)
{
    (void)library;
    *out = new (std::nothrow) rvl_mtl_device;
    if (!*out)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    (*out)->kernels = "\n" + emu::kernel_names();
    return 0;
}

void rvl_mtl_device_close(rvl_mtl_device *d) { delete d; }

const char *rvl_mtl_device_name(const rvl_mtl_device *d)
{
    (void)d;
    return "metal-emu";
}

int rvl_mtl_pipeline_get(rvl_mtl_device *d, const char *name, rvl_mtl_pipeline **out)
{
    *out = nullptr;
    auto it = d->pipes.find(name);
    if (it != d->pipes.end()) {
        *out = it->second.get();
        return 0;
    }
    /* emu::Encoder aborts on an unknown name: look it up first */
    if (d->kernels.find("\n  " + std::string(name) + " (") == std::string::npos)
        return rvl_seterr(RVL_ENOTFOUND, "Metal kernel %s is not in the library", name);
    auto p = std::make_unique<rvl_mtl_pipeline>();
    p->name = name;
    *out = p.get();
    d->pipes.emplace(name, std::move(p));
    return 0;
}

uint32_t rvl_mtl_pipeline_max_threads(const rvl_mtl_pipeline *p)
{
    (void)p;
    return 1024;
}

int rvl_mtl_buffer_new(rvl_mtl_device *d, size_t bytes, const void *init, const char *label,
                       rvl_mtl_buffer **out)
{
    (void)d;
    *out = nullptr;
    if (bytes == 0)
        bytes = 16; /* Metal refuses empty buffers; keep the contract simple */
    *out = init ? new (std::nothrow) rvl_mtl_buffer(init, bytes, label)
                : new (std::nothrow) rvl_mtl_buffer(bytes, label);
    if (!*out)
        return rvl_seterr(RVL_ENOMEM, "out of memory for buffer %s (%zu bytes)", label, bytes);
    return 0;
}

void rvl_mtl_buffer_free(rvl_mtl_buffer *b) { delete b; }
size_t rvl_mtl_buffer_length(const rvl_mtl_buffer *b) { return b->b.length(); }
void *rvl_mtl_buffer_contents(rvl_mtl_buffer *b) { return b->b.contents(); }

int rvl_mtl_buffer_upload(rvl_mtl_buffer *b, size_t off, const void *src, size_t n)
{
    if (off > b->b.length() || n > b->b.length() - off)
        return rvl_seterr(RVL_ERANGE, "upload of %zu bytes at %zu past the end of %s (%zu)", n,
                          off, b->b.label(), b->b.length());
    if (n)
        memcpy((char *)b->b.contents() + off, src, n);
    return 0;
}

int rvl_mtl_buffer_download(rvl_mtl_buffer *b, size_t off, void *dst, size_t n)
{
    if (off > b->b.length() || n > b->b.length() - off)
        return rvl_seterr(RVL_ERANGE, "download of %zu bytes at %zu past the end of %s (%zu)", n,
                          off, b->b.label(), b->b.length());
    if (n)
        memcpy(dst, (const char *)b->b.contents() + off, n);
    return 0;
}

rvl_mtl_encoder *rvl_mtl_encoder_begin(rvl_mtl_device *d)
{
    (void)d;
    return new (std::nothrow) rvl_mtl_encoder;
}

static bool enc_bad(rvl_mtl_encoder *e, uint32_t index)
{
    if (e->rc)
        return true;
    if (index >= MAX_INDEX) {
        e->rc = RVL_EINVAL;
        e->err = "argument index " + std::to_string(index) + " out of range";
        return true;
    }
    return false;
}

void rvl_mtl_enc_set_pipeline(rvl_mtl_encoder *e, rvl_mtl_pipeline *p)
{
    if (!e->rc)
        e->pipe = p;
}

void rvl_mtl_enc_set_buffer(rvl_mtl_encoder *e, uint32_t index, rvl_mtl_buffer *b, size_t off)
{
    if (enc_bad(e, index))
        return;
    binding &k = e->bind[index];
    k.kind = binding::BUFFER;
    k.buf = b;
    k.off = off;
    k.bytes.clear();
}

void rvl_mtl_enc_set_bytes(rvl_mtl_encoder *e, uint32_t index, const void *p, size_t n)
{
    if (enc_bad(e, index))
        return;
    if (n > 4096) {
        e->rc = RVL_EINVAL;
        e->err = "set_bytes of " + std::to_string(n) + " bytes (Metal allows 4096)";
        return;
    }
    binding &k = e->bind[index];
    k.kind = binding::BYTES;
    k.buf = nullptr;
    k.bytes.assign((const unsigned char *)p, (const unsigned char *)p + n);
}

void rvl_mtl_enc_set_tg_memory(rvl_mtl_encoder *e, uint32_t index, size_t bytes)
{
    if (enc_bad(e, index))
        return;
    e->tg_mem[index] = bytes;
}

void rvl_mtl_enc_dispatch(rvl_mtl_encoder *e, const uint32_t groups[3], const uint32_t threads[3])
{
    if (e->rc)
        return;
    if (!e->pipe) {
        e->rc = RVL_EINVAL;
        e->err = "dispatch without a pipeline";
        return;
    }
    if (!groups[0] || !groups[1] || !groups[2])
        return; /* an empty grid does nothing, as on Metal */
    emu::Encoder enc(e->pipe->name.c_str());
    for (uint32_t i = 0; i < MAX_INDEX; i++) {
        binding &k = e->bind[i];
        if (k.kind == binding::BUFFER)
            enc.set_buffer(i, k.buf->b, k.off);
        else if (k.kind == binding::BYTES)
            enc.set_bytes(i, k.bytes.data(), k.bytes.size());
        if (e->tg_mem[i])
            enc.set_threadgroup_memory(i, e->tg_mem[i]);
    }
    if (enc.dispatch_threadgroups({groups[0], groups[1], groups[2]},
                                  {threads[0], threads[1], threads[2]}) != 0) {
        e->rc = RVL_EIO;
        e->err = emu::last_error();
    }
}

int rvl_mtl_encoder_commit_wait(rvl_mtl_encoder *e)
{
    if (!e)
        return rvl_seterr(RVL_ENOMEM, "out of memory for a command encoder");
    int rc = e->rc;
    if (rc)
        rvl_seterr(rc, "metal-emu: %s", e->err.c_str());
    delete e;
    return rc;
}

} /* extern "C" */
