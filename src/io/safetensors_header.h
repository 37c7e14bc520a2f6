// The safetensors header: parsing and validation, independent of LibTorch so it can be fuzzed alone.
// Format: u64 little-endian header length N, N bytes of JSON, then the data buffer. The JSON maps
// each tensor name to {"dtype", "shape", "data_offsets": [begin, end)} relative to the buffer, plus
// an optional "__metadata__" object of strings.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace rlcpp {

enum class StDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

// "F32" → StDType::F32; unknown names give false.
bool parse_st_dtype(std::string_view name, StDType* out);
std::string_view st_dtype_name(StDType dtype);
size_t st_dtype_size(StDType dtype);

struct StTensorInfo {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data buffer, [begin, end)
  uint64_t end = 0;
  int64_t numel() const;
};

struct StHeader {
  std::vector<StTensorInfo> tensors;  // in data-offset order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length: where the data buffer begins in the file
};

// Largest header accepted (the reference implementation's limit).
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parses and validates the first bytes of a safetensors file of `file_size` bytes, of which
// `bytes` holds at least min(file_size, 8 + header length). Every inconsistency (header length
// beyond the file, non-JSON header, unknown dtype, shape/byte-length mismatch, offsets out of
// range or overlapping, duplicate names) throws a UserError naming `label` and the tensor.
StHeader parse_safetensors_header(std::string_view bytes, uint64_t file_size, std::string_view label);

}  // namespace rlcpp
