// Activation forward math shared by gputape's fused kernels. Every function is a
// template on the floating type. gputape.kernels prepends this file to the
// cupy.ElementwiseKernel bodies (as their preamble) and to the .cu modules, after
// gputape.expr's generated prelude, which defines the gt_exp/gt_tanh/gt_sigmoid/...
// overloads used here (float routed to the single-precision functions, so a float
// kernel never silently computes in double). The backward kernels are generated from
// each primitive's derivative expression (gputape.expr), not written here.
// No header is included: NVRTC compiles this with its built-in math functions only.
#ifndef GPUTAPE_ACTIVATIONS_CUH
#define GPUTAPE_ACTIVATIONS_CUH

#define GT_SQRT1_2 0.70710678118654752440     // 1/sqrt(2)
#define GT_SQRT_2_PI 0.79788456080286535588   // sqrt(2/pi)
#define GT_GELU_A 0.044715

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

#endif  // GPUTAPE_ACTIVATIONS_CUH
