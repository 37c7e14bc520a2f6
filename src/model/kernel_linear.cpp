#include "model/kernel_linear.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/functional/linear.h>

#include <cstdlib>
#include <string>

#include "kernels/elementwise.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"
#include "util/error.h"

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

bool eight_bit(torch::ScalarType dtype) { return dtype == torch::kChar || dtype == torch::kByte; }

namespace {

kernels::WeightType eight_bit_type(torch::ScalarType dtype) {
  RLCPP_CHECK(eight_bit(dtype), "an 8-bit weight stored as {}", c10::toString(dtype));
  return dtype == torch::kChar ? kernels::WeightType::i8 : kernels::WeightType::fp8;
}

}  // namespace

void quantize_weight(const torch::Tensor& w, torch::Tensor& q, torch::Tensor& scale) {
  RLCPP_CHECK(w.dim() == 2 && q.sizes() == w.sizes() && scale.dim() == 1 && scale.size(0) == w.size(0) &&
                  scale.scalar_type() == torch::kFloat32,
              "quantizing a weight {} into codes {} and scales {} ({})", w.sizes(), q.sizes(), scale.sizes(),
              c10::toString(scale.scalar_type()));
  torch::NoGradGuard no_grad;
  const auto source = w.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  const bool here = q.device().is_cpu() && q.is_contiguous() && scale.device().is_cpu() && scale.is_contiguous();
  auto codes = here ? q : torch::empty(q.sizes(), q.options().device(torch::kCPU));
  auto scales = here ? scale : torch::empty(scale.sizes(), scale.options().device(torch::kCPU));
  kernels::quantize_rows(source.data_ptr<float>(), w.size(0), w.size(1), eight_bit_type(q.scalar_type()),
                         codes.data_ptr(), scales.data_ptr<float>());
  if (!here) {
    q.copy_(codes);
    scale.copy_(scales);
  }
}

torch::Tensor dequantize_weight_torch(const torch::Tensor& q, const torch::Tensor& scale) {
  RLCPP_CHECK(q.dim() >= 1 && scale.sizes() == q.sizes().slice(0, q.dim() - 1), "codes {} with scales {}", q.sizes(),
              scale.sizes());
  const auto values = eight_bit_type(q.scalar_type()) == kernels::WeightType::fp8 ? q.view(torch::kFloat8_e4m3fn) : q;
  return values.to(torch::kFloat32) * scale.to(q.device(), torch::kFloat32).unsqueeze(-1);
}

torch::Tensor dequantize_weight(const torch::Tensor& q, const torch::Tensor& scale) {
  if (!q.is_cpu()) return dequantize_weight_torch(q, scale);  // no round trip through the host
  RLCPP_CHECK(q.dim() >= 1 && scale.sizes() == q.sizes().slice(0, q.dim() - 1), "codes {} with scales {}", q.sizes(),
              scale.sizes());
  const auto codes = q.to(torch::kCPU).contiguous();
  const auto scales = scale.to(torch::kCPU, torch::kFloat32).contiguous();
  auto out = torch::empty(q.sizes(), torch::TensorOptions().dtype(torch::kFloat32));
  const int64_t in = q.size(-1);
  kernels::dequantize_rows(codes.data_ptr(), scales.data_ptr<float>(), in == 0 ? 0 : q.numel() / in, in,
                           eight_bit_type(q.scalar_type()), out.data_ptr<float>());
  return out.to(q.device());
}

torch::Tensor kernel_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                            const torch::Tensor& scale) {
  if (!kernels_active()) return {};
  const bool needs_graph = x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad());
  if (torch::GradMode::is_enabled() && needs_graph) return {};
  if (!x.device().is_cpu() || !weight.device().is_cpu() || x.scalar_type() != torch::kFloat32 || weight.dim() != 2) {
    return {};
  }
  const int64_t in = weight.size(1), out = weight.size(0);
  if (x.dim() == 0 || x.size(-1) != in) return {};
  const int64_t rows = x.numel() / in;
  const bool narrow = eight_bit(weight.scalar_type());
  const bool dot = (weight.scalar_type() == torch::kBFloat16 && kernels::bf16_dot_products()) ||
                   (weight.scalar_type() == torch::kChar && kernels::int8_dot_products());
  if (rows == 0 || rows > (dot ? kDotMaxRows : kKernelMaxRows) || !weight.is_contiguous()) return {};
  kernels::StoredWeight stored{weight.data_ptr()};
  switch (weight.scalar_type()) {
    case torch::kFloat32: stored.type = kernels::WeightType::f32; break;
    case torch::kBFloat16: stored.type = kernels::WeightType::bf16; break;
    case torch::kFloat16: stored.type = kernels::WeightType::f16; break;
    case torch::kChar:
    case torch::kByte: stored.type = eight_bit_type(weight.scalar_type()); break;
    default: return {};
  }
  if (narrow) {
    RLCPP_CHECK(scale.defined() && scale.scalar_type() == torch::kFloat32 && scale.is_contiguous() &&
                    scale.device().is_cpu() && scale.numel() == out,
                "an 8-bit weight {} needs its {} fp32 row scales", weight.sizes(), out);
    stored.scales = scale.data_ptr<float>();
  }
  const auto xc = x.contiguous();
  const auto b = bias.defined() ? bias.to(torch::kFloat32).contiguous() : torch::Tensor();
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  auto y = torch::empty(sizes, x.options());
  kernels::matmul_nt(xc.data_ptr<float>(), rows, in, stored, out, b.defined() ? b.data_ptr<float>() : nullptr,
                     y.data_ptr<float>());
  return y;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Every tensor on the CPU in fp32 and the kernels not disabled: the fused element-wise kernels run,
