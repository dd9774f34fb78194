// Sparse softmax cross-entropy, forward and backward in one row-wise kernel.
//
// One group of GROUP threads (a warp, or a 256-thread block for long rows) owns one
// row of C logits. Pass 1 is an online softmax: each thread keeps a running max m and
// a sum s of exp(x - m), rescaling s when m grows, so the row is read once and nothing
// overflows for any finite logits. The group merges (m, s) pairs, then pass 2 writes
//     dlogits[j] = (exp(x[j] - m) / s - [j == label]) * g[row]
// and the first thread writes loss[row] = log(s) - (x[label] - m). Either output may be
// null (forward only, or backward only); g null means a cotangent of 1. A label outside
// [0, C) gives NaN in both outputs rather than reading out of bounds.
//
// gputape.kernels.registry prepends gputape.core.expr's generated prelude (for gt_exp/gt_log); the numpy
// reference (ref_sparse_softmax_xent) is the CPU path of the primitive.

template <typename T> __device__ __forceinline__ T gt_neg_inf();
template <> __device__ __forceinline__ float gt_neg_inf<float>() { return -__int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double gt_neg_inf<double>() { return -__longlong_as_double(0x7ff0000000000000LL); }
template <typename T> __device__ __forceinline__ T gt_nan();
template <> __device__ __forceinline__ float gt_nan<float>() { return __int_as_float(0x7fffffff); }
template <> __device__ __forceinline__ double gt_nan<double>() { return __longlong_as_double(0x7fffffffffffffffLL); }

// Merge running (max, sum) pair b into a. A pair with max -inf holds no mass; testing
// equality first avoids exp(-inf - -inf) = NaN when both are empty.
template <typename T> __device__ __forceinline__ void gt_lse_merge(T& m, T& s, T mb, T sb) {
  T mn = m > mb ? m : mb;
  if (mn != m) s = s * gt_exp(m - mn);
  if (mn != mb) sb = sb * gt_exp(mb - mn);
  s = s + sb;
  m = mn;
}

template <typename T, typename L, int GROUP>
__device__ __forceinline__ void gt_sparse_xent(const T* __restrict__ logits, const L* __restrict__ labels,
                                               const T* __restrict__ g, T* __restrict__ loss,
                                               T* __restrict__ dlogits, long long n_rows, long long n_cols) {
  __shared__ T sm_m[GROUP == 32 ? 1 : GROUP / 32];
  __shared__ T sm_s[GROUP == 32 ? 1 : GROUP / 32];
  const int lane = threadIdx.x % GROUP;
  const long long groups_per_block = blockDim.x / GROUP;
  const long long first = (long long)blockIdx.x * groups_per_block + threadIdx.x / GROUP;
  const long long stride = (long long)gridDim.x * groups_per_block;
  for (long long row = first; row < n_rows; row += stride) {
    const T* x = logits + row * n_cols;
    T m = gt_neg_inf<T>();
    T s = T(0);
    for (long long j = lane; j < n_cols; j += GROUP) {
      T v = x[j];
      if (v > m) {
        s = s * gt_exp(m - v) + T(1);  // m = -inf at first: 0 * 0 + 1
        m = v;
      } else if (!(v == m && m == gt_neg_inf<T>())) {
        s = s + gt_exp(v - m);  // NaN logits fall through here and poison s, as in numpy
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      T mb = __shfl_xor_sync(0xffffffffu, m, off);
      T sb = __shfl_xor_sync(0xffffffffu, s, off);
      gt_lse_merge(m, s, mb, sb);
    }
    if (GROUP > 32) {  // combine the warps of the block through shared memory
      const int warp = lane / 32;
      if ((lane & 31) == 0) {
        sm_m[warp] = m;
        sm_s[warp] = s;
      }
      __syncthreads();
      m = sm_m[0];
      s = sm_s[0];
      for (int w = 1; w < GROUP / 32; ++w) gt_lse_merge(m, s, sm_m[w], sm_s[w]);
      __syncthreads();  // sm_* are rewritten for the next row
    }
    const L lab = labels[row];
    const bool valid = lab >= 0 && (long long)lab < n_cols;
    const T scale = g ? g[row] : T(1);
    if (loss && lane == 0) loss[row] = valid ? gt_log(s) - (x[lab] - m) : gt_nan<T>();
    if (dlogits) {
      T* d = dlogits + row * n_cols;
      const T inv_s = T(1) / s;
      for (long long j = lane; j < n_cols; j += GROUP) {
        T p = gt_exp(x[j] - m) * inv_s;
        d[j] = valid ? (p - (j == (long long)lab ? T(1) : T(0))) * scale : gt_nan<T>();
      }
    }
  }
}

#define GT_XENT(NAME, T, L, GROUP)                                                              \
  extern "C" __global__ void NAME(const T* logits, const L* labels, const T* g, T* loss, T* dlogits, \
                                  long long n_rows, long long n_cols) {                        \
    gt_sparse_xent<T, L, GROUP>(logits, labels, g, loss, dlogits, n_rows, n_cols);              \
  }

// warp per row (short rows) and block of 256 per row (long rows); float/double logits;
// int32/int64 labels
GT_XENT(gt_sparse_xent_warp_f32_i32, float, int, 32)
GT_XENT(gt_sparse_xent_warp_f32_i64, float, long long, 32)
GT_XENT(gt_sparse_xent_warp_f64_i32, double, int, 32)
GT_XENT(gt_sparse_xent_warp_f64_i64, double, long long, 32)
GT_XENT(gt_sparse_xent_block_f32_i32, float, int, 256)
GT_XENT(gt_sparse_xent_block_f32_i64, float, long long, 256)
GT_XENT(gt_sparse_xent_block_f64_i32, double, int, 256)
GT_XENT(gt_sparse_xent_block_f64_i64, double, long long, 256)
