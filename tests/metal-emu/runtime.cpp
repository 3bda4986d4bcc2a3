/*
 * runtime.cpp - the Metal emulator's runtime: device buffers, argument
 * binding, and the execution of a dispatch. Each threadgroup's threads run
 * as cooperative fibers (one stack each; a 14-instruction stack switch on
 * x86-64, ucontext elsewhere) on the calling OS thread;
 * threadgroups run one after another in a shuffled order.
 *
 * A thread runs until it reaches a synchronization point (threadgroup_barrier,
 * a SIMD-group function) or returns. When no thread can run, the scheduler
 * resolves the waits: a SIMD-group whose lanes all wait at the same
 * collective gets its values exchanged; when every thread waits at the same
 * threadgroup_barrier, all are released. Anything else is divergence and
 * fails the dispatch with a message. Runnable threads are started in a
 * shuffled order every round.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "emu.h"
#include "metal_emu_rt.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(EMU_ASAN)
#define EMU_ASAN 1
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace {

/* ====================================================================
 * Errors
 * ==================================================================== */
std::string g_error;
bool g_failed;

void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void set_error(const char *fmt, ...)
{
    if (g_failed) return; /* the first error is the one that matters */
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_error = buf;
    g_failed = true;
}

/* ====================================================================
 * Guarded allocations: exact-size device/threadgroup memory
 * ==================================================================== */
const size_t PAGE = 4096;
const unsigned char POISON = 0xff;

struct galloc {
    unsigned char *p; /* the bytes handed out */
    size_t n;
    unsigned char *map; /* guard-page mapping (unsanitized builds) */
    size_t map_len;
    std::string label;
};
std::vector<galloc *> g_live; /* for the SIGSEGV handler's messages */

#ifndef EMU_ASAN
void install_segv_handler();
#endif

galloc *galloc_new(size_t n, const char *label)
{
    galloc *a = new galloc();
    a->n = n;
    a->label = label;
#ifdef EMU_ASAN
    void *p = nullptr;
    if (posix_memalign(&p, 64, n ? n : 1) != 0) abort();
    a->p = static_cast<unsigned char *>(p);
#else
    /* [guard page][slack, data][guard page]: the data ends 16-aligned, as
     * close to the trailing guard page as that allows */
    install_segv_handler();
    size_t data_pages = (n + 15 + PAGE - 1) / PAGE;
    if (!data_pages) data_pages = 1;
    a->map_len = (data_pages + 2) * PAGE;
    void *m = mmap(nullptr, a->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) abort();
    a->map = static_cast<unsigned char *>(m);
    mprotect(a->map, PAGE, PROT_NONE);
    unsigned char *end = a->map + (1 + data_pages) * PAGE;
    mprotect(end, PAGE, PROT_NONE);
    a->p = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(end) - n) & ~(uintptr_t)15);
    memset(a->map + PAGE, POISON, data_pages * PAGE); /* slack canaries too */
#endif
    memset(a->p, POISON, n);
    g_live.push_back(a);
    return a;
}

void galloc_free(galloc *a)
{
    if (!a) return;
    for (size_t i = 0; i < g_live.size(); i++)
        if (g_live[i] == a) {
            g_live[i] = g_live.back();
            g_live.pop_back();
            break;
        }
#ifdef EMU_ASAN
    free(a->p);
#else
    munmap(a->map, a->map_len);
#endif
    delete a;
}

/* Unsanitized builds: bytes between the guard pages and the data must still
 * hold the poison (a write out of bounds that the page did not catch). */
bool galloc_canaries_ok(const galloc *a, std::string *why)
{
#ifndef EMU_ASAN
    const unsigned char *lo = a->map + PAGE, *hi = a->map + a->map_len - PAGE;
    for (const unsigned char *q = lo; q < a->p; q++)
        if (*q != POISON) {
            *why = "write " + std::to_string(a->p - q) + " bytes before the start of '" + a->label + "'";
            return false;
        }
    for (const unsigned char *q = a->p + a->n; q < hi; q++)
        if (*q != POISON) {
            *why = "write " + std::to_string(q - (a->p + a->n)) + " bytes past the end of '" + a->label + "'";
            return false;
        }
#else
    (void)a;
    (void)why;
#endif
    return true;
}

