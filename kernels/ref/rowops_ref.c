/*
 * rowops_ref.c - the scalar RMSNorm, RoPE, SwiGLU and softmax of rowops.h.
 *
 * Unlike the quantizers' files this one does not include ref.h: there is
 * no numpy result to match here, and these loops were the forward pass's
 * own, compiled with the compiler's default contraction of a*b - c*d (a
 * fused multiply-add where the target has one, e.g. arm64); keeping that
 * keeps the forward pass's bits on every target.
 */
#include <math.h>

#include "rowops.h"

void rmsnorm_f32_ref(float *y, const float *x, const float *w, int64_t n, float eps)
{
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = (x[i] * scale) * w[i];
}

void rope_f32_ref(float *x, int64_t n_heads, int64_t head_dim, int64_t rope_dim, const float *cs,
                  const float *sn, bool neox)
{
    const int64_t half = rope_dim / 2;
    for (int64_t h = 0; h < n_heads; h++) {
        float *v = x + h * head_dim;
        for (int64_t i = 0; i < half; i++) {
            const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * cs[i] - x1 * sn[i];
            v[b] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

void swiglu_f32_ref(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const float v = g[i];
        g[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

void geglu_tanh_f32_ref(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const float v = g[i];
        g[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * v * (1.0f + 0.044715f * v * v))) * u[i];
    }
}

void swiglu_oai_f32_ref(float *g, const float *u, int64_t n)
{
    const float alpha = 1.702f, limit = 7.0f;
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i] < limit ? g[i] : limit;
        const float y = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        g[i] = x / (1.0f + expf(-alpha * x)) * (y + 1.0f);
    }
}

void softcap_f32_ref(float *x, int64_t n, float cap)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = cap * tanhf(x[i] / cap);
}

void softmax_f32_ref(float *y, const float *x, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > mx)
            mx = x[i];
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        y[i] = expf(x[i] - mx);
        sum += y[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        y[i] *= inv;
}
