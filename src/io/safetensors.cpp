#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "util/error.h"
#include "util/torch_format.h"

namespace rlcpp {

torch::ScalarType st_dtype_to_torch(StDType dtype) {
  switch (dtype) {
    case StDType::F64: return torch::kFloat64;
    case StDType::F32: return torch::kFloat32;
    case StDType::F16: return torch::kFloat16;
    case StDType::BF16: return torch::kBFloat16;
    case StDType::I64: return torch::kInt64;
    case StDType::I32: return torch::kInt32;
    case StDType::I16: return torch::kInt16;
    case StDType::I8: return torch::kInt8;
    case StDType::U8: return torch::kUInt8;
    case StDType::BOOL: return torch::kBool;
  }
  RLCPP_CHECK(false, "unknown StDType {}", static_cast<int>(dtype));
}

StDType torch_to_st_dtype(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat64: return StDType::F64;
    case torch::kFloat32: return StDType::F32;
    case torch::kFloat16: return StDType::F16;
    case torch::kBFloat16: return StDType::BF16;
    case torch::kInt64: return StDType::I64;
    case torch::kInt32: return StDType::I32;
    case torch::kInt16: return StDType::I16;
    case torch::kInt8: return StDType::I8;
    case torch::kUInt8: return StDType::U8;
    case torch::kBool: return StDType::BOOL;
    default: RLCPP_CHECK(false, "dtype {} cannot be stored in safetensors", c10::toString(dtype));
  }
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->self_ = file;
  file->path_ = path;
  const std::string label = path.string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_user_error("cannot open safetensors file '{}': {}", label, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw_user_error("cannot stat '{}': {}", label, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_user_error("'{}' is not a regular file", label);
  }
  file->map_size_ = static_cast<size_t>(st.st_size);
  if (file->map_size_ > 0) {
    // Private + writable: a tensor view written to gets its own copy of the page, never the file.
    void* map = ::mmap(nullptr, file->map_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw_user_error("cannot map '{}': {}", label, std::strerror(err));
    }
    file->map_ = map;
  }
  ::close(fd);
  std::string_view bytes(static_cast<const char*>(file->map_), file->map_size_);
  file->header_ = parse_safetensors_header(bytes, file->map_size_, label);
  for (size_t i = 0; i < file->header_.tensors.size(); ++i) file->index_[file->header_.tensors[i].name] = i;
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

const StTensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

torch::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const StTensorInfo* info = find(name);
  if (info == nullptr) throw_user_error("{}: no tensor named \"{}\"", path_.string(), name);
  const auto dtype = st_dtype_to_torch(info->dtype);
  auto options = torch::TensorOptions().dtype(dtype).device(torch::kCPU);
  if (info->numel() == 0) return torch::empty(info->shape, options);
  char* data = static_cast<char*>(map_) + header_.data_start + info->begin;
  const size_t elem = st_dtype_size(info->dtype);
  if (reinterpret_cast<uintptr_t>(data) % elem != 0) {
    // Misaligned for its element type (a writer that did not pad the header): copy out.
    auto out = torch::empty(info->shape, options);
    std::memcpy(out.data_ptr(), data, info->end - info->begin);
    return out;
  }
  auto keep_alive = self_.lock();
  return torch::from_blob(data, info->shape, [keep_alive](void*) {}, options);
}

void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::vector<torch::Tensor> contiguous;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    RLCPP_CHECK(names.insert(name).second, "duplicate tensor name \"{}\" when writing {}", name, path.string());
    auto cpu = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t nbytes = static_cast<uint64_t>(cpu.numel()) * cpu.element_size();
    header[name] = {{"dtype", std::string(st_dtype_name(torch_to_st_dtype(cpu.scalar_type())))},
                    {"shape", cpu.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    contiguous.push_back(std::move(cpu));
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const uint64_t header_len = header_text.size();

  std::filesystem::path tmp = path;
  tmp += fmt::format(".tmp-{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw_user_error("cannot create '{}': {}", tmp.string(), std::strerror(errno));
    char len_bytes[8];
    for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>((header_len >> (8 * i)) & 0xff);
    out.write(len_bytes, 8);
    out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
    for (const auto& t : contiguous) {
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * t.element_size()));
    }
    out.flush();
    if (!out) throw_user_error("cannot write '{}' (disk full?)", tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw_user_error("cannot rename '{}' to '{}': {}", tmp.string(), path.string(), ec.message());
}

}  // namespace rlcpp