/* ====================================================================
 * Kernels
 * ==================================================================== */
emu_rt::kernel_info *g_kernels;

emu_rt::kernel_info *find_kernel(const char *name)
{
    for (emu_rt::kernel_info *k = g_kernels; k; k = k->next)
        if (strcmp(k->name, name) == 0) return k;
    return nullptr;
}

/* ====================================================================
 * Fibers and the scheduler
 * ==================================================================== */
const unsigned SIMD = 32;
const unsigned MAX_THREADS = 1024;
const size_t TG_LIMIT = 32768;
#ifdef EMU_ASAN
const size_t STACK = 512 * 1024;
#else
const size_t STACK = 256 * 1024;
#endif

enum fstate { RUNNABLE, AT_BARRIER, AT_SIMD, DONE };

/* Execution contexts. swapcontext costs a system call per switch (the
 * signal mask), and under ASan its interceptor clears the shadow of the
 * whole target stack every time: on x86-64 a switch saves the callee-saved
 * registers on the old stack and pops them from the new one instead. */
#if defined(__x86_64__)
struct ectx {
    void *sp;
};
extern "C" void emu_switch(void **save_sp, void *sp);
__asm__(".text\n"
        ".globl emu_switch\n"
        ".type emu_switch,@function\n"
        "emu_switch:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size emu_switch,.-emu_switch\n");

void ctx_switch(ectx *from, ectx *to) { emu_switch(&from->sp, to->sp); }

/* a context that starts fn() on [stack, stack + size) */
void ctx_make(ectx *c, unsigned char *stack, size_t size, void (*fn)())
{
    void **sp = reinterpret_cast<void **>((reinterpret_cast<uintptr_t>(stack + size)) & ~(uintptr_t)15);
    *--sp = nullptr;                          /* fn's return address: it never returns */
    *--sp = reinterpret_cast<void *>(fn);     /* emu_switch's ret goes there */
    for (int i = 0; i < 6; i++) *--sp = nullptr; /* rbp rbx r12-r15 */
    c->sp = sp;
}
#else
struct ectx {
    ucontext_t uc;
};
void ctx_switch(ectx *from, ectx *to) { swapcontext(&from->uc, &to->uc); }
void ctx_make(ectx *c, unsigned char *stack, size_t size, void (*fn)())
{
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, fn, 0);
}
#endif

struct fiber {
    ectx ctx;
    unsigned char *stack; /* usable part, above a guard page */
    fstate st;
    const char *what, *file;
    unsigned line;
    /* SIMD exchange */
    const void *in;
    void *out;
    size_t sz;
    unsigned lane, simd;
    unsigned n_lanes;
    emu_rt::tctx t;
    void *fake_stack;
};

struct group_run {
    emu_rt::kernel_info *k;
    std::vector<fiber> *f;
    unsigned n;
    uint32_t tgpig[3];
    const char *kname;
};

ectx g_main;
fiber *g_cur;
group_run *g_run;
uint64_t g_gen; /* threadgroup generation, for static threadgroup storage */
std::vector<galloc *> g_tg_allocs;
size_t g_tg_bytes, g_tg_dynamic;
emu::stats g_stats;
uint64_t g_seed = 1;
bool g_seed_set;
#ifdef EMU_ASAN
const void *g_main_bottom;
size_t g_main_size;
#endif

unsigned char *g_stacks; /* MAX_THREADS stacks, each after a guard page */

void ensure_stacks()
{
    if (g_stacks) return;
    size_t per = STACK + PAGE;
    void *m = mmap(nullptr, per * MAX_THREADS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "metal-emu: cannot map fiber stacks: %s\n", strerror(errno));
        abort();
    }
    g_stacks = static_cast<unsigned char *>(m);
    for (unsigned i = 0; i < MAX_THREADS; i++) mprotect(g_stacks + i * per, PAGE, PROT_NONE);
}

uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

template <class T> void shuffle(std::vector<T> &v, uint64_t *s)
{
    for (size_t i = v.size(); i > 1; i--) {
        size_t j = rng_next(s) % i;
        T tmp = v[i - 1];
        v[i - 1] = v[j];
        v[j] = tmp;
    }
}

