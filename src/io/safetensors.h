// safetensors files as LibTorch tensors: a memory-mapped reader (tensors are zero-copy views of the
// mapping, copy-on-write so writing to one never touches the file) and an atomic writer.
#pragma once

#include <torch/types.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors_header.h"

namespace rlcpp {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

torch::ScalarType st_dtype_to_torch(StDType dtype);
StDType torch_to_st_dtype(torch::ScalarType dtype);  // a type safetensors cannot hold is an InternalError

class SafetensorsFile {
 public:
  // Maps and validates `path`; any corruption is a UserError naming the file and the tensor.
  static std::shared_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<StTensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const StTensorInfo* find(const std::string& name) const;

  // A CPU tensor viewing the mapped bytes; it keeps the mapping alive. Unknown names are a UserError.
  torch::Tensor tensor(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  StHeader header_;
  std::map<std::string, size_t> index_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::weak_ptr<SafetensorsFile> self_;
};

// Writes tensors (any device, contiguous or not) to `path` atomically; names must be unique.
// Tensors are laid out in the given order; the header is padded to 8 bytes as the reference does.
void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace rlcpp
