// Whether an extracted answer equals the ground truth the way a careful human grader would decide:
// Hendrycks-MATH normalisation, then value equality (integers with separators, decimals,
// fractions, mixed numbers, percentages, roots, pi, scientific notation), structures (tuples and
// intervals element-wise with their brackets, sets and lists in any order, \pm as two values,
// equations by their right-hand side), and expressions in variables compared at random points.
// Everything is bounded: inputs over 2,000 bytes are unequal, recursion is depth-limited.
#pragma once

#include <string>
#include <string_view>

namespace rlcpp {

// The normalised form (MATH's strip_string plus \text{} unwrapping, thousands separators, mixed numbers).
std::string normalize_math_answer(std::string_view answer);

// Numbers agree when |a - b| <= kMathRelTol * max(|a|, |b|): answers are exact values written with
// at most a few significant digits, so 1e-6 absorbs float rounding of their evaluation and still
// tells 3.14 from pi (relative difference 5e-4) and 0.333 from 1/3 (1e-3).
constexpr double kMathRelTol = 1e-6;

bool math_equal(std::string_view answer, std::string_view ground_truth);

}  // namespace rlcpp
