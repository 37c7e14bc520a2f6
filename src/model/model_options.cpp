#include "model/model_options.h"

#include "util/cuda_backend.h"
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

const EnumTable<torch::ScalarType>& rollout_dtypes() {
  static const EnumTable<torch::ScalarType> table(
      "rollout dtype",
      {{torch::kFloat32, "float32", "32-bit float", {"fp32", "float"}},
       {torch::kBFloat16, "bfloat16", "bfloat16, computed in fp32 on the CPU", {"bf16"}},
       {torch::kFloat16, "float16", "IEEE half, computed in fp32 on the CPU", {"fp16", "half"}},
       {torch::kChar, "int8", "int8 with a scale per output channel, computed in fp32", {"i8"}},
       {torch::kByte, "fp8", "fp8 e4m3 with a scale per output channel, computed in fp32", {"fp8_e4m3", "e4m3"}}});
  return table;
}

torch::ScalarType rollout_dtype_or_default(const std::string& text, const std::string& flag) {
  return text.empty() ? torch::ScalarType::Undefined : rollout_dtypes().parse(text, flag);
}

int64_t rollout_dtype_bytes(const std::string& name) {
  return static_cast<int64_t>(c10::elementSize(rollout_dtypes().parse(name, "--rollout-dtype")));
}

ModelOptions model_options_from_flags(const std::string& dtype, const std::string& device) {
  ModelOptions options;
  options.dtype = dtypes().parse(dtype, "--dtype");
  try {
    options.device = torch::Device(device);
  } catch (const c10::Error&) {
    throw_user_error("--device: unknown device \"{}\" (use cpu, cuda or cuda:N)", device);
  }
  if (options.device.is_cuda()) {
    if (const std::string why = load_cuda_backend(); !why.empty()) {
      throw_user_error("--device {}: {}; use --device cpu", device, why);
    }
    // fp32 products on TF32 tensor cores (as torch.set_float32_matmul_precision("high") and HF's
    // --tf32): 8x the fp32 rate for a 10-bit mantissa in the products, sums still in fp32. bf16
    // runs are untouched; `rlcpp parity` asks for IEEE fp32 again.
    set_cuda_fp32_matmul_tf32(true);
  }
  return options;
}

}  // namespace rlcpp
