#include "io/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "util/error.h"

namespace rlcpp {

namespace {

struct DTypeEntry {
  StDType dtype;
  std::string_view name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {StDType::F64, "F64", 8}, {StDType::F32, "F32", 4}, {StDType::F16, "F16", 2},
    {StDType::BF16, "BF16", 2}, {StDType::I64, "I64", 8}, {StDType::I32, "I32", 4},
    {StDType::I16, "I16", 2}, {StDType::I8, "I8", 1}, {StDType::U8, "U8", 1},
    {StDType::BOOL, "BOOL", 1},
};

// Reads an unsigned integer that must fit in int64/uint64; rejects floats, negatives and strings.
bool read_uint(const nlohmann::json& value, uint64_t* out) {
  if (!value.is_number_unsigned()) return false;
  *out = value.get<uint64_t>();
  return true;
}

}  // namespace

bool parse_st_dtype(std::string_view name, StDType* out) {
  for (const auto& entry : kDTypes) {
    if (entry.name == name) {
      *out = entry.dtype;
      return true;
    }
  }
  return false;
}

std::string_view st_dtype_name(StDType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  return "?";
}

size_t st_dtype_size(StDType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry.size;
  }
  return 0;
}

int64_t StTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

StHeader parse_safetensors_header(std::string_view bytes, uint64_t file_size, std::string_view label) {
  if (file_size < 8 || bytes.size() < 8) {
    throw_user_error("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length",
                     label, file_size);
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[i]);
  if (header_len > kMaxSafetensorsHeaderBytes) {
    throw_user_error("{}: header length {} exceeds the limit of {} bytes (corrupt or not a safetensors file)",
                     label, header_len, kMaxSafetensorsHeaderBytes);
  }
  if (header_len > file_size - 8) {
    throw_user_error("{}: header length {} runs past the end of the file ({} bytes)", label, header_len,
                     file_size);
  }
  if (bytes.size() < 8 + header_len) {
    throw_user_error("{}: truncated read of the header ({} of {} bytes)", label, bytes.size(), 8 + header_len);
  }
  const std::string_view text = bytes.substr(8, header_len);
  const uint64_t data_size = file_size - 8 - header_len;

  // Duplicate top-level keys are legal JSON that nlohmann would silently collapse: catch them while parsing.
  std::set<std::string> seen;
  std::string duplicate;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1) {
      const std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::exception& e) {
    throw_user_error("{}: header is not valid JSON: {}", label, e.what());
  }
  if (!duplicate.empty()) throw_user_error("{}: tensor \"{}\" appears twice in the header", label, duplicate);
  if (!header.is_object()) throw_user_error("{}: header is JSON but not an object", label);

  StHeader result;
  result.data_start = 8 + header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& value = it.value();
    if (name == "__metadata__") {
      if (!value.is_object()) throw_user_error("{}: __metadata__ must be an object of strings", label);
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (!m.value().is_string()) {
          throw_user_error("{}: __metadata__ entry \"{}\" must be a string", label, m.key());
        }
        result.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!value.is_object()) throw_user_error("{}: tensor \"{}\": entry is not an object", label, name);
    StTensorInfo info;
    info.name = name;
    auto dtype = value.find("dtype");
    if (dtype == value.end() || !dtype->is_string()) {
      throw_user_error("{}: tensor \"{}\": missing or non-string \"dtype\"", label, name);
    }
    if (!parse_st_dtype(dtype->get<std::string>(), &info.dtype)) {
      throw_user_error("{}: tensor \"{}\": unsupported dtype \"{}\" (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)",
                       label, name, dtype->get<std::string>());
    }
    auto shape = value.find("shape");
    if (shape == value.end() || !shape->is_array()) {
      throw_user_error("{}: tensor \"{}\": missing or non-array \"shape\"", label, name);
    }
    // numel is bounded by the data size, so overflow is checked against that bound as we go.
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& dim : *shape) {
      uint64_t d = 0;
      if (!read_uint(dim, &d) || d > static_cast<uint64_t>(INT64_MAX)) {
        throw_user_error("{}: tensor \"{}\": shape {} has a dimension that is not a non-negative integer", label,
                         name, shape->dump());
      }
      info.shape.push_back(static_cast<int64_t>(d));
      if (d != 0 && numel > UINT64_MAX / d) overflow = true;
      numel *= d;
    }
    auto offsets = value.find("data_offsets");
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
        !read_uint((*offsets)[0], &info.begin) || !read_uint((*offsets)[1], &info.end)) {
      throw_user_error("{}: tensor \"{}\": \"data_offsets\" must be [begin, end] of non-negative integers", label,
                       name);
    }
    if (info.begin > info.end) {
      throw_user_error("{}: tensor \"{}\": data_offsets [{}, {}] end before they begin", label, name, info.begin,
                       info.end);
    }
    if (info.end > data_size) {
      throw_user_error("{}: tensor \"{}\": data_offsets [{}, {}] run past the data buffer ({} bytes)", label, name,
                       info.begin, info.end, data_size);
    }
    const uint64_t elem = st_dtype_size(info.dtype);
    if (overflow || numel > UINT64_MAX / elem || numel * elem != info.end - info.begin) {
      throw_user_error("{}: tensor \"{}\": dtype {} and shape {} need {} bytes but data_offsets [{}, {}] hold {}",
                       label, name, st_dtype_name(info.dtype), shape->dump(),
                       overflow ? std::string("more than 2^64") : std::to_string(numel * elem), info.begin, info.end,
                       info.end - info.begin);
    }
    result.tensors.push_back(std::move(info));
  }
  std::sort(result.tensors.begin(), result.tensors.end(), [](const StTensorInfo& a, const StTensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < result.tensors.size(); ++i) {
    const auto& prev = result.tensors[i - 1];
    const auto& cur = result.tensors[i];
    if (cur.begin < prev.end) {
      throw_user_error("{}: tensors \"{}\" [{}, {}] and \"{}\" [{}, {}] overlap in the data buffer", label, prev.name,
                       prev.begin, prev.end, cur.name, cur.begin, cur.end);
    }
  }
  return result;
}

}  // namespace rlcpp
