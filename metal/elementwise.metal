// elementwise.metal - element-wise f32 kernels over arrays of n floats.
//
//   rvl_add_f32     y = a + b
//   rvl_mul_f32     y = a * b
//   rvl_swiglu_f32  y = silu(a) * b = a / (1 + exp(-a)) * b    (lib/engine/forward.c's SwiGLU)
//                   Buffers: 0 a, 1 b, 2 y, 3 n (uint).
//   rvl_silu_f32    y = x / (1 + exp(-x))
//   rvl_gelu_f32    y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (the tanh form)
//                   Buffers: 0 x, 1 y, 2 n (uint).
//   rvl_scale_f32   y = x * s. Buffers: 0 x, 1 y, 2 n (uint), 3 s (float).
//
// Each thread handles 4 consecutive elements, as one float4 when all four are
// in range and one by one in the tail, so the buffers (with their offsets)
// must be 16-byte aligned. Dispatch: dispatchThreads ceil(n / 4) threads, any
// threadgroup size. y may be one of the inputs.
#include <metal_stdlib>
using namespace metal;

struct op_add {
    template <typename T> static T f(T a, T b) { return a + b; }
};
struct op_mul {
    template <typename T> static T f(T a, T b) { return a * b; }
};
struct op_swiglu {
    template <typename T> static T f(T a, T b) { return a / (1.0f + exp(-a)) * b; }
};
struct op_silu {
    template <typename T> static T f(T x) { return x / (1.0f + exp(-x)); }
};
struct op_gelu {
    template <typename T> static T f(T x)
    {
        const float c = 0.7978845608028654f; // sqrt(2 / pi)
        return 0.5f * x * (1.0f + tanh(c * (x + 0.044715f * x * x * x)));
    }
};

template <typename Op>
kernel void rvl_binary_f32(device const float *a [[buffer(0)]],
                           device const float *b [[buffer(1)]],
                           device float *y [[buffer(2)]],
                           constant uint &n [[buffer(3)]],
                           uint tid [[thread_position_in_grid]])
{
    const uint i = tid * 4;
    if (i >= n)
        return;
    if (n - i >= 4) {
        const float4 r = Op::f(((device const float4 *)a)[tid], ((device const float4 *)b)[tid]);
        ((device float4 *)y)[tid] = r;
    } else {
        for (uint k = i; k < n; k++)
            y[k] = Op::f(a[k], b[k]);
    }
}

typedef decltype(rvl_binary_f32<op_add>) binary_t;
template [[host_name("rvl_add_f32")]] kernel binary_t rvl_binary_f32<op_add>;
template [[host_name("rvl_mul_f32")]] kernel binary_t rvl_binary_f32<op_mul>;
template [[host_name("rvl_swiglu_f32")]] kernel void rvl_binary_f32<op_swiglu>(
    device const float *a, device const float *b, device float *y, constant uint &n, uint tid);

template <typename Op>
kernel void rvl_unary_f32(device const float *x [[buffer(0)]],
                          device float *y [[buffer(1)]],
                          constant uint &n [[buffer(2)]],
                          uint tid [[thread_position_in_grid]])
{
    const uint i = tid * 4;
    if (i >= n)
        return;
    if (n - i >= 4) {
        ((device float4 *)y)[tid] = Op::f(((device const float4 *)x)[tid]);
    } else {
        for (uint k = i; k < n; k++)
            y[k] = Op::f(x[k]);
    }
}

typedef decltype(rvl_unary_f32<op_silu>) unary_t;
template [[host_name("rvl_silu_f32")]] kernel unary_t rvl_unary_f32<op_silu>;
template [[host_name("rvl_gelu_f32")]] kernel unary_t rvl_unary_f32<op_gelu>;

kernel void rvl_scale_f32(device const float *x [[buffer(0)]],
                          device float *y [[buffer(1)]],
                          constant uint &n [[buffer(2)]],
                          constant float &s [[buffer(3)]],
                          uint tid [[thread_position_in_grid]])
{
    const uint i = tid * 4;
    if (i >= n)
        return;
    if (n - i >= 4) {
        const float4 v = ((device const float4 *)x)[tid];
        ((device float4 *)y)[tid] = v * s;
    } else {
        for (uint k = i; k < n; k++)
            y[k] = x[k] * s;
    }
}
