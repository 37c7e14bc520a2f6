// The bridge from the model to the CPU kernels (kernels/): inside the engine's steps, generation's
// small batches run their linear layers there (reading half-precision weights as stored); RMSNorm,
// SiLU·mul and rotary embedding run there for every fp32 CPU pass, training included, with their
// backward passes. Larger products and other devices stay on LibTorch.
#pragma once

#include <torch/types.h>

namespace rlcpp {

// When the kernels are used: up to kKernelMaxRows rows of x, for every weight dtype. bench_kernels
// measured the kernels ahead of LibTorch's BLAS (2 threads) at every row count up to 64 on the
// 0.5B's layer shapes (x2.6-3.3 at 1-8 rows, x1.1-1.3 at 64); from 128 rows BLAS is ahead. Half-
// precision weights are read as stored (LibTorch would first convert the whole weight to fp32).
constexpr int64_t kKernelMaxRows = 64;
// Weights on the CPU's dot-product instructions (kernels/matmul.h: bf16 on AVX512-BF16, int8 on
// AVX512-VNNI) stay on the kernels up to this many rows, prefill chunks included: bench_kernels
// measured both at about twice BLAS's fp32 rate (2 threads) at 64-1024 rows on the 0.5B's shapes,
// before BLAS's conversion of the weight to fp32.
constexpr int64_t kDotMaxRows = 1024;

// Turns the matmul kernels on for this thread while in scope: the generation engine's steps.
// Elsewhere (the trainer's scoring and training passes) products stay on LibTorch, so the old
// log-probs of an on-policy step equal the training pass's exactly (ratio 1).
class KernelScope {
 public:
  KernelScope();
  ~KernelScope();
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  bool previous_;
};

// Inside a KernelScope and not disabled by $RLCPP_KERNELS=0: the engine's steps may use the kernels.
bool kernels_active();
// Not disabled by $RLCPP_KERNELS=0 (which keeps everything on LibTorch, for A/B benchmarks).
bool kernels_enabled();

// 8-bit weights (the rollout engine's copy under --rollout-dtype int8|fp8, kernels/quantize.h): a
// weight [out, in] of codes, int8 (kChar) or fp8 e4m3 bits (kByte, read as float8_e4m3fn on a device), and
// its scales [out] in fp32. Such a weight is only ever read through these functions.
bool eight_bit(torch::ScalarType dtype);
// Writes w's codes into q (kChar or kByte, w's shape) and its row scales into scale ([out], fp32).
void quantize_weight(const torch::Tensor& w, torch::Tensor& q, torch::Tensor& scale);
// The fp32 weight [out, in] (or rows [..., in] with their scales [...]) an 8-bit one stands for:
// widened by the kernels on the CPU, where the codes are on another device (CUDA) by
// dequantize_weight_torch there.
torch::Tensor dequantize_weight(const torch::Tensor& q, const torch::Tensor& scale);
// The same with LibTorch's operations on the codes' device (fp8 codes are float8_e4m3fn's bits).
torch::Tensor dequantize_weight_torch(const torch::Tensor& q, const torch::Tensor& scale);

// x [..., in] · weightᵀ (+ bias) through the kernels when they apply: inside a KernelScope, no autograd, CPU, fp32 x of at most
// kKernelMaxRows rows (kDotMaxRows on the dot-product instructions), weight [out, in] in fp32,
// bf16, fp16 or 8 bits with its `scale`. Undefined
// when they do not (a longer prefill dequantizes an 8-bit weight for BLAS, as linear_no_grad does),
// or when $RLCPP_KERNELS=0 (LibTorch only: for A/B benchmarks).
torch::Tensor kernel_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {},
                            const torch::Tensor& scale = {});

// The fused element-wise kernels, multi-threaded on the kernels' pool, wherever every tensor is on
// the CPU in fp32 and $RLCPP_KERNELS is not 0: the engine's steps, and training and scoring too
// (autograd functions whose backward passes are kernels as well), so the trainer's forward and the
// engine's agree to the last bit in these steps. Undefined when they do not apply (other devices
// and dtypes keep LibTorch's ops).
torch::Tensor kernel_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
torch::Tensor kernel_silu_mul(const torch::Tensor& gate, const torch::Tensor& up);
// x [T, H, D] (tokens, heads, head_dim), cos/sin [T, D].
torch::Tensor kernel_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// kernel_linear, else LibTorch's product with the weight (and bias) converted to x's dtype (an
// 8-bit one dequantized with `scale`).
torch::Tensor linear_no_grad(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {},
                             const torch::Tensor& scale = {});

}  // namespace rlcpp
