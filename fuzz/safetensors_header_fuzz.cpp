// libFuzzer target for the safetensors header parser: any byte string must either parse into a
// consistent header or throw UserError — never crash, hang or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/safetensors_header.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto header = rlcpp::parse_safetensors_header(bytes, size, "fuzz");
    const uint64_t data_size = size - header.data_start;
    for (const auto& t : header.tensors) {
      if (t.begin > t.end || t.end > data_size) __builtin_trap();  // the parser promised these
    }
  } catch (const rlcpp::UserError&) {
  }
  return 0;
}