// in the engine's steps and (through the autograd functions below) in training alike.
bool elementwise_applies(std::initializer_list<const torch::Tensor*> tensors) {
  if (!kernels_enabled()) return false;
  for (const auto* t : tensors) {
    if (!t->device().is_cpu() || t->scalar_type() != torch::kFloat32) return false;
  }
  return true;
}

float* data(torch::Tensor& t) { return t.data_ptr<float>(); }
const float* data(const torch::Tensor& t) { return t.data_ptr<float>(); }

// weight ⊙ x / sqrt(mean(x²) + eps) over the last dimension; backward recomputes the scale.
struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight, double eps) {
    const auto xc = x.contiguous(), wc = weight.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t dim = xc.size(-1);
    kernels::rms_norm(data(xc), data(wc), xc.numel() / dim, dim, static_cast<float>(eps), data(out));
    ctx->save_for_backward({xc, wc});
    ctx->saved_data["eps"] = eps;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& w = saved[1];
    const auto g = grads[0].contiguous();
    const int64_t dim = x.size(-1);
    auto dx = torch::empty_like(x);
    torch::Tensor dw = ctx->needs_input_grad(1) ? torch::empty_like(w) : torch::Tensor();
    kernels::rms_norm_backward(data(x), data(w), data(g), x.numel() / dim, dim,
                               static_cast<float>(ctx->saved_data["eps"].toDouble()), data(dx),
                               dw.defined() ? data(dw) : nullptr);
    return {dx, dw, torch::Tensor()};
  }
};

struct SiluMulFunction : torch::autograd::Function<SiluMulFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    const auto g = gate.contiguous(), u = up.contiguous();
    auto out = torch::empty_like(g);
    kernels::silu_mul(data(g), data(u), g.numel(), data(out));
    ctx->save_for_backward({g, u});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto grad = grads[0].contiguous();
    auto dgate = torch::empty_like(saved[0]), dup = torch::empty_like(saved[1]);
    kernels::silu_mul_backward(data(saved[0]), data(saved[1]), data(grad), grad.numel(), data(dgate), data(dup));
    return {dgate, dup};
  }
};

// x [T, H, D] by cos/sin [T, D] (constants: no gradient).
struct RopeFunction : torch::autograd::Function<RopeFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    const auto xc = x.contiguous(), c = cos.contiguous(), s = sin.contiguous();
    auto out = torch::empty_like(xc);
    kernels::rope(data(xc), data(c), data(s), xc.size(0), xc.size(1), xc.size(2), data(out));
    ctx->save_for_backward({c, s});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto g = grads[0].contiguous();
    auto dx = torch::empty_like(g);
    kernels::rope_backward(data(g), data(saved[0]), data(saved[1]), g.size(0), g.size(1), g.size(2), data(dx));
    return {dx, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor kernel_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (!elementwise_applies({&x, &weight}) || x.dim() == 0 || weight.dim() != 1 || weight.numel() != x.size(-1)) return {};
  return RmsNormFunction::apply(x, weight, eps);
}

torch::Tensor kernel_silu_mul(const torch::Tensor& gate, const torch::Tensor& up) {
  if (!elementwise_applies({&gate, &up}) || gate.sizes() != up.sizes()) return {};
  return SiluMulFunction::apply(gate, up);
}

torch::Tensor kernel_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (!elementwise_applies({&x, &cos, &sin}) || x.dim() != 3 || cos.dim() != 2) return {};
  const int64_t tokens = x.size(0), dim = x.size(2);
  if (dim % 2 != 0 || cos.size(0) != tokens || cos.size(1) != dim || sin.sizes() != cos.sizes()) return {};
  return RopeFunction::apply(x, cos, sin);
}

torch::Tensor linear_no_grad(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                             const torch::Tensor& scale) {
  if (auto y = kernel_linear(x, weight, bias, scale); y.defined()) return y;
  const auto dtype = x.scalar_type();
  if (eight_bit(weight.scalar_type())) return linear_no_grad(x, dequantize_weight(weight, scale).to(dtype), bias);
  return torch::nn::functional::linear(x, weight.scalar_type() == dtype ? weight : weight.to(dtype),
                                       !bias.defined() || bias.scalar_type() == dtype ? bias : bias.to(dtype));
}

}  // namespace rlcpp