/* the scheduler's random state for the current group */
uint64_t g_sched_rng = 1;

/* threads released together start in a random order */
void shuffle_tail(std::vector<unsigned> &v, size_t from)
{
    for (size_t i = v.size(); i > from + 1; i--) {
        size_t j = from + rng_next(&g_sched_rng) % (i - from);
        unsigned t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

/* fiber -> scheduler */
void yield_to_main()
{
    fiber *f = g_cur;
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&f->fake_stack, g_main_bottom, g_main_size);
#endif
    ctx_switch(&f->ctx, &g_main);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(f->fake_stack, &g_main_bottom, &g_main_size);
#endif
}

void fiber_entry()
{
    fiber *f = g_cur;
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &g_main_bottom, &g_main_size);
#endif
    g_run->k->invoke(g_run->k->fn, g_run->k->slots, f->t);
    f->st = DONE;
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, g_main_bottom, g_main_size);
#endif
    ctx_switch(&f->ctx, &g_main); /* never resumed */
}

/* scheduler -> fiber */
void resume(fiber *f)
{
    g_cur = f;
    void *fake = nullptr;
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&fake, f->stack, STACK);
#endif
    ctx_switch(&g_main, &f->ctx);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    (void)fake;
    g_cur = nullptr;
}

std::string where(const fiber &f)
{
    char b[512];
    snprintf(b, sizeof b, "%s at %s:%u", f.what ? f.what : "?", f.file ? f.file : "?", f.line);
    return b;
}

std::string tid_str(const fiber &f)
{
    const uint32_t *p = f.t.attr[emu_rt::A_THREAD_POSITION_IN_THREADGROUP];
    char b[64];
    snprintf(b, sizeof b, "(%u,%u,%u)", p[0], p[1], p[2]);
    return b;
}

/* SIMD-group s of the group: when every lane waits at a collective, check
 * they wait at the same one, exchange the values and make them runnable
 * (appended to `pool`). Returns false on divergence (error set). */
bool resolve_simd(group_run &r, unsigned s, std::vector<unsigned> &pool, bool final)
{
    std::vector<fiber> &f = *r.f;
    unsigned b = s * SIMD, e = b + SIMD < r.n ? b + SIMD : r.n;
    unsigned at = 0;
    const fiber *first = nullptr;
    for (unsigned i = b; i < e; i++)
        if (f[i].st == AT_SIMD) {
            at++;
            if (!first) first = &f[i];
        }
    if (!at || (at < e - b && !final)) return true; /* not yet: other lanes are still running */
    char gbuf[96];
    snprintf(gbuf, sizeof gbuf, "threadgroup (%u,%u,%u)", r.tgpig[0], r.tgpig[1], r.tgpig[2]);
    for (unsigned i = b; i < e; i++) {
        bool same = f[i].st == AT_SIMD && f[i].line == first->line && strcmp(f[i].what, first->what) == 0 &&
                    strcmp(f[i].file, first->file) == 0 && f[i].sz == first->sz;
        if (!same) {
            std::string other = f[i].st == DONE ? "has returned" : "waits at " + where(f[i]);
            set_error("kernel '%s': divergent %s in %s, SIMD-group %u: lane %u (thread %s) waits at %s, "
                      "lane %u (thread %s) %s (%u of %u lanes reached it)",
                      r.kname, first->what, gbuf, s, first->lane, tid_str(*first).c_str(), where(*first).c_str(),
                      f[i].lane, tid_str(f[i]).c_str(), other.c_str(), at, e - b);
            return false;
        }
    }
    /* every lane's value to every lane */
    for (unsigned i = b; i < e; i++)
        for (unsigned j = b; j < e; j++)
            memcpy(static_cast<char *>(f[i].out) + (j - b) * f[j].sz, f[j].in, f[j].sz);
    size_t at0 = pool.size();
    for (unsigned i = b; i < e; i++) {
        f[i].n_lanes = e - b;
        f[i].st = RUNNABLE;
        pool.push_back(i);
    }
    shuffle_tail(pool, at0);
    g_stats.collectives++;
    return true;
}

/* Nothing can run: a SIMD-group waiting here is divergent; otherwise every
 * thread must wait at the same barrier, which then opens. Returns false
 * when the group is done or stuck (error set). */
