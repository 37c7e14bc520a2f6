// A test's choice of kernel arithmetic for narrow weights (kernels/matmul.h).
#pragma once

#include "kernels/matmul.h"

namespace rlcpp::testing {

// Narrow weights on the widening kernels (x in fp32) or the CPU's dot-product instructions (x
// rounded to bf16, or quantized to int16; kernels/matmul.h) while in scope; the setting before after it.
struct DotInstructions {
  explicit DotInstructions(bool on) : before(kernels::use_dot_instructions(on)) {}
  ~DotInstructions() { kernels::use_dot_instructions(before); }
  bool before;
  DotInstructions(const DotInstructions&) = delete;
  DotInstructions& operator=(const DotInstructions&) = delete;
};

}  // namespace rlcpp::testing
