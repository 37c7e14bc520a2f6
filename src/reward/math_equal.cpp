// The boxed grader's comparison (math_equal.h): both answers normalised (math_normalize.cpp), their
// forms read (answer_forms.h), then values, structures, equations and expressions compared.
#include "reward/math_equal.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "reward/answer_forms.h"
#include "reward/math_expr.h"

namespace rlcpp {

namespace {

using answer_forms::canonical_integer;
using answer_forms::list_items;
using answer_forms::split_top;

constexpr int kMaxDepth = 8;  // nesting of structures (tuples of tuples...)

bool numbers_close(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return false;
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= kMathRelTol * std::max(std::abs(a), std::abs(b)) || (a == 0 && b == 0);
}

std::optional<double> number_of(const std::string& s) {
  auto expr = MathExpr::parse(s);
  if (!expr || !expr->variables().empty()) return std::nullopt;
  const double v = expr->eval();
  if (std::isnan(v)) return std::nullopt;
  return v;
}

// A rounded decimal for a fraction whose decimal never ends ("0.33" for 1/3, "3.3" for 10/3): the
// truth rounded to the decimals the answer gives is the answer. This is Math-Verify's numeric rule
// (both sides rounded to float_rounding decimals, 0.33 == 1/3 at 2) with the answer's own decimals
// as the rounding, within three limits: the answer keeps at least two significant digits of the
// value (0.3 for 1/3 is one, and 0.25 to 0.35 all round to it); the truth has no exact decimal (for
// 1/8 only 0.125 is right); and the truth is a fraction (3.14 for pi stays wrong, as the table
// says). A truncation (0.66 for 2/3) is not a rounding. The truth never lies halfway between two
// roundings (its decimal never ends), so the rounding is unambiguous.
bool rounds_fraction(const std::string& answer, const std::string& truth) {
  const auto decimal = answer_forms::decimal_literal(answer);
  const auto fraction = answer_forms::fraction_literal(truth);
  if (!decimal || !fraction || fraction->numerator == 0 || decimal->n_decimals > 9) return false;
  if (decimal->negative != (fraction->numerator < 0)) return false;
  // |N| and D below 1e9 and 10^decimals at most 1e9: every product below fits in 64 bits.
  const auto numerator = static_cast<uint64_t>(std::abs(fraction->numerator));
  const auto denominator = static_cast<uint64_t>(fraction->denominator);
  const uint64_t g = std::gcd(numerator, denominator), n = numerator / g, d = denominator / g;
  uint64_t odd = d;
  while (odd % 2 == 0) odd /= 2;
  while (odd % 5 == 0) odd /= 5;
  if (odd == 1) return false;  // an exact decimal exists
  uint64_t scale = 1;
  for (int k = 0; k < decimal->n_decimals; ++k) scale *= 10;
  if (n * scale < 10 * d) return false;  // the last digit's unit is over a tenth of the value
  return decimal->mantissa == (2 * n * scale + d) / (2 * d);  // n/d * scale rounded half up
}

// Two expressions in variables are equal when they agree at several random points.
bool expressions_equal(const std::string& a, const std::string& b) {
  auto ea = MathExpr::parse(a), eb = MathExpr::parse(b);
  if (!ea || !eb) return false;
  std::set<char> vars = ea->variables();
  vars.insert(eb->variables().begin(), eb->variables().end());
  if (vars.empty()) return numbers_close(ea->eval(), eb->eval());
  std::mt19937_64 rng(20261130);
  std::uniform_real_distribution<double> pick(0.3, 2.7);  // positive: roots and logs stay real
  // The values must agree, and so must their changes from the first point: a large constant
  // cannot hide a variable term ("2880000 + y" is within 1e-6 of 2880000 for small y).
  int compared = 0;
  std::optional<std::pair<double, double>> first;
  for (int trial = 0; trial < 8; ++trial) {
    std::map<char, double> point;
    for (char v : vars) point[v] = pick(rng);
    const double x = ea->eval(point), y = eb->eval(point);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (!numbers_close(x, y)) return false;
    if (!first) {
      first = {x, y};
    } else if (std::isfinite(x) && std::isfinite(y)) {
      const double dx = x - first->first, dy = y - first->second;
      const double scale = std::max({std::abs(x), std::abs(y), std::abs(first->first), std::abs(first->second)});
      if (std::abs(dx - dy) > 1e-6 * std::max(std::abs(dx), std::abs(dy)) && std::abs(dx - dy) > 1e-12 * scale) {
        return false;
      }
    }
    ++compared;
  }
  return compared >= 3;
}

bool equal_rec(const std::string& answer, const std::string& truth, int depth);

// `a` holds the answer's items and `b` the truth's, so that each pair is compared answer first.
bool lists_equal(const std::vector<std::string>& a, const std::vector<std::string>& b, bool ordered, int depth) {
  if (a.size() != b.size()) return false;
  if (ordered) {
    for (size_t k = 0; k < a.size(); ++k) {
      if (!equal_rec(a[k], b[k], depth + 1)) return false;
    }
    return true;
  }
  std::vector<bool> used(b.size(), false);
  for (const auto& x : a) {
    bool found = false;
    for (size_t k = 0; k < b.size() && !found; ++k) {
      if (!used[k] && equal_rec(x, b[k], depth + 1)) used[k] = found = true;
    }
    if (!found) return false;
  }
  return true;
}

// Two equations with the same solution set: lhs - rhs of one is a constant non-zero multiple of
// the other's at random points ("3x-y=2" and "y=3x-2", "2y=6x-4"; not "x^2=4" and "x=2").
bool same_zero_set(const std::string& a, const std::string& b) {
  auto sa = split_top(a, '='), sb = split_top(b, '=');
  if (sa.size() != 2 || sb.size() != 2) return false;
  auto fa = MathExpr::parse("(" + sa[0] + ")-(" + sa[1] + ")"), fb = MathExpr::parse("(" + sb[0] + ")-(" + sb[1] + ")");
  if (!fa || !fb) return false;
  std::set<char> vars = fa->variables();
  vars.insert(fb->variables().begin(), fb->variables().end());
  if (vars.empty() || fa->variables() != fb->variables()) return false;
  std::mt19937_64 rng(20261201);
  std::uniform_real_distribution<double> pick(-2.7, 2.7);
  std::optional<double> ratio;
  int compared = 0;
  for (int trial = 0; trial < 10; ++trial) {
    std::map<char, double> point;
    for (char v : vars) point[v] = pick(rng);
    const double x = fa->eval(point), y = fb->eval(point);
    if (!std::isfinite(x) || !std::isfinite(y) || std::abs(y) < 1e-9) continue;
    if (!ratio) ratio = x / y;
    if (*ratio == 0 || !numbers_close(x / y, *ratio)) return false;
    ++compared;
  }
  return compared >= 4;
}

// Short letter strings that are words, not products of variables ("no" is not "on").
bool is_english_word(const std::string& s) {
  static const std::set<std::string> words = {"no", "on", "yes", "odd", "not", "and", "or", "ton", "one", "neo",
                                              "top", "pot", "opt", "now", "own", "won", "tea", "eat", "ate", "tie"};
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return words.count(lower) > 0 || s.size() > 4;
}

// Lists of equations ("b=2,c=3"): the same equations in any order, each name with its value.
bool equation_lists_equal(const std::vector<std::string>& a, const std::vector<std::string>& b, int depth) {
  if (a.size() != b.size()) return false;
  std::vector<bool> used(b.size(), false);
  for (const auto& x : a) {
    const size_t ex = x.find('=');
    bool found = false;
    for (size_t k = 0; k < b.size() && !found; ++k) {
      const size_t ey = b[k].find('=');
      if (used[k] || ex == std::string::npos || ey == std::string::npos || x.substr(0, ex) != b[k].substr(0, ey)) continue;
      if (equal_rec(x.substr(ex + 1), b[k].substr(ey + 1), depth + 1)) used[k] = found = true;
    }
    if (!found) return false;
  }
  return true;
}

bool all_equations(const std::vector<std::string>& items) {
  return std::all_of(items.begin(), items.end(), [](const std::string& x) {
    const size_t eq = x.find('=');
    return eq != std::string::npos && x.find('=', eq + 1) == std::string::npos && answer_forms::is_label(x.substr(0, eq));
  });
}

// Labelled values against bare ones (`equations` from the answer when `answer_labelled`). One name's
// values ("x=2, x=3" for "2, 3") match in any order; the parts of a figure ("AB=4, CD=5" for "4, 5")
// each in its place. Other different names ("x=2, y=3") are unknowns of a system: the truth's names
// give the order its values are answered in ("-5, 14/3" answers "x=-5, p=14/3", "14/3, -5" does not),
// but an answer's names do not answer a bare list ("2, 3" may list the solutions of one unknown).
bool labelled_list_equal(const std::vector<std::string>& equations, const std::vector<std::string>& values,
                         bool answer_labelled, int depth) {
  std::vector<std::string> names, rights;
  for (const auto& e : equations) {
    names.push_back(e.substr(0, e.find('=')));
    rights.push_back(e.substr(e.find('=') + 1));
  }
  bool ordered = false;
  if (std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n != names[0]; })) {
    const bool figure = std::all_of(names.begin(), names.end(), answer_forms::names_a_figure_part);
    const bool unknowns = !answer_labelled && std::set<std::string>(names.begin(), names.end()).size() == names.size();
    if (!figure && !unknowns) return false;
    ordered = true;
  }
  return answer_labelled ? lists_equal(rights, values, ordered, depth) : lists_equal(values, rights, ordered, depth);
}