bool resolve_barrier(group_run &r, std::vector<unsigned> &pool)
{
    std::vector<fiber> &f = *r.f;
    for (unsigned s = 0; s * SIMD < r.n; s++)
        if (!resolve_simd(r, s, pool, true)) return false;
    if (!pool.empty()) return true;
    char gbuf[96];
    snprintf(gbuf, sizeof gbuf, "threadgroup (%u,%u,%u)", r.tgpig[0], r.tgpig[1], r.tgpig[2]);
    unsigned done = 0, at_barrier = 0;
    const fiber *bar = nullptr, *fin = nullptr;
    for (unsigned i = 0; i < r.n; i++) {
        if (f[i].st == DONE) {
            done++;
            if (!fin) fin = &f[i];
        } else if (f[i].st == AT_BARRIER) {
            at_barrier++;
            if (!bar) bar = &f[i];
        }
    }
    if (done == r.n) return false;
    if (done) {
        set_error("kernel '%s': divergent threadgroup_barrier in %s: thread %s waits at %s but thread %s has "
                  "returned (%u of %u threads reached the barrier)",
                  r.kname, gbuf, tid_str(*bar).c_str(), where(*bar).c_str(), tid_str(*fin).c_str(), at_barrier,
                  r.n);
        return false;
    }
    for (unsigned i = 0; i < r.n; i++) {
        if (f[i].line != bar->line || strcmp(f[i].file, bar->file) != 0) {
            set_error("kernel '%s': divergent threadgroup_barrier in %s: thread %s waits at %s, thread %s at %s",
                      r.kname, gbuf, tid_str(*bar).c_str(), where(*bar).c_str(), tid_str(f[i]).c_str(),
                      where(f[i]).c_str());
            return false;
        }
    }
    for (unsigned i = 0; i < r.n; i++) {
        f[i].st = RUNNABLE;
        pool.push_back(i);
    }
    shuffle_tail(pool, 0);
    g_stats.barriers++;
    return true;
}

} // namespace

/* ====================================================================
 * Kernel-side entry points (metal_stdlib, metal_emu_rt.h)
 * ==================================================================== */
namespace emu_rt {

void register_kernel(kernel_info *k)
{
    k->next = g_kernels;
    g_kernels = k;
}

void kernel_error(const char *what, const char *file, unsigned line, const char *msg)
{
    if (!g_cur) {
        fprintf(stderr, "metal-emu: %s:%u: %s: %s\n", file, line, what, msg);
        abort();
    }
    set_error("kernel '%s': %s at %s:%u: %s", g_run->kname, what, file, line, msg);
    g_cur->st = DONE;
    yield_to_main();
    abort(); /* never resumed */
}

void barrier(unsigned flags, const char *what, const char *file, unsigned line)
{
    (void)flags;
    if (!g_cur) kernel_error(what, file, line, "called outside a kernel");
    g_cur->what = what;
    g_cur->file = file;
    g_cur->line = line;
    g_cur->st = AT_BARRIER;
    yield_to_main();
}

unsigned simd_gather(const void *in, void *out, size_t sz, const char *what, const char *file, unsigned line,
                     unsigned *lane)
{
    if (!g_cur) kernel_error(what, file, line, "called outside a kernel");
    fiber *f = g_cur;
    f->what = what;
    f->file = file;
    f->line = line;
    f->in = in;
    f->out = out;
    f->sz = sz;
    f->st = AT_SIMD;
    yield_to_main();
    *lane = f->lane;
    return f->n_lanes;
}

void *tg_storage(tg_slot *s, size_t bytes, size_t align, const char *file, unsigned line)
{
    (void)align; /* allocations are 16-aligned (64 under ASan) */
    if (!g_cur) kernel_error("threadgroup variable", file, line, "used outside a kernel");
    if (s->gen != g_gen) {
        g_tg_bytes += bytes;
        if (g_tg_bytes + g_tg_dynamic > TG_LIMIT) {
            char m[160];
            snprintf(m, sizeof m, "threadgroup memory exceeds 32 KiB (%zu static + %zu from set_threadgroup_memory)",
                     g_tg_bytes, g_tg_dynamic);
            kernel_error("threadgroup variable", file, line, m);
        }
        char label[300];
        snprintf(label, sizeof label, "threadgroup variable at %s:%u", file, line);
        galloc *a = galloc_new(bytes, label);
        g_tg_allocs.push_back(a);
        s->p = a->p;
        s->gen = g_gen;
    }
    return s->p;
}

} // namespace emu_rt

