#include "model/model_options.h"

#include <torch/cuda.h>

#include "util/error.h"

namespace rlcpp {

const EnumTable<torch::ScalarType>& dtypes() {
  static const EnumTable<torch::ScalarType> table(
      "dtype", {{torch::kFloat32, "float32", "32-bit float", {"fp32", "float"}},
                {torch::kBFloat16, "bfloat16", "bfloat16 (8-bit exponent)", {"bf16"}},
                {torch::kFloat16, "float16", "IEEE half", {"fp16", "half"}},
                {torch::kFloat64, "float64", "64-bit float (parity and gradient checks)", {"fp64", "double"}}});
  return table;
}

torch::ScalarType dtype_or_default(const std::string& text, const std::string& flag) {
  return text.empty() ? torch::ScalarType::Undefined : dtypes().parse(text, flag);
}

ModelOptions model_options_from_flags(const std::string& dtype, const std::string& device) {
  ModelOptions options;
  options.dtype = dtypes().parse(dtype, "--dtype");
  try {
    options.device = torch::Device(device);
  } catch (const c10::Error&) {
    throw_user_error("--device: unknown device \"{}\" (use cpu, cuda or cuda:N)", device);
  }
  if (options.device.is_cuda() && !torch::cuda::is_available()) {
    throw_user_error("--device {}: this LibTorch build or machine has no CUDA device; use --device cpu", device);
  }
  return options;
}

}  // namespace rlcpp
