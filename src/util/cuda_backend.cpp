#include "util/cuda_backend.h"

#include <ATen/Context.h>
#include <dlfcn.h>
#include <torch/cuda.h>

#include <mutex>

namespace rlcpp {

std::string load_cuda_backend() {
  static std::once_flag once;
  static std::string why;
  std::call_once(once, [] {
    if (torch::cuda::is_available()) return;  // linked in after all (a LibTorch of the user's)
    if (dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* error = dlerror();
      why = std::string("this LibTorch has no CUDA part that loads (") + (error != nullptr ? error : "dlopen failed") + ")";
      return;
    }
    if (!torch::cuda::is_available()) why = "LibTorch's CUDA part loaded, but this machine has no CUDA device";
  });
  return why;
}

void set_cuda_fp32_matmul_tf32(bool tf32) {
  at::globalContext().setFloat32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL,
                                          tf32 ? at::Float32Precision::TF32 : at::Float32Precision::IEEE);
}

void synchronize_device(const std::string& device) {
  const torch::Device d(device);
  if (d.is_cuda()) torch::cuda::synchronize(d.has_index() ? d.index() : -1);
}

}  // namespace rlcpp
