// comm/nccl.h: the plugin librlcpp_nccl.so (src/cuda/nccl_communicator.cpp), found beside the program.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>

#include "comm/nccl.h"
#include "util/cuda_backend.h"
#include "util/error.h"

namespace rlcpp {

namespace {

// The plugin's one entry point (extern "C", so dlsym finds it by this name): 0 and the communicator
// in `out`, or 1 and why not in `error`.
using Create = int (*)(const std::shared_ptr<Communicator>* bootstrap, int device_index,
                       std::shared_ptr<Communicator>* out, std::string* error);

}  // namespace

std::string nccl_plugin_path() {
  if (const char* path = std::getenv("RLCPP_NCCL_PLUGIN"); path != nullptr && *path != '\0') return path;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ((ec ? std::filesystem::path(".") : exe.parent_path()) / "librlcpp_nccl.so").string();
}

std::shared_ptr<Communicator> nccl_communicator(std::shared_ptr<Communicator> bootstrap, int device_index) {
  static std::once_flag once;
  static Create create = nullptr;
  static std::string why;
  std::call_once(once, [] {
    load_cuda_backend();  // LibTorch's CUDA part registered; whether there is a device, the plugin says
    const std::string path = nccl_plugin_path();
    void* plugin = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (plugin == nullptr) {
      const char* error = dlerror();
      why = fmt::format("the NCCL plugin {} does not load ({}); it is built where CMake finds NCCL (the torch "
                        "wheel's nvidia-nccl)", path, error != nullptr ? error : "dlopen failed");
      return;
    }
    create = reinterpret_cast<Create>(dlsym(plugin, "rlcpp_nccl_create"));
    if (create == nullptr) why = fmt::format("{} has no rlcpp_nccl_create: rebuild it with this rlcpp", path);
  });
  if (create == nullptr) throw_user_error("NCCL communicator: {}", why);
  std::shared_ptr<Communicator> out;
  std::string error;
  if (create(&bootstrap, device_index, &out, &error) != 0) throw_user_error("NCCL communicator: {}", error);
  return out;
}

}  // namespace rlcpp
