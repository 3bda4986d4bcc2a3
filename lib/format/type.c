/*
 * type.c - the element-type table behind rvl_type_get & co.: names and
 * block geometry of every tensor type a file may hold. The formats are
 * described once, in kernels/formats.c (type traits with kernels); this
 * file presents them through the public rvl_type_info view.
 */
#include <pthread.h>
#include <strings.h>

#include "formats.h"
#include "ruvllm.h"

/* kernels/formats.h repeats the type ids so kernels/ need not include
 * ruvllm.h; they must agree. */
_Static_assert((int)RVL_K_GGML_COUNT == (int)RVL_TYPE_GGML_COUNT, "ggml type ids");
_Static_assert((int)RVL_K_U8 == (int)RVL_TYPE_U8 && (int)RVL_K_BOOL == (int)RVL_TYPE_BOOL,
               "safetensors-only type ids");
_Static_assert((int)RVL_K_RVL_FIRST == (int)RVL_TYPE_RVL_FIRST &&
               (int)RVL_K_RVL_END == (int)RVL_TYPE_RVL_END, "project type ids");
_Static_assert((int)RVL_K_RVL_I4A_G64 == (int)RVL_TYPE_RVL_I4A_G64 &&
               (int)RVL_K_RVL_I8_ROW == (int)RVL_TYPE_RVL_I8_ROW &&
               (int)RVL_K_MLX_A8_G64 == (int)RVL_TYPE_MLX_A8_G64, "project type ids");

#define N_GGML RVL_TYPE_GGML_COUNT
#define N_RVL (RVL_TYPE_RVL_END - RVL_TYPE_RVL_FIRST)

/* The public view, filled once from the kernels table. */
static rvl_type_info info_ggml[N_GGML], info_st[2], info_rvl[N_RVL];
static pthread_once_t info_once = PTHREAD_ONCE_INIT;

static rvl_type_info *slot(uint32_t type)
{
    if (type < N_GGML)
        return &info_ggml[type];
    if (type == RVL_TYPE_U8 || type == RVL_TYPE_BOOL)
        return &info_st[type - RVL_TYPE_U8];
    if (type >= RVL_TYPE_RVL_FIRST && type < RVL_TYPE_RVL_END)
        return &info_rvl[type - RVL_TYPE_RVL_FIRST];
    return NULL;
}

static void build(void)
{
    const rvl_kformat *f;
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
        rvl_type_info *ti = slot(f->type);
        if (ti)
            *ti = (rvl_type_info){ f->name, f->block_size, f->type_size,
                                   (f->flags & RVL_KF_QUANTIZED) != 0 };
    }
}

const rvl_type_info *rvl_type_get(uint32_t type)
{
    pthread_once(&info_once, build);
    const rvl_type_info *ti = slot(type);
    return ti && ti->name ? ti : NULL;
}

int rvl_type_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes)
{
    const rvl_kformat *f = rvl_kformat_get(type);
    if (!f)
        return rvl_seterr(RVL_EFORMAT, "unknown tensor type %u", type);
    if (n % f->block_size)
        return rvl_seterr(RVL_EFORMAT,
                          "row of %llu elements is not a multiple of the %s block size %u",
                          (unsigned long long)n, f->name, f->block_size);
    if (rvl_mul_ovf(n / f->block_size, f->type_size, bytes) ||
        rvl_add_ovf(*bytes, f->row_header, bytes))
        return rvl_seterr(RVL_ERANGE, "tensor size overflows");
    return 0;
}

int rvl_type_from_name(const char *name)
{
    const rvl_kformat *f;
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++)
        if (strcasecmp(f->name, name) == 0)
            return (int)f->type;
    return -1;
}