/* ====================================================================
 * SIGSEGV: a guard page was hit (unsanitized builds)
 * ==================================================================== */
#ifndef EMU_ASAN
namespace {

void segv_handler(int sig, siginfo_t *si, void *)
{
    char msg[1024];
    uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
    int len = 0;
    for (galloc *g : g_live) {
        uintptr_t b = reinterpret_cast<uintptr_t>(g->map), e = b + g->map_len;
        if (a < b || a >= e) continue;
        uintptr_t p = reinterpret_cast<uintptr_t>(g->p);
        if (a >= p + g->n)
            len = snprintf(msg, sizeof msg,
                           "metal-emu: out-of-bounds access at %p: %zu bytes past the end of '%s' (%zu bytes)",
                           si->si_addr, (size_t)(a - (p + g->n)), g->label.c_str(), g->n);
        else
            len = snprintf(msg, sizeof msg,
                           "metal-emu: out-of-bounds access at %p: %zu bytes before the start of '%s' (%zu bytes)",
                           si->si_addr, (size_t)(p - a), g->label.c_str(), g->n);
        break;
    }
    if (!len) len = snprintf(msg, sizeof msg, "metal-emu: signal %d, fault at %p", sig, si->si_addr);
    if (g_cur && g_run && len < (int)sizeof msg - 200)
        len += snprintf(msg + len, sizeof msg - len, ", in kernel '%s', thread %s of threadgroup (%u,%u,%u)",
                        g_run->kname, tid_str(*g_cur).c_str(), g_run->tgpig[0], g_run->tgpig[1], g_run->tgpig[2]);
    if (len >= (int)sizeof msg - 1) len = sizeof msg - 2;
    msg[len++] = '\n';
    if (write(2, msg, len) < 0) {
    }
    _exit(70);
}

void install_segv_handler()
{
    static bool alt;
    if (!alt) {
        alt = true;
        static char altstack[64 * 1024];
        stack_t ss = {};
        ss.ss_sp = altstack;
        ss.ss_size = sizeof altstack;
        sigaltstack(&ss, nullptr);
    }
    struct sigaction sa = {};
    sa.sa_sigaction = segv_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
}

} // namespace
#endif

/* ====================================================================
 * Host API (emu.h)
 * ==================================================================== */
namespace emu {

Buffer::Buffer(size_t bytes, const char *label) : n_(bytes), label_(label)
{
    galloc *a = galloc_new(bytes, label);
    p_ = a->p;
    map_ = a;
}

Buffer::Buffer(const void *init, size_t bytes, const char *label) : Buffer(bytes, label)
{
    memcpy(p_, init, bytes);
}

Buffer::~Buffer() { galloc_free(static_cast<galloc *>(map_)); }

void Buffer::poison() { memset(p_, POISON, n_); }

struct binding {
    void *p = nullptr;
    size_t len = 0;      /* bytes from p */
    galloc *owned = nullptr; /* set_bytes copy */
    galloc *alloc = nullptr; /* what p points into (canary checks) */
    bool set = false;
};

struct Encoder::impl {
    emu_rt::kernel_info *k;
    binding b[31];
    size_t tg_len[31];
    bool tg_set[31];
};

Encoder::Encoder(const char *kernel) : p_(new impl())
{
    p_->k = find_kernel(kernel);
    if (!p_->k) {
        fprintf(stderr, "metal-emu: no kernel '%s' in this program; it has:\n%s", kernel, kernel_names().c_str());
        abort();
    }
}

Encoder::~Encoder()
{
    for (binding &b : p_->b) galloc_free(b.owned);
    delete p_;
}

void Encoder::set_buffer(uint32_t index, Buffer &buf, size_t offset)
{
    if (index >= 31 || offset > buf.length()) {
        fprintf(stderr, "metal-emu: set_buffer(%u, '%s', offset %zu): bad index or offset\n", index, buf.label(),
                offset);
        abort();
    }
    binding &b = p_->b[index];
    galloc_free(b.owned);
    b = binding();
    b.p = static_cast<char *>(buf.contents()) + offset;
    b.len = buf.length() - offset;
    b.alloc = static_cast<galloc *>(buf.map_);
    b.set = true;
}

void Encoder::set_bytes(uint32_t index, const void *data, size_t n)
{
    if (index >= 31) abort();
    binding &b = p_->b[index];
    galloc_free(b.owned);
    b = binding();
    char label[64];
    snprintf(label, sizeof label, "set_bytes(%u)", index);
    b.owned = galloc_new(n, label);
    memcpy(b.owned->p, data, n);
    b.p = b.owned->p;
    b.len = n;
    b.alloc = b.owned;
    b.set = true;
}

void Encoder::set_threadgroup_memory(uint32_t index, size_t bytes)
{
    if (index >= 31) abort();
    p_->tg_len[index] = bytes;
    p_->tg_set[index] = true;
}

static uint64_t mix_seed(uint64_t a, uint64_t b)
{
    uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull + (a << 6) + (a >> 2));
    return x ? x : 1;
}

