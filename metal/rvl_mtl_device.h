/*
 * rvl_mtl_device.h - the small C device API the Metal backend is written
 * against: a device, compute pipelines looked up by kernel name (the
 * function name, or the [[host_name("...")]] of a template instance),
 * device buffers, and an encoder that binds arguments and dispatches
 * threadgroups, as MTLComputeCommandEncoder does.
 *
 * Two implementations, one contract:
 *   metal/rvl_mtl_device.m          Metal.framework (macOS, make METAL=1)
 *   tests/metal-emu/device_emu.cpp  the Linux emulator (tests/metal-emu)
 * so metal/rvl_metal_backend.c (pure C) runs unchanged on both.
 *
 * Errors: functions return 0 or a negative RVL_E* code with the detail in
 * rvl_errmsg() (lib/ruvllm.h). Nothing here prints or exits.
 *
 *   rvl_mtl_device *d;  rvl_mtl_device_open(&d, NULL);
 *   rvl_mtl_pipeline *p; rvl_mtl_pipeline_get(d, "rvl_rms_norm_f32", &p);
 *   rvl_mtl_buffer *x;  rvl_mtl_buffer_new(d, n * 4, "x", &x);
 *   rvl_mtl_encoder *e = rvl_mtl_encoder_begin(d);
 *   rvl_mtl_enc_set_pipeline(e, p);
 *   rvl_mtl_enc_set_bytes(e, 0, &args, sizeof args);
 *   rvl_mtl_enc_set_buffer(e, 1, x, 0);
 *   rvl_mtl_enc_dispatch(e, grid, threads);     // threadgroups, threads per group
 *   rc = rvl_mtl_encoder_commit_wait(e);        // runs, waits, frees e
 *
 * Dispatches of one encoder run in order, each seeing the writes of the
 * previous ones (Metal's serial dispatch type with tracked buffers).
 * Bindings stay set across pipelines and dispatches of one encoder.
 */
#ifndef RVL_MTL_DEVICE_H
#define RVL_MTL_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rvl_mtl_device rvl_mtl_device;
typedef struct rvl_mtl_pipeline rvl_mtl_pipeline;
typedef struct rvl_mtl_buffer rvl_mtl_buffer;
typedef struct rvl_mtl_encoder rvl_mtl_encoder;

/* Opens the default GPU and its kernel library: the metallib at
 * `library` (NULL: $RUVLLM_METALLIB, else ruvllm.metallib next to the
 * executable or one directory up, else in $(PREFIX)/share/ruvllm). The emulator ignores `library` (kernels are linked in).
 * owned: close with rvl_mtl_device_close (which accepts NULL). */
int rvl_mtl_device_open(rvl_mtl_device **out, const char *library);
void rvl_mtl_device_close(rvl_mtl_device *d);
/* "Apple M2 Pro", "metal-emu". borrowed: valid until close. */
const char *rvl_mtl_device_name(const rvl_mtl_device *d);

/* The pipeline of kernel `name`; RVL_ENOTFOUND naming it when the library
 * lacks it. borrowed: owned by the device (cached), valid until close. */
int rvl_mtl_pipeline_get(rvl_mtl_device *d, const char *name, rvl_mtl_pipeline **out);
/* The most threads per threadgroup the pipeline can run (1024 on the
 * emulator; Metal's maxTotalThreadsPerThreadgroup). */
uint32_t rvl_mtl_pipeline_max_threads(const rvl_mtl_pipeline *p);

/* A device buffer of `bytes` bytes in memory shared with the CPU; with
 * `init` non-NULL, a copy of init's first `bytes` bytes, otherwise
 * unspecified content (poisoned by the emulator). `label` names it in
 * errors and GPU captures. owned: free with rvl_mtl_buffer_free. */
int rvl_mtl_buffer_new(rvl_mtl_device *d, size_t bytes, const void *init, const char *label,
                       rvl_mtl_buffer **out);
void rvl_mtl_buffer_free(rvl_mtl_buffer *b);
size_t rvl_mtl_buffer_length(const rvl_mtl_buffer *b);
/* The CPU's view of the shared memory: read and write it only while no
 * encoder that uses the buffer is between begin and commit_wait. */
void *rvl_mtl_buffer_contents(rvl_mtl_buffer *b);
/* Copies in or out of [off, off + n); RVL_ERANGE past the end. */
int rvl_mtl_buffer_upload(rvl_mtl_buffer *b, size_t off, const void *src, size_t n);
int rvl_mtl_buffer_download(rvl_mtl_buffer *b, size_t off, void *dst, size_t n);

/* One command buffer with one compute encoder. NULL only when out of
 * memory (then commit_wait(NULL) reports it). Any error of set_* or
 * dispatch is kept and returned by commit_wait; later calls are ignored. */
rvl_mtl_encoder *rvl_mtl_encoder_begin(rvl_mtl_device *d);
void rvl_mtl_enc_set_pipeline(rvl_mtl_encoder *e, rvl_mtl_pipeline *p);
/* [[buffer(index)]] <- b from byte `off` (setBuffer:offset:atIndex:) */
void rvl_mtl_enc_set_buffer(rvl_mtl_encoder *e, uint32_t index, rvl_mtl_buffer *b, size_t off);
/* [[buffer(index)]] <- a copy of n bytes, n <= 4096 (setBytes:length:atIndex:) */
void rvl_mtl_enc_set_bytes(rvl_mtl_encoder *e, uint32_t index, const void *p, size_t n);
/* [[threadgroup(index)]] gets `bytes` bytes per threadgroup */
void rvl_mtl_enc_set_tg_memory(rvl_mtl_encoder *e, uint32_t index, size_t bytes);
/* dispatchThreadgroups:threadsPerThreadgroup: with the current pipeline */
void rvl_mtl_enc_dispatch(rvl_mtl_encoder *e, const uint32_t groups[3], const uint32_t threads[3]);
/* Ends encoding, commits, waits until the GPU is done and frees e.
 * Returns 0, the first error kept by the encoder, or the command buffer's
 * error (RVL_EIO with Metal's description / the emulator's report). */
int rvl_mtl_encoder_commit_wait(rvl_mtl_encoder *e);

#ifdef __cplusplus
}
#endif

#endif
