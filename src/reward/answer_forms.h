// The forms a normalised math answer takes, read from its text, for the boxed grader (math_equal):
// number literals, top-level lists and bracketed structures, matrices, ± pairs, inequalities as
// intervals, the labels an equation's left side gives its value, and chains of equalities. Pure
// functions of strings at most kMaxInput bytes long; none evaluates anything (MathExpr does).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlcpp::answer_forms {

constexpr size_t kMaxInput = 2000;  // bytes; longer answers are unequal to everything

bool all_digits(std::string_view s);

// "-007" → "-7", "+0" → "0"; "" when `s` is not an integer literal.
std::string canonical_integer(std::string_view s);

// A decimal literal with a fractional part, "[-]digits.digits": "-0.33" → {true, 33, 2}.
// nullopt for integers, for more than 18 digits in all, and for anything else.
struct Decimal {
  bool negative = false;
  uint64_t mantissa = 0;  // the digits without the point
  int n_decimals = 0;     // digits after the point, >= 1
};
std::optional<Decimal> decimal_literal(std::string_view s);

// "\frac{N}{D}", "-\frac{N}{D}" or "\frac{-N}{D}" with integer N, D (normalisation writes 1/3, \frac13
// and mixed numbers this way), each at most 9 digits; nullopt otherwise or when D is 0.
struct Fraction {
  int64_t numerator = 0;
  int64_t denominator = 1;  // > 0
};
std::optional<Fraction> fraction_literal(std::string_view s);

// Splits at `sep` outside (), [] and {}.
std::vector<std::string> split_top(const std::string& s, char sep = ',');

// The items of a list: split at top-level ';' when there is one ("-12;-11"), else at ','.
std::vector<std::string> list_items(const std::string& s);

// A tuple, interval, set or bare list of at least two items: "(1,2)", "[0,1)", "\{1,2\}" and
// "{1,2}" (sets), "1,2" and "-12;-11" (bare lists, open == 0). "(1,2),(3,4)" is a bare list of
// tuples: brackets count only when one pair encloses the whole string.
struct Structure {
  char open = 0, close = 0;  // brackets, 0 for a bare list
  std::vector<std::string> items;
};
std::optional<Structure> structure_of(const std::string& s);

// A matrix written \matrix{a,b;c,d} by normalisation: its rows of entries, all of one length.
std::optional<std::vector<std::vector<std::string>>> matrix_of(const std::string& s);

// "a\pmb" → {"a+b", "a-(b)"}; empty when there is no \pm or more than one.
std::vector<std::string> expand_pm(const std::string& s);

// The interval an inequality or a membership describes, in interval notation: "1<=y<=4" → "[1,4]",
// "7>=y" and "y<=7" → "(-\infty,7]", "y\in[1,4]" → "[1,4]", and in the negated variable
// "-x>-1" → "(-\infty,1)", "-3<-x<1" → "(-1,3)". The variable is a name (names_a_value: "y", "x_1",
// "f(x)"; the negated variable one letter) or a name's absolute value, whose bounds describe a
// union: "1<=|z|<=2" → "[-2,-1]\cup[1,2]", "|z|<2" → "(-2,2)", "|z|>1" → "(-\infty,-1)\cup(1,\infty)".
// `variable`, when given, receives the name ("z" for |z|, "y" for y\in...). nullopt otherwise.
std::optional<std::string> interval_of(const std::string& s, std::string* variable = nullptr);

// The parts of a union split at top-level "\cup": "[0,1)\cup(2,3]" → {"[0,1)", "(2,3]"}; one part
// when there is no union.
std::vector<std::string> union_parts(const std::string& s);

// Equations of different names as one labelled tuple: "p=5,q=2" → "(p,q)=(5,2)"; nullopt unless
// every top-level item is name=value (names_a_value) and there are two or more names, all different.
std::optional<std::string> labelled_tuple(const std::string& s);

// Groups of those separated by ';', each naming the same unknowns in the same order (the solutions
// of a system), as a list of labelled tuples: "p=5,q=2;p=7,q=2" → "(p,q)=(5,2),(p,q)=(7,2)";
// nullopt otherwise.
std::optional<std::string> labelled_tuples(const std::string& s);

// A name for a value: a letter with an optional subscript or primes ("y", "x_1", "a_{n}", "f'") or
// a function of letters ("f(x)", "g(x,y)").
bool names_a_value(const std::string& s);

// A length or angle of a figure: two to four capital letters ("AB", "ABC"), bare or as |AB|,
// \overline{AB}, \angleABC or m\angleABC, and one letter in those wrappers ("\angleA", "|A|");
// normalisation has removed the spaces.
bool names_a_figure_part(const std::string& s);

// The left side of an equation that only labels its right side: a name (above), a figure's part, a
// tuple of those ("(p,q)") or a ratio of those ("V_1:V_2"). "p+2q" and "|x-1|" are not labels.
bool is_label(const std::string& s);

// The members of a chain of equalities "x=5+5+1=11": at least three, at most 8, none empty, with no
// < or > anywhere and no top-level list separator ("AB=4,CD=5" is a list); empty for anything else.
std::vector<std::string> chain_members(const std::string& s);

}  // namespace rlcpp::answer_forms
