/*
 * cpu.c - the CPU's features and the kernel instruction set, as
 * kernels/dispatch.c's one probe and choice (honoring RUVLLM_ISA) found
 * them; this file only reports them and adds the error messages.
 */
#include <pthread.h>

#include "dispatch.h"
#include "ruvllm.h"

static rvl_cpu_features cpu;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void report(void)
{
    const unsigned f = rvl_dispatch_features();
    cpu = (rvl_cpu_features){
        .sse3 = f & RVL_CPUF_SSE3,
        .ssse3 = f & RVL_CPUF_SSSE3,
        .avx = f & RVL_CPUF_AVX,
        .avx2 = f & RVL_CPUF_AVX2,
        .fma = f & RVL_CPUF_FMA,
        .f16c = f & RVL_CPUF_F16C,
        .avx512f = f & RVL_CPUF_AVX512F,
        .avx512bw = f & RVL_CPUF_AVX512BW,
        .avx512vl = f & RVL_CPUF_AVX512VL,
        .avx512vnni = f & RVL_CPUF_AVX512VNNI,
        .avx512bf16 = f & RVL_CPUF_AVX512BF16,
        .neon = f & RVL_CPUF_NEON,
        .dotprod = f & RVL_CPUF_DOTPROD,
    };
}

const rvl_cpu_features *rvl_cpu(void)
{
    pthread_once(&cpu_once, report);
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
