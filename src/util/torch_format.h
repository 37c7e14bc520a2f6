// fmt support for LibTorch shapes and dtypes, so checks can print `{}` of sizes() directly.
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <fmt/format.h>

template <>
struct fmt::formatter<c10::IntArrayRef> : fmt::formatter<std::string> {
  template <typename Context>
  auto format(c10::IntArrayRef sizes, Context& ctx) const {
    std::string text = "[";
    for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
    return fmt::formatter<std::string>::format(text + "]", ctx);
  }
};

template <>
struct fmt::formatter<c10::ScalarType> : fmt::formatter<std::string> {
  template <typename Context>
  auto format(c10::ScalarType dtype, Context& ctx) const {
    return fmt::formatter<std::string>::format(c10::toString(dtype), ctx);
  }
};
