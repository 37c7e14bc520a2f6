// Whether an extracted answer equals the ground truth the way a careful human grader would decide:
// Hendrycks-MATH normalisation (math_normalize.cpp), then value equality (integers with separators,
// decimals, fractions and their rounded decimals, mixed numbers, percentages, roots, pi, scientific
// notation), structures (tuples and intervals element-wise with their brackets, sets, lists and
// unions in any order whatever their braces or separators, \pm as two values, inequalities as
// intervals or unions, equations by the right-hand side of a label or the last member of a chain,
// a system's unknowns as labelled tuples, lines and surfaces by their zero sets), and expressions in
// variables compared at random points. The forms are read by answer_forms.h. Everything is bounded:
// inputs over 2,000 bytes are unequal, recursion is depth-limited.
#pragma once

#include <string>
#include <string_view>

namespace rlcpp {

// The normalised form (MATH's strip_string plus \text{} unwrapping, thousands separators, mixed
// numbers, percentages in words).
std::string normalize_math_answer(std::string_view answer);

// Numbers agree when |a - b| <= kMathRelTol * max(|a|, |b|): answers are exact values written with
// at most a few significant digits, so 1e-6 absorbs float rounding of their evaluation and still
// tells 3.14 from pi (relative difference 5e-4). A decimal rounded from a fraction (0.333 for 1/3,
// 1e-3) is a rule of its own: the fraction rounded to the decimal's digits.
constexpr double kMathRelTol = 1e-6;

// Not symmetric in one rule: a rounded decimal answers an exact fraction, never the other way round.
bool math_equal(std::string_view answer, std::string_view ground_truth);

}  // namespace rlcpp
