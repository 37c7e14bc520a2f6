// The bridge from the model's linear layers to the CPU kernels (kernels/matmul.h): generation's
// small batches run there, multi-threaded and reading half-precision weights as stored; everything
// else (training, large batches, other devices) stays on LibTorch.
#pragma once

#include <torch/types.h>

namespace rlcpp {

// Rows up to which the kernels are used (bench_kernels: still ahead of LibTorch's BLAS at 32 rows
// in a contended run; 16 until a clean run tunes it).
constexpr int64_t kKernelMaxRows = 16;

// Turns the kernels on for this thread while in scope: the generation engine's steps. Elsewhere
// (the trainer's scoring and training passes) products stay on LibTorch, so the old log-probs of
// an on-policy step equal the training pass's exactly (ratio 1).
class KernelScope {
 public:
  KernelScope();
  ~KernelScope();
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  bool previous_;
};

// x [..., in] · weightᵀ (+ bias) through the kernels when they apply: inside a KernelScope, no autograd, CPU, fp32 x of at
// most kKernelMaxRows rows, weight [out, in] in fp32, bf16 or fp16. Undefined when they do not, or
// when $RLCPP_KERNELS=0 (LibTorch only: for A/B benchmarks).
torch::Tensor kernel_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

// kernel_linear, else LibTorch's product with the weight (and bias) converted to x's dtype.
torch::Tensor linear_no_grad(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

}  // namespace rlcpp
