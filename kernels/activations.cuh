// Activation math shared by gputape's fused kernels (forward, and backward fused with
// the incoming gradient). Every function is a template on the floating type; the
// gt_* overloads below route float to the single-precision intrinsics so a float
// kernel never silently computes in double. gputape.kernels prepends this file to
// the cupy.ElementwiseKernel bodies (as their preamble) and to the .cu modules, and
// holds the numpy reference of every function here (the CPU path, same math).
//
// Residual conventions match the primitives' VJPs: relu, sigmoid and tanh take the
// forward OUTPUT y; leaky_relu, elu, gelu and softplus take the INPUT x. No header is
// included: NVRTC compiles this with its built-in math functions only.
#ifndef GPUTAPE_ACTIVATIONS_CUH
#define GPUTAPE_ACTIVATIONS_CUH

__device__ __forceinline__ float gt_exp(float x) { return expf(x); }
__device__ __forceinline__ double gt_exp(double x) { return exp(x); }
__device__ __forceinline__ float gt_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ double gt_expm1(double x) { return expm1(x); }
__device__ __forceinline__ float gt_log(float x) { return logf(x); }
__device__ __forceinline__ double gt_log(double x) { return log(x); }
__device__ __forceinline__ float gt_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double gt_log1p(double x) { return log1p(x); }
__device__ __forceinline__ float gt_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double gt_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float gt_erf(float x) { return erff(x); }
__device__ __forceinline__ double gt_erf(double x) { return erf(x); }
__device__ __forceinline__ float gt_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double gt_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float gt_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double gt_abs(double x) { return fabs(x); }

#define GT_SQRT1_2 0.70710678118654752440     // 1/sqrt(2)
#define GT_INV_SQRT_2PI 0.39894228040143267794  // 1/sqrt(2 pi)
#define GT_SQRT_2_PI 0.79788456080286535588   // sqrt(2/pi)
#define GT_GELU_A 0.044715

// exp of -|x| only: never overflows, keeps precision in both tails (as the op does).
template <typename T> __device__ __forceinline__ T gt_sigmoid(T x) {
  T e = gt_exp(-gt_abs(x));
  return x >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
}

// ---- forward ------------------------------------------------------------------------
template <typename T> __device__ __forceinline__ T gt_identity_fwd(T x) { return x; }
// x < 0 ? 0 : x rather than x > 0 ? x : 0, so NaN propagates like numpy's maximum.
template <typename T> __device__ __forceinline__ T gt_relu_fwd(T x) { return x < T(0) ? T(0) : x; }
template <typename T> __device__ __forceinline__ T gt_leaky_relu_fwd(T x, T alpha) { return x > T(0) ? x : x * alpha; }
template <typename T> __device__ __forceinline__ T gt_elu_fwd(T x, T alpha) {
  return x > T(0) ? x : alpha * gt_expm1(x < T(0) ? x : T(0));
}
template <typename T> __device__ __forceinline__ T gt_gelu_fwd(T x) {
  return T(0.5) * x * (T(1) + gt_erf(x * T(GT_SQRT1_2)));
}
template <typename T> __device__ __forceinline__ T gt_gelu_tanh_fwd(T x) {
  return T(0.5) * x * (T(1) + gt_tanh(T(GT_SQRT_2_PI) * (x + T(GT_GELU_A) * x * x * x)));
}
template <typename T> __device__ __forceinline__ T gt_sigmoid_fwd(T x) { return gt_sigmoid(x); }
template <typename T> __device__ __forceinline__ T gt_tanh_fwd(T x) { return gt_tanh(x); }
template <typename T> __device__ __forceinline__ T gt_softplus_fwd(T x) {
  return gt_log1p(gt_exp(-gt_abs(x))) + (x < T(0) ? T(0) : x);
}

// ---- backward, fused with the incoming gradient g -------------------------------------
// relu: g * (y > 0), written as a product so a NaN g stays NaN (as the VJP's does).
template <typename T> __device__ __forceinline__ T gt_relu_bwd(T y, T g) { return g * (y > T(0) ? T(1) : T(0)); }
template <typename T> __device__ __forceinline__ T gt_leaky_relu_bwd(T x, T g, T alpha) { return x > T(0) ? g : g * alpha; }
// elu: d/dx alpha*(exp(x)-1) = alpha*exp(x); recomputed from x (compute is free in a
// memory-bound kernel, and it saves reading the output).
template <typename T> __device__ __forceinline__ T gt_elu_bwd(T x, T g, T alpha) {
  return x > T(0) ? g : g * alpha * gt_exp(x);
}
// gelu: Phi(x) + x phi(x)
template <typename T> __device__ __forceinline__ T gt_gelu_bwd(T x, T g) {
  T cdf = T(0.5) * (T(1) + gt_erf(x * T(GT_SQRT1_2)));
  T pdf = T(GT_INV_SQRT_2PI) * gt_exp(T(-0.5) * x * x);
  return g * (cdf + x * pdf);
}
template <typename T> __device__ __forceinline__ T gt_gelu_tanh_bwd(T x, T g) {
  T x2 = x * x;
  T t = gt_tanh(T(GT_SQRT_2_PI) * (x + T(GT_GELU_A) * x2 * x));
  T du = T(GT_SQRT_2_PI) * (T(1) + T(3.0 * GT_GELU_A) * x2);
  return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
}
template <typename T> __device__ __forceinline__ T gt_sigmoid_bwd(T y, T g) { return g * (y * (T(1) - y)); }
template <typename T> __device__ __forceinline__ T gt_tanh_bwd(T y, T g) { return g * (T(1) - y * y); }
template <typename T> __device__ __forceinline__ T gt_softplus_bwd(T x, T g) { return g * gt_sigmoid(x); }

#endif  // GPUTAPE_ACTIVATIONS_CUH
