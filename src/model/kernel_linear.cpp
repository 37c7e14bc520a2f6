#include "model/kernel_linear.h"

#include <torch/nn/functional/linear.h>

#include <cstdlib>
#include <string>

#include "kernels/matmul.h"

namespace rlcpp {

namespace {

// $RLCPP_KERNELS=0 keeps every product on LibTorch (benchmarks compare the two in one run).
bool kernels_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("RLCPP_KERNELS");
    return env == nullptr || std::string(env) != "0";
  }();
  return enabled;
}

thread_local bool in_scope = false;

}  // namespace

KernelScope::KernelScope() : previous_(in_scope) { in_scope = true; }
KernelScope::~KernelScope() { in_scope = previous_; }

torch::Tensor kernel_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!in_scope || !kernels_enabled()) return {};
  const bool needs_graph = x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad());
  if (torch::GradMode::is_enabled() && needs_graph) return {};
  if (!x.device().is_cpu() || !weight.device().is_cpu() || x.scalar_type() != torch::kFloat32 || weight.dim() != 2) {
    return {};
  }
  const int64_t in = weight.size(1), out = weight.size(0);
  if (x.dim() == 0 || x.size(-1) != in) return {};
  const int64_t rows = x.numel() / in;
  if (rows == 0 || rows > kKernelMaxRows || !weight.is_contiguous()) return {};
  kernels::WeightType type;
  switch (weight.scalar_type()) {
    case torch::kFloat32: type = kernels::WeightType::f32; break;
    case torch::kBFloat16: type = kernels::WeightType::bf16; break;
    case torch::kFloat16: type = kernels::WeightType::f16; break;
    default: return {};
  }
  const auto xc = x.contiguous();
  const auto b = bias.defined() ? bias.to(torch::kFloat32).contiguous() : torch::Tensor();
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  auto y = torch::empty(sizes, x.options());
  kernels::matmul_nt(xc.data_ptr<float>(), rows, in, weight.data_ptr(), type, out,
                     b.defined() ? b.data_ptr<float>() : nullptr, y.data_ptr<float>());
  return y;
}

torch::Tensor linear_no_grad(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (auto y = kernel_linear(x, weight, bias); y.defined()) return y;
  const auto dtype = x.scalar_type();
  return torch::nn::functional::linear(x, weight.scalar_type() == dtype ? weight : weight.to(dtype),
                                       !bias.defined() || bias.scalar_type() == dtype ? bias : bias.to(dtype));
}

}  // namespace rlcpp
