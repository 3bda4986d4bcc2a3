/*
 * rope.c - rotary position embedding tables.
 *
 * Pair i of a head (i < rope_dim/2) is rotated by pos * f_i with
 * f_i = base^(-2i/rope_dim), the frequency modified by the model's scaling:
 *
 *   linear   f_i / factor
 *   NTK      the base raised to base * factor^(d/(d-2)) ("NTK-aware"
 *            scaling: low frequencies stretched, the highest kept)
 *   llama3   f_i / rope_freqs[i]  (Llama 3.1: the divisors are a tensor)
 *   LongRoPE f_i / factors[i]  (Phi-3: two tensors, the long one for
 *            contexts past the original; the caller picks)
 *   YaRN     a per-pair mix of interpolation (f_i / factor) and
 *            extrapolation (f_i): pairs that turn fewer than beta_slow
 *            times over the original context are interpolated, those that
 *            turn more than beta_fast times are kept, a linear ramp in
 *            between; attention logits are multiplied by mscale^2 with
 *            mscale = attn_factor * (1 + 0.1 ln factor), divided by
 *            1 + 0.1 yarn_log_mul ln factor where the file has that key.
 *            The ramp's ends are rounded out to whole pairs, but for
 *            block.yarn_exact_ramp (transformers' truncate: false: gpt-oss;
 *            llama.cpp rounds there too).
 *
 * Whatever the scaling, rope.scaling.attn_factor multiplies the attention
 * logits by its square (LongRoPE's sqrt(1 + ln(factor) / ln(original))).
 *
 * Angles are built by repeated multiplication (theta *= base^(-2/d)), as
 * ggml does, so they agree with llama.cpp's to the last bit; the sums and
 * the ramp follow the YaRN paper and transformers' definition, which
 * llama.cpp also implements.
 */
#include <math.h>
#include <string.h>

#include "engine/model.h"

/* The pair index at which a frequency makes n_rot turns over ctx tokens:
 * solving ctx * base^(-2i/d) = 2 pi n_rot for i. */
static float yarn_corr_dim(uint32_t n_dims, uint32_t ctx, float n_rot, float base)
{
    return (float)n_dims * logf((float)ctx / (n_rot * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

void rvl_rope_tables(const rvl_hparams *hp, const float *freq_div, uint32_t n_ctx, float *cos_t,
                     float *sin_t, float *attn_mul)
{
    const uint32_t half = hp->rope_dim / 2;
    float base = hp->rope_base;
    if (hp->rope_scaling == RVL_ROPE_SCALING_NTK && hp->rope_dim > 2)
        base = (float)((double)base * pow((double)hp->rope_factor,
                                          (double)hp->rope_dim / (double)(hp->rope_dim - 2)));
    const float theta_scale = powf(base, -2.0f / (float)hp->rope_dim);
    float freq_scale = 1.0f;
    float ramp_lo = 0, ramp_hi = 0, ext = 0;
    /* the file's attention factor whatever the scaling (LongRoPE's, too),
     * as llama.cpp multiplies it into its context's */
    float mscale = hp->rope_attn_factor;

    if (hp->rope_scaling == RVL_ROPE_SCALING_LINEAR) {
        freq_scale = 1.0f / hp->rope_factor;
    } else if (hp->rope_scaling == RVL_ROPE_SCALING_YARN) {
        freq_scale = 1.0f / hp->rope_factor;
        ext = hp->yarn_ext_factor;
        float lo = yarn_corr_dim(hp->rope_dim, hp->rope_orig_ctx, hp->yarn_beta_fast, base);
        float hi = yarn_corr_dim(hp->rope_dim, hp->rope_orig_ctx, hp->yarn_beta_slow, base);
        if (!hp->block.yarn_exact_ramp) { /* transformers' truncate: true, llama.cpp always */
            lo = floorf(lo);
            hi = ceilf(hi);
        }
        ramp_lo = lo > 0 ? lo : 0;
        ramp_hi = hi < (float)(hp->rope_dim - 1) ? hi : (float)(hp->rope_dim - 1);
        if (ext != 0 && hp->rope_factor > 1) {
            mscale *= 1.0f + 0.1f * logf(hp->rope_factor);
            if (hp->yarn_log_mul != 0) /* transformers' mscale_all_dim */
                mscale /= 1.0f + 0.1f * hp->yarn_log_mul * logf(hp->rope_factor);
        }
    }
    *attn_mul = mscale * mscale;

    for (uint32_t pos = 0; pos < n_ctx; pos++) {
        float theta_extrap = (float)pos;
        float *cs = cos_t + (size_t)pos * half, *sn = sin_t + (size_t)pos * half;
        for (uint32_t i = 0; i < half; i++) {
            float te = freq_div ? theta_extrap / freq_div[i] : theta_extrap;
            float theta = freq_scale * te;
            if (ext != 0) {
                float span = ramp_hi - ramp_lo;
                float y = ((float)i - ramp_lo) / (span > 0.001f ? span : 0.001f);
                float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ext;
                theta = theta * (1.0f - mix) + te * mix;
            }
            cs[i] = cosf(theta);
            sn[i] = sinf(theta);
            theta_extrap *= theta_scale;
        }
    }
}

int rvl_rope_hparams(const rvl_hparams *hp, const rvl_ctx_params *p, rvl_hparams *out)
{
    static const char *const names[] = {"none", "linear", "yarn", "ntk"};
    int scaling = -1;

    *out = *hp;
    if (!p)
        return 0;
    if (p->rope_scaling) {
        for (int i = 0; i < 4; i++)
            if (strcmp(p->rope_scaling, names[i]) == 0)
                scaling = i;
    }
    if ((p->rope_scaling && scaling < 0) || p->rope_factor < 0 || p->rope_base < 0)
        return rvl_seterr(RVL_EINVAL, "invalid RoPE override (scaling none|linear|yarn|ntk, "
                          "positive factor and base)");
    if (scaling >= 0 && scaling != (int)out->rope_scaling) {
        out->rope_scaling = (rvl_rope_scaling)scaling;
        out->yarn_ext_factor = scaling == RVL_ROPE_SCALING_YARN ? 1.0f : 0.0f;
    }
    if (p->rope_factor > 0)
        out->rope_factor = p->rope_factor;
    if (p->rope_base > 0)
        out->rope_base = p->rope_base;
    if (p->rope_orig_ctx > 0)
        out->rope_orig_ctx = p->rope_orig_ctx;
    return 0;
}