static int dispatch(Encoder::impl *p, size3 groups, size3 tg, size3 grid, bool uniform)
{
    emu_rt::kernel_info *k = p->k;
    g_error.clear();
    g_failed = false;
    g_stats = stats();
    if (!g_seed_set) {
        const char *e = getenv("METAL_EMU_SEED");
        if (e && *e) g_seed = strtoull(e, nullptr, 0);
        g_seed_set = true;
    }
    uint64_t nthreads = (uint64_t)tg.x * tg.y * tg.z;
    if (!nthreads || !groups.x || !groups.y || !groups.z) {
        set_error("kernel '%s': empty dispatch", k->name);
        return -1;
    }
    if (nthreads > MAX_THREADS) {
        set_error("kernel '%s': %llu threads per threadgroup (Metal's limit is %u)", k->name,
                  (unsigned long long)nthreads, MAX_THREADS);
        return -1;
    }
    if (k->max_threads && nthreads > k->max_threads) {
        set_error("kernel '%s': %llu threads per threadgroup, but the kernel says "
                  "max_total_threads_per_threadgroup(%u)",
                  k->name, (unsigned long long)nthreads, k->max_threads);
        return -1;
    }
    /* every parameter bound, references fit */
    g_tg_dynamic = 0;
    for (int i = 0; i < 31; i++)
        if (p->tg_set[i]) g_tg_dynamic += p->tg_len[i];
    for (int i = 0; i < k->nslots; i++) {
        const emu_rt::slot &s = k->slots[i];
        if (s.kind == emu_rt::SLOT_BUFFER) {
            if (!p->b[s.index].set) {
                set_error("kernel '%s': parameter '%s' [[buffer(%u)]] is not bound", k->name, s.name, s.index);
                return -1;
            }
            if (k->ref_sizes[i] > p->b[s.index].len) {
                set_error("kernel '%s': parameter '%s' [[buffer(%u)]] reads %zu bytes, %zu are bound", k->name,
                          s.name, s.index, k->ref_sizes[i], p->b[s.index].len);
                return -1;
            }
        } else if (s.kind == emu_rt::SLOT_THREADGROUP && !p->tg_set[s.index]) {
            set_error("kernel '%s': parameter '%s' [[threadgroup(%u)]] has no set_threadgroup_memory", k->name, s.name,
                      s.index);
            return -1;
        }
    }
    if (g_tg_dynamic > TG_LIMIT) {
        set_error("kernel '%s': %zu bytes of threadgroup memory (Metal's limit is 32 KiB)", k->name, g_tg_dynamic);
        return -1;
    }

    ensure_stacks();
#ifndef EMU_ASAN
    install_segv_handler(); /* again: a test framework may have replaced it */
#endif
    void *bufp[31];
    size_t buflen[31];
    for (int i = 0; i < 31; i++) {
        bufp[i] = p->b[i].p;
        buflen[i] = p->b[i].len;
    }

    /* threadgroups in a shuffled order */
    uint64_t ngroups = (uint64_t)groups.x * groups.y * groups.z;
    std::vector<uint64_t> order(ngroups);
    for (uint64_t i = 0; i < ngroups; i++) order[i] = i;
    uint64_t rs = mix_seed(g_seed, 0x51ed);
    shuffle(order, &rs);

    std::vector<fiber> fib(nthreads);
    std::vector<unsigned> runnable;
    runnable.reserve(nthreads);
    group_run r;
    r.k = k;
    r.f = &fib;
    r.kname = k->name;
    g_run = &r;
    int rc = 0;

    for (uint64_t gi = 0; gi < ngroups && rc == 0; gi++) {
        uint64_t g = order[gi];
        uint32_t gp[3] = {(uint32_t)(g % groups.x), (uint32_t)(g / groups.x % groups.y),
                          (uint32_t)(g / groups.x / groups.y)};
        /* the group's actual size: partial at the grid's edge (dispatch_threads) */
        uint32_t asz[3] = {tg.x, tg.y, tg.z};
        if (!uniform) {
            uint32_t gdim[3] = {grid.x, grid.y, grid.z}, tdim[3] = {tg.x, tg.y, tg.z};
            for (int d = 0; d < 3; d++) {
                uint64_t left = (uint64_t)gdim[d] - (uint64_t)gp[d] * tdim[d];
                if (left < asz[d]) asz[d] = (uint32_t)left;
            }
        }
        unsigned n = asz[0] * asz[1] * asz[2];
        r.n = n;
        memcpy(r.tgpig, gp, sizeof gp);
        g_gen++;
        g_tg_bytes = 0;
        void *tgp[31] = {};
        for (int i = 0; i < 31; i++)
            if (p->tg_set[i]) {
                char label[48];
                snprintf(label, sizeof label, "threadgroup(%d) memory", i);
                galloc *a = galloc_new(p->tg_len[i], label);
                g_tg_allocs.push_back(a);
                tgp[i] = a->p;
            }

        for (unsigned t = 0; t < n; t++) {
            fiber &f = fib[t];
            uint32_t lp[3] = {t % asz[0], t / asz[0] % asz[1], t / asz[0] / asz[1]};
            uint32_t(*A)[3] = f.t.attr;
            memset(A, 0, sizeof f.t.attr);
            for (int d = 0; d < 3; d++) {
                uint32_t td = d == 0 ? tg.x : d == 1 ? tg.y : tg.z;
                uint32_t gd = d == 0 ? groups.x : d == 1 ? groups.y : groups.z;
                uint32_t grd = d == 0 ? grid.x : d == 1 ? grid.y : grid.z;
                A[emu_rt::A_THREAD_POSITION_IN_GRID][d] = gp[d] * td + lp[d];
                A[emu_rt::A_THREAD_POSITION_IN_THREADGROUP][d] = lp[d];
                A[emu_rt::A_THREADGROUP_POSITION_IN_GRID][d] = gp[d];
                A[emu_rt::A_THREADS_PER_THREADGROUP][d] = asz[d];
                A[emu_rt::A_THREADGROUPS_PER_GRID][d] = gd;
                A[emu_rt::A_THREADS_PER_GRID][d] = uniform ? gd * td : grd;
                A[emu_rt::A_DISPATCH_THREADS_PER_THREADGROUP][d] = td;
            }
            A[emu_rt::A_THREAD_INDEX_IN_THREADGROUP][0] = t;
            A[emu_rt::A_THREAD_INDEX_IN_SIMDGROUP][0] = t % SIMD;
            A[emu_rt::A_SIMDGROUP_INDEX_IN_THREADGROUP][0] = t / SIMD;
            A[emu_rt::A_SIMDGROUPS_PER_THREADGROUP][0] = (n + SIMD - 1) / SIMD;
            A[emu_rt::A_THREADS_PER_SIMDGROUP][0] = SIMD;
            A[emu_rt::A_THREAD_INDEX_IN_QUADGROUP][0] = t % 4;
            A[emu_rt::A_QUADGROUP_INDEX_IN_THREADGROUP][0] = t / 4;
            f.t.buf = bufp;
            f.t.buf_len = buflen;
            f.t.tg = tgp;
            f.st = RUNNABLE;
            f.lane = t % SIMD;
            f.simd = t / SIMD;
            f.what = f.file = nullptr;
            f.line = 0;
            f.fake_stack = nullptr;
            f.stack = g_stacks + t * (STACK + PAGE) + PAGE;
            ctx_make(&f.ctx, f.stack, STACK, fiber_entry);
        }
        g_stats.groups++;
        g_stats.threads += n;

        /* run a random runnable thread until it blocks; a SIMD-group
         * whose lanes all wait at a collective goes on at once, so
         * SIMD-groups drift apart between threadgroup barriers */
        uint64_t &ss = g_sched_rng;
        ss = mix_seed(g_seed, g + 1);
        /* half the groups (by the seed) run "ahead": the most recently
         * released thread first, so one SIMD-group can finish a phase
         * before another starts it; the others pick uniformly */
        const bool ahead = rng_next(&ss) & 1;
        runnable.clear();
        for (unsigned t = 0; t < n; t++) runnable.push_back(t);
        shuffle(runnable, &ss);
        for (;;) {
            while (!runnable.empty() && !g_failed) {
                size_t j = ahead ? runnable.size() - 1 : rng_next(&ss) % runnable.size();
                unsigned t = runnable[j];
                runnable[j] = runnable.back();
                runnable.pop_back();
                resume(&fib[t]);
                if (!g_failed && fib[t].st == AT_SIMD) resolve_simd(r, t / SIMD, runnable, false);
            }
            if (g_failed || !resolve_barrier(r, runnable)) break;
        }
        if (g_failed) rc = -1;
        for (galloc *a : g_tg_allocs) galloc_free(a);
        g_tg_allocs.clear();
#ifdef EMU_ASAN
        /* abandoned fibers leave their frames' redzones poisoned */
        if (rc) __asan_unpoison_memory_region(g_stacks, (size_t)n * (STACK + PAGE));
#endif
    }
    g_run = nullptr;

    /* out-of-bounds writes that missed the guard pages */
    if (rc == 0)
        for (int i = 0; i < 31; i++) {
            std::string why;
            if (p->b[i].alloc && !galloc_canaries_ok(p->b[i].alloc, &why)) {
                set_error("kernel '%s': out-of-bounds %s (buffer(%d))", k->name, why.c_str(), i);
                rc = -1;
                break;
            }
        }
    return rc;
}

