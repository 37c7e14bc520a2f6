#include "model/kernel_linear.h"

#include <torch/nn/functional/linear.h>

#include <cstdlib>
#include <string>

#include "kernels/elementwise.h"
#include "kernels/matmul.h"

namespace rlcpp {

bool kernels_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("RLCPP_KERNELS");
    return env == nullptr || std::string(env) != "0";
  }();
  return enabled;
}

namespace {

thread_local bool in_scope = false;

}  // namespace

KernelScope::KernelScope() : previous_(in_scope) { in_scope = true; }
KernelScope::~KernelScope() { in_scope = previous_; }

bool kernels_active() { return in_scope && kernels_enabled(); }

torch::Tensor kernel_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!kernels_active()) return {};
  const bool needs_graph = x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad());
  if (torch::GradMode::is_enabled() && needs_graph) return {};
  if (!x.device().is_cpu() || !weight.device().is_cpu() || x.scalar_type() != torch::kFloat32 || weight.dim() != 2) {
    return {};
  }
  const int64_t in = weight.size(1), out = weight.size(0);
  if (x.dim() == 0 || x.size(-1) != in) return {};
  const int64_t rows = x.numel() / in;
  const bool fits = weight.scalar_type() == torch::kFloat32 ? rows * in <= kKernelMaxInputElements : rows <= kKernelMaxRowsHalf;
  if (rows == 0 || !fits || !weight.is_contiguous()) return {};
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

namespace {

// Every tensor on the CPU in fp32, none needing a graph, inside a KernelScope.
bool elementwise_applies(std::initializer_list<const torch::Tensor*> tensors) {
  if (!kernels_active()) return false;
  for (const auto* t : tensors) {
    if (!t->device().is_cpu() || t->scalar_type() != torch::kFloat32) return false;
    if (torch::GradMode::is_enabled() && t->requires_grad()) return false;
  }
  return true;
}

}  // namespace

torch::Tensor kernel_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (!elementwise_applies({&x, &weight}) || x.dim() == 0 || weight.numel() != x.size(-1)) return {};
  const auto xc = x.contiguous(), wc = weight.contiguous();
  auto out = torch::empty_like(xc);
  const int64_t dim = x.size(-1);
  kernels::rms_norm(xc.data_ptr<float>(), wc.data_ptr<float>(), xc.numel() / dim, dim, static_cast<float>(eps),
                    out.data_ptr<float>());
  return out;
}

torch::Tensor kernel_silu_mul(const torch::Tensor& gate, const torch::Tensor& up) {
  if (!elementwise_applies({&gate, &up}) || gate.sizes() != up.sizes()) return {};
  const auto g = gate.contiguous(), u = up.contiguous();
  auto out = torch::empty_like(g);
  kernels::silu_mul(g.data_ptr<float>(), u.data_ptr<float>(), g.numel(), out.data_ptr<float>());
  return out;
}

torch::Tensor kernel_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (!elementwise_applies({&x, &cos, &sin}) || x.dim() != 3 || cos.dim() != 2) return {};
  const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2);
  if (dim % 2 != 0 || cos.size(0) != tokens || cos.size(1) != dim || sin.sizes() != cos.sizes()) return {};
  const auto xc = x.contiguous(), c = cos.contiguous(), s = sin.contiguous();
  auto out = torch::empty_like(xc);
  kernels::rope(xc.data_ptr<float>(), c.data_ptr<float>(), s.data_ptr<float>(), tokens, heads, dim, out.data_ptr<float>());
  return out;
}

torch::Tensor linear_no_grad(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (auto y = kernel_linear(x, weight, bias); y.defined()) return y;
  const auto dtype = x.scalar_type();
  return torch::nn::functional::linear(x, weight.scalar_type() == dtype ? weight : weight.to(dtype),
                                       !bias.defined() || bias.scalar_type() == dtype ? bias : bias.to(dtype));
}

}  // namespace rlcpp
