/*
 * tests/metal-emu/emu.h - the host side of the Metal emulator: what a test
 * program uses to create device buffers, bind kernel arguments and dispatch
 * a kernel from a .metal file, as a Metal host would with
 * MTLComputeCommandEncoder. Read README.md (same directory) first.
 *
 *   emu::Buffer x(n * sizeof(float), "x");        // device memory, exact size
 *   emu::Encoder enc("add_f32");                   // kernel by its host name
 *   enc.set_buffer(0, x);                          // [[buffer(0)]]
 *   enc.set_value(3, (uint32_t)n);                 // [[buffer(3)]], constant
 *   enc.set_threadgroup_memory(0, 256 * 4);        // [[threadgroup(0)]]
 *   int rc = enc.dispatch_threads({n, 1, 1}, {64, 1, 1});
 *   // rc 0, or -1 and emu::last_error() says what the emulator caught
 *
 * This header does not include <metal_stdlib>: test code and kernel code are
 * separate translation units, so MSL's keywords never leak into tests.
 */
#ifndef RVL_METAL_EMU_H
#define RVL_METAL_EMU_H

#include <stddef.h>
#include <stdint.h>
#include <string>

namespace emu {

/* A grid or threadgroup size (MTLSize). */
struct size3 {
    uint32_t x = 1, y = 1, z = 1;
    size3() = default;
    size3(uint32_t x_, uint32_t y_ = 1, uint32_t z_ = 1) : x(x_), y(y_), z(z_) {}
};

/* Device memory (MTLBuffer). Allocated with exactly `bytes` bytes so an
 * access past either end is caught: by ASan in sanitized builds, by a
 * PROT_NONE guard page right after the last byte (and a canary check of
 * the bytes before the first) otherwise. Contents start POISONED (every
 * byte 0xFF: NaN as f32/f16, -1 as int) so unwritten outputs show. */
class Buffer {
public:
    Buffer(size_t bytes, const char *label);
    Buffer(const void *init, size_t bytes, const char *label); /* copies init */
    ~Buffer();
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;

    void *contents() { return p_; }
    size_t length() const { return n_; }
    const char *label() const { return label_.c_str(); }
    template <class T> T *data() { return static_cast<T *>(p_); }
    void poison(); /* 0xFF over every byte again */

private:
    friend class Encoder;
    void *p_ = nullptr;
    size_t n_ = 0;
    void *map_ = nullptr; /* the runtime's allocation record */
    std::string label_;
};

/* One kernel's arguments and its dispatches (MTLComputeCommandEncoder with
 * one pipeline). The kernel is looked up by its host name: the function
 * name for `kernel void f(...)`, the [[host_name("...")]] string for a
 * template instantiation. An unknown name aborts the test with the list of
 * kernels linked into it. Arguments stay bound across dispatches. */
class Encoder {
public:
    explicit Encoder(const char *kernel);
    ~Encoder();
    Encoder(const Encoder &) = delete;
    Encoder &operator=(const Encoder &) = delete;

    /* [[buffer(index)]] <- b's contents from byte `offset` (setBuffer:offset:atIndex:) */
    void set_buffer(uint32_t index, Buffer &b, size_t offset = 0);
    /* [[buffer(index)]] <- a copy of n bytes (setBytes:length:atIndex:), itself
     * in an exact-size guarded allocation */
    void set_bytes(uint32_t index, const void *p, size_t n);
    template <class T> void set_value(uint32_t index, const T &v) { set_bytes(index, &v, sizeof v); }
    /* [[threadgroup(index)]] gets `bytes` bytes per threadgroup
     * (setThreadgroupMemoryLength:atIndex:), poisoned at every group start */
    void set_threadgroup_memory(uint32_t index, size_t bytes);

    /* dispatchThreadgroups:threadsPerThreadgroup: - every group full */
    int dispatch_threadgroups(size3 groups, size3 threads_per_group);
    /* dispatchThreads:threadsPerThreadgroup: - ceil(threads / tg) groups; edge
     * groups are partial and [[threads_per_threadgroup]] says so */
    int dispatch_threads(size3 threads, size3 threads_per_group);

    struct impl;

private:
    impl *p_;
};

/* After a dispatch returned -1: what was caught, e.g.
 * "kernel 'bad_x': divergent threadgroup_barrier in threadgroup (1,0,0): ..." */
const char *last_error();

/* Thread and threadgroup order are shuffled with this seed (default 1, or
 * the environment's METAL_EMU_SEED). Same seed, same order. */
void set_seed(uint64_t seed);
uint64_t seed();

/* Statistics of the last dispatch (for tests of the emulator itself). */
struct stats {
    uint64_t groups, threads, barriers, collectives;
};
stats last_stats();

/* Runs fn() in a forked child with stderr captured: for proving that an
 * out-of-bounds access kills the program (ASan report or the guard-page
 * handler's "metal-emu: out-of-bounds" message). */
struct child_result {
    bool exited_zero; /* the child returned normally with status 0 */
    std::string err;  /* its stderr */
};
child_result run_in_child(void (*fn)(void *), void *arg);
template <class F> child_result run_in_child(F f)
{
    return run_in_child([](void *a) { (*static_cast<F *>(a))(); }, &f);
}

/* Names of every kernel linked into this program, one per line. */
std::string kernel_names();

} // namespace emu

#endif
