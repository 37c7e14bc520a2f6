// A test's choice of kernel arithmetic for bf16 weights (kernels/matmul.h).
#pragma once

#include "kernels/matmul.h"

namespace rlcpp::testing {

// bf16 weights on the widening kernels (x in fp32) or the CPU's bf16 dot products (x rounded to
// bf16; kernels/matmul.h) while in scope; the setting the process started with after it.
struct Bf16DotProducts {
  bool before = kernels::bf16_dot_products();
  explicit Bf16DotProducts(bool on) { kernels::use_bf16_dot_products(on); }
  ~Bf16DotProducts() { kernels::use_bf16_dot_products(before); }
  Bf16DotProducts(const Bf16DotProducts&) = delete;
  Bf16DotProducts& operator=(const Bf16DotProducts&) = delete;
};

}  // namespace rlcpp::testing
