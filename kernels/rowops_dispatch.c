/*
 * rowops_dispatch.c - the row steps' variants per ISA (rowops.h), chosen
 * by dispatch.h's rvl_dispatch_isa() (so RUVLLM_ISA applies).
 */
#include "dispatch.h"
#include "rowops.h"

static const rvl_rowops_kernels variants[RVL_ISA_COUNT] = {
    [RVL_ISA_REF] = { "ref", rmsnorm_f32_ref, swiglu_f32_ref },
    /* AVX2 and NEON run ref's */
    [RVL_ISA_AVX2] = { "avx2", rmsnorm_f32_ref, swiglu_f32_ref },
#if defined(__x86_64__) || defined(__i386__)
    [RVL_ISA_AVX512] = { "avx512", rmsnorm_f32_avx512, swiglu_f32_avx512 },
#endif
    [RVL_ISA_NEON] = { "neon", rmsnorm_f32_ref, swiglu_f32_ref },
};

const rvl_rowops_kernels *rvl_rowops_get_isa(int isa)
{
    if (isa < 0 || isa >= RVL_ISA_COUNT || !variants[isa].name || !rvl_dispatch_isa_runnable(isa))
        return NULL;
    return &variants[isa];
}

const rvl_rowops_kernels *rvl_rowops_get(void)
{
    const rvl_rowops_kernels *k = rvl_rowops_get_isa(rvl_dispatch_isa());
    return k ? k : &variants[RVL_ISA_REF];
}
