// libFuzzer target for run files: YAML text to the JSON value the settings read. Invalid YAML is a
// UserError naming the line; nothing may crash or recurse without bound.
#include <cstddef>
#include <cstdint>
#include <string>

#include "util/error.h"
#include "util/yaml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    rlcpp::parse_yaml(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
  } catch (const rlcpp::UserError&) {
  }
  return 0;
}