int Encoder::dispatch_threadgroups(size3 groups, size3 threads_per_group)
{
    return dispatch(p_, groups, threads_per_group, size3(0, 0, 0), true);
}

int Encoder::dispatch_threads(size3 threads, size3 tg)
{
    if (!tg.x || !tg.y || !tg.z) {
        set_error("kernel '%s': empty threadgroup", p_->k->name);
        return -1;
    }
    size3 groups((threads.x + tg.x - 1) / tg.x, (threads.y + tg.y - 1) / tg.y, (threads.z + tg.z - 1) / tg.z);
    return dispatch(p_, groups, tg, threads, false);
}

const char *last_error() { return g_error.c_str(); }

void set_seed(uint64_t s)
{
    g_seed = s ? s : 1;
    g_seed_set = true;
}

uint64_t seed() { return g_seed; }

stats last_stats() { return g_stats; }

std::string kernel_names()
{
    std::string s;
    for (emu_rt::kernel_info *k = g_kernels; k; k = k->next) s += std::string("  ") + k->name + " (" + k->file + ")\n";
    return s;
}

child_result run_in_child(void (*fn)(void *), void *arg)
{
    child_result r{false, ""};
    int fd[2];
    if (pipe(fd) != 0) return r;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return r;
    if (pid == 0) {
        /* fatal signals kill the child (a test framework's handlers would
         * go on running tests in it); the dispatch installs its own */
        for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) signal(sig, SIG_DFL);
        close(fd[0]);
        dup2(fd[1], 2);
        dup2(fd[1], 1);
        fn(arg);
        fflush(stdout);
        fflush(stderr);
        _exit(0);
    }
    close(fd[1]);
    char buf[4096];
    ssize_t got;
    while ((got = read(fd[0], buf, sizeof buf)) > 0 || (got < 0 && errno == EINTR))
        if (got > 0) r.err.append(buf, got);
    close(fd[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    r.exited_zero = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    return r;
}

} // namespace emu
