/*
 * cpu.c - CPU feature detection (CPUID/XGETBV on x86, HWCAP on arm64) and
 * the choice of kernel instruction set, honoring RUVLLM_ISA.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "ruvllm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

static rvl_cpu_features cpu;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static void detect(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    cpu.sse3 = c & (1u << 0);
    cpu.ssse3 = c & (1u << 9);
    cpu.fma = c & (1u << 12);
    cpu.f16c = c & (1u << 29);
    bool osxsave = c & (1u << 27);
    bool avx_hw = c & (1u << 28);
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool ymm_os = (xcr0 & 0x6) == 0x6;
    bool zmm_os = (xcr0 & 0xe6) == 0xe6;
    cpu.avx = avx_hw && ymm_os;
    if (!cpu.avx)
        cpu.fma = cpu.f16c = false;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        cpu.avx2 = cpu.avx && (b & (1u << 5));
        cpu.avx512f = zmm_os && (b & (1u << 16));
        cpu.avx512bw = cpu.avx512f && (b & (1u << 30));
        cpu.avx512vl = cpu.avx512f && (b & (1u << 31));
        cpu.avx512vnni = cpu.avx512f && (c & (1u << 11));
        if (__get_cpuid_count(7, 1, &a, &b, &c, &d))
            cpu.avx512bf16 = cpu.avx512f && (a & (1u << 5));
    }
#elif defined(__aarch64__)
    unsigned long hw = getauxval(AT_HWCAP);
    cpu.neon = true;
    cpu.dotprod = hw & HWCAP_ASIMDDP;
#endif
}

const rvl_cpu_features *rvl_cpu(void)
{
    pthread_once(&cpu_once, detect);
    return &cpu;
}

/* Kernel variants: kernels/dispatch.c knows which ones this binary has
 * and which this CPU runs, and serves the selected one's kernels; these
 * wrappers only add the error messages. */
int rvl_cpu_isa_check(const char *isa)
{
    const int id = rvl_dispatch_isa_parse(isa);
    if (id < 0)
        return rvl_seterr(RVL_EINVAL, "RUVLLM_ISA=%s: unknown instruction set (ref, avx2, avx512, neon)", isa);
    if (!rvl_dispatch_isa_runnable(id))
        return rvl_seterr(RVL_EUNSUPPORTED,
                          "RUVLLM_ISA=%s: not available on this CPU or not compiled in", isa);
    return 0;
}

const char *rvl_cpu_isa_selected(void)
{
    return rvl_dispatch_isa_name(rvl_dispatch_isa());
}