// A chain's members without variables all have the value of its last member (a chain that says
// 5+5+2 = 11 is wrong whatever it ends in). An empty chain agrees.
bool chain_agrees(const std::vector<std::string>& members, int depth) {
  for (size_t k = 0; k + 1 < members.size(); ++k) {
    if (number_of(normalize_math_answer(members[k])) && !equal_rec(members.back(), members[k], depth + 1)) return false;
  }
  return true;
}

bool equal_rec(const std::string& answer, const std::string& truth, int depth) {
  if (depth > kMaxDepth) return false;
  std::string a = normalize_math_answer(answer), b = normalize_math_answer(truth);
  if (a.empty() || b.empty()) return false;
  if (a == b) return true;
  // Equations of different names are the labelled tuple of a system's solution: groups of them
  // ("p=5,q=2;p=7,q=2" is "(p,q)=(5,2),(p,q)=(7,2)") always, one group ("x=2,y=3") against a tuple.
  if (auto tuples = answer_forms::labelled_tuples(a)) a = *tuples;
  if (auto tuples = answer_forms::labelled_tuples(b)) b = *tuples;
  auto is_tuple = [](const std::string& s) {
    const auto st = answer_forms::structure_of(s);
    return st && st->open == '(';
  };
  if (is_tuple(a)) {
    if (auto tuple = answer_forms::labelled_tuple(b)) b = *tuple;
  } else if (is_tuple(b)) {
    if (auto tuple = answer_forms::labelled_tuple(a)) a = *tuple;
  }
  // Words compare case-insensitively ("Yes" vs "yes"); single letters do not (they may be variables).
  auto is_word = [](const std::string& s) {
    return s.size() > 1 && std::all_of(s.begin(), s.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
  };
  if (is_word(a) && is_word(b)) {
    if (std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
          return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
        })) {
      return true;
    }
    // Unequal words are unequal, but "pq" and "qp" are products of variables.
    if (is_english_word(a) || is_english_word(b)) return false;
  }
  // Matrices: the same shape, entries equal.
  auto ma = answer_forms::matrix_of(a), mb = answer_forms::matrix_of(b);
  if (ma || mb) {
    if (!ma || !mb || ma->size() != mb->size() || (*ma)[0].size() != (*mb)[0].size()) return false;
    for (size_t r = 0; r < ma->size(); ++r) {
      if (!lists_equal((*ma)[r], (*mb)[r], true, depth)) return false;
    }
    return true;
  }
  // Inequalities and memberships as intervals ("1<=y<=4" is "y\in[1,4]" is "[1,4]", "-x>-1" is "x<1",
  // "1<=|z|<=2" is "[-2,-1]\cup[1,2]"); two of them bound the same variable ("x<1" is not "y<1", nor
  // "0<f(x)<1" "0<x<1").
  std::string var_a, var_b;
  auto va = answer_forms::interval_of(a, &var_a), vb = answer_forms::interval_of(b, &var_b);
  if (va && vb && var_a != var_b) return false;
  if (va || vb) return equal_rec(va ? *va : a, vb ? *vb : b, depth + 1);
  // Unions: the same intervals or sets, in any order.
  const auto ua = answer_forms::union_parts(a), ub = answer_forms::union_parts(b);
  if (ua.size() > 1 || ub.size() > 1) return lists_equal(ua, ub, false, depth);
  // Several equations ("b=2, c=3"): the same names with the same values, in any order; against bare
  // values, as labelled_list_equal says.
  const auto la = list_items(a), lb = list_items(b);
  if (la.size() > 1 && lb.size() > 1 && (all_equations(la) || all_equations(lb))) {
    if (all_equations(la) && all_equations(lb)) return equation_lists_equal(la, lb, depth);
    return all_equations(la) ? labelled_list_equal(la, lb, true, depth) : labelled_list_equal(lb, la, false, depth);
  }
  // ±: two values, in any order.
  auto pa = answer_forms::expand_pm(a), pb = answer_forms::expand_pm(b);
  if (!pa.empty() || !pb.empty()) {
    if (pa.empty()) pa = la;
    if (pb.empty()) {
      auto sb = answer_forms::structure_of(b);
      pb = sb ? sb->items : lb;
    }
    return lists_equal(pa, pb, false, depth);
  }
  // A chain of equalities ("x = 5+5+1 = 11") stands for its last member, when it agrees.
  const auto chain_a = answer_forms::chain_members(a), chain_b = answer_forms::chain_members(b);
  if (!chain_a.empty() || !chain_b.empty()) {
    if (!chain_agrees(chain_a, depth) || !chain_agrees(chain_b, depth)) return false;
    return equal_rec(chain_a.empty() ? a : chain_a.back(), chain_b.empty() ? b : chain_b.back(), depth + 1);
  }
  // Equations. Against a value, an equation counts only when its left side labels that value
  // ("y=3x-2" is answered by "3x-2", "(p,q)=(3,2)" by "(3,2)", "|AB|=1" by "1"; "p+2q=4" is not
  // answered by "4"). Two equations: sides pairwise, or the same line or surface ("3x-y=2" and "y=3x-2").
  const size_t eq_a = a.find('='), eq_b = b.find('=');
  const bool ea = eq_a != std::string::npos, eb = eq_b != std::string::npos;
  if (ea != eb) {
    const std::string& equation = ea ? a : b;
    const size_t eq = ea ? eq_a : eq_b;
    if (equation.find('=', eq + 1) != std::string::npos || !answer_forms::is_label(equation.substr(0, eq))) {
      return false;
    }
    return equal_rec(a.substr(a.rfind('=') + 1), b.substr(b.rfind('=') + 1), depth + 1);
  }
  if (ea && eb) {
    auto sa = split_top(a, '='), sb = split_top(b, '=');
    if (sa.size() == sb.size() && lists_equal(sa, sb, true, depth)) return true;
    return same_zero_set(a, b);
  }
  // Tuples and intervals: brackets must match and items agree in order; sets and bare lists in any order.
  auto sa = answer_forms::structure_of(a), sb = answer_forms::structure_of(b);
  if (sa || sb) {
    if (!sa || !sb) return false;
    const bool set_a = sa->open == '{' || sa->open == 0, set_b = sb->open == '{' || sb->open == 0;
    if (set_a && set_b) return lists_equal(sa->items, sb->items, false, depth);
    if (sa->open != sb->open || sa->close != sb->close) return false;
    return lists_equal(sa->items, sb->items, true, depth);
  }
  // Integers exactly (1000001 is not 1000000, however close); other values within the tolerance or
  // as a rounded decimal of a fraction; then expressions in variables.
  const std::string ia = canonical_integer(a), ib = canonical_integer(b);
  if (!ia.empty() && !ib.empty()) return ia == ib;
  if (auto x = number_of(a)) {
    if (auto y = number_of(b)) return numbers_close(*x, *y) || rounds_fraction(a, b);
  }
  return expressions_equal(a, b);
}

bool mentions_percent(const std::string& x) {
  for (std::string_view mark : {"%", "percent", "per cent"}) {
    if (x.find(mark) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

bool math_equal(std::string_view answer, std::string_view ground_truth) {
  if (answer.size() > answer_forms::kMaxInput || ground_truth.size() > answer_forms::kMaxInput) return false;
  const std::string a(answer), b(ground_truth);
  if (equal_rec(a, b, 0)) return true;
  // A percentage against a plain number: "50%" or "50 percent" for 0.5 (the bare 50 already
  // matched 50 above).
  if (mentions_percent(a) && !mentions_percent(b)) {
    auto x = number_of(normalize_math_answer(a)), y = number_of(normalize_math_answer(b));
    if (x && y) return numbers_close(*x / 100.0, *y);
  }
  return false;
}

}  // namespace rlcpp
