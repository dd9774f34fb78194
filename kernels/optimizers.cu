// Optimizer updates over ALL parameters in one launch (a multi-tensor kernel).
//
// The parameters stay where they are (each Variable owns its buffer); the kernel gets
// a table of device pointers, four per tensor (param, grad, slot1, slot2), and the
// prefix sums of their sizes. Thread e of the grid-stride loop finds its tensor by
// binary search in the prefix sums, so one launch covers any number of tensors of
// one dtype.
//
// Step and learning rate live on the device: `lr` points at a device double, and the
// step counter is a pair of int64 slots used ping-pong. This launch reads
// step[parity] (never written during the launch), uses t = step[parity] + 1, and one
// thread writes t to step[parity ^ 1]; the host flips `parity` per launch. So there is
// no host round trip and no grid-wide race on the counter.
//
// Inside a CUDA graph the parity is frozen with the other arguments, so gt.function's
// graph runs the update with a fixed parity p and then gt_optimizer_step_sync, which
// copies the new count back into step[p]: after each replay both slots hold t, and the
// next replay reads step[p] again (see _GraphOptimizer in gputape/function/_graphs.py).
//
// kind 0: SGD, Keras' form: m = momentum*m - lr*g; p += m (nesterov: p += momentum*m -
//         lr*g); p -= lr*g when momentum == 0 (slot1 unused).
// kind 1: Adam, Keras' form: m += (g - m)(1 - b1); v += (g^2 - v)(1 - b2);
//         p -= lr*sqrt(1 - b2^t)/(1 - b1^t) * m / (sqrt(v) + eps).
// weight_decay != 0 (any kind; AdamW is Adam with it): p -= lr*weight_decay*p first,
// decoupled, as gputape.optim does.
//
// Declared in gputape/optim/fused.py (OPTIMIZERS), next to FusedOptimizer. Its numpy
// reference, ref_optimizer_update, applies the update rules gt.optim's CPU step computes
// with (gputape/optim/rules.py): one numpy statement of the math, and this kernel.

template <typename T>
__device__ __forceinline__ void gt_multi_tensor_update(const unsigned long long* __restrict__ ptrs,
                                                       const long long* __restrict__ offsets, int n_tensors,
                                                       long long* step, int parity, const double* lr_ptr, int kind,
                                                       double momentum, int nesterov, double beta1, double beta2,
                                                       double eps, double weight_decay) {
  const long long t = step[parity] + 1;
  if (blockIdx.x == 0 && threadIdx.x == 0) step[parity ^ 1] = t;
  const double lr = *lr_ptr;
  // Coefficients in double once per thread, then cast: the update itself runs in T,
  // as the numpy path computes it in the parameter's dtype.
  const T lr_t = T(lr);
  const T decay = T(lr * weight_decay);
  const T mom = T(momentum);
  const T one_m_b1 = T(1.0 - beta1);
  const T one_m_b2 = T(1.0 - beta2);
  const T alpha = T(lr * sqrt(1.0 - pow(beta2, (double)t)) / (1.0 - pow(beta1, (double)t)));
  const T eps_t = T(eps);
  const long long total = offsets[n_tensors];
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    int lo = 0, hi = n_tensors - 1;  // last k with offsets[k] <= e
    while (lo < hi) {
      int mid = (lo + hi + 1) >> 1;
      if (offsets[mid] <= e) lo = mid; else hi = mid - 1;
    }
    const long long i = e - offsets[lo];
    T* p = reinterpret_cast<T*>(ptrs[4 * lo]);
    const T* g = reinterpret_cast<const T*>(ptrs[4 * lo + 1]);
    T w = p[i];
    const T gi = g[i];
    if (weight_decay != 0.0) w = w - w * decay;
    if (kind == 0) {
      if (momentum == 0.0) {
        w = w - gi * lr_t;
      } else {
        T* m = reinterpret_cast<T*>(ptrs[4 * lo + 2]);
        T mi = m[i] * mom - gi * lr_t;
        m[i] = mi;
        w = nesterov ? w + (mi * mom - gi * lr_t) : w + mi;
      }
    } else {
      T* m = reinterpret_cast<T*>(ptrs[4 * lo + 2]);
      T* v = reinterpret_cast<T*>(ptrs[4 * lo + 3]);
      T mi = m[i];
      T vi = v[i];
      mi = mi + (gi - mi) * one_m_b1;
      vi = vi + (gi * gi - vi) * one_m_b2;
      m[i] = mi;
      v[i] = vi;
      w = w - (mi * alpha) / (gt_sqrt(vi) + eps_t);
    }
    p[i] = w;
  }
}

#define GT_OPT(NAME, T)                                                                          \
  extern "C" __global__ void NAME(const unsigned long long* ptrs, const long long* offsets, int n_tensors, \
                                  long long* step, int parity, const double* lr, int kind, double momentum, \
                                  int nesterov, double beta1, double beta2, double eps, double weight_decay) { \
    gt_multi_tensor_update<T>(ptrs, offsets, n_tensors, step, parity, lr, kind, momentum, nesterov, beta1,    \
                              beta2, eps, weight_decay);                                                    \
  }

GT_OPT(gt_optimizer_update_f32, float)
GT_OPT(gt_optimizer_update_f64, double)

// The graph form's follow-up (one thread): step[parity] = step[parity ^ 1].
extern "C" __global__ void gt_optimizer_step_sync(long long* step, int parity) {
  if (blockIdx.x == 0 && threadIdx.x == 0) step[parity] = step[parity ^ 1];
}
