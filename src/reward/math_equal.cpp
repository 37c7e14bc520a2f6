#include "reward/math_equal.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <random>
#include <vector>

#include "reward/math_expr.h"

namespace rlcpp {

namespace {

constexpr size_t kMaxInput = 2000;
constexpr int kMaxDepth = 8;  // nesting of structures (tuples of tuples...)

void replace_all(std::string* s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, at + to.size())) {
    s->replace(at, from.size(), to);
  }
}

// "\cmd{content}" → "content" for every occurrence (braces matched).
void unwrap_command(std::string* s, std::string_view command) {
  for (size_t at = s->find(command); at != std::string::npos; at = s->find(command, at)) {
    size_t open = at + command.size();
    if (open >= s->size() || (*s)[open] != '{') {
      at += command.size();
      continue;
    }
    int depth = 0;
    size_t close = std::string::npos;
    for (size_t j = open; j < s->size(); ++j) {
      if ((*s)[j] == '{') ++depth;
      if ((*s)[j] == '}' && --depth == 0) {
        close = j;
        break;
      }
    }
    if (close == std::string::npos) return;
    *s = s->substr(0, at) + s->substr(open + 1, close - open - 1) + s->substr(close + 1);
  }
}

// \frac12 → \frac{1}{2}, \frac1{x} → \frac{1}{x} (MATH's _fix_fracs).
std::string fix_fracs(const std::string& s) {
  std::string out;
  size_t k = 0;
  while (k < s.size()) {
    if (s.compare(k, 5, "\\frac") == 0) {
      out += "\\frac";
      k += 5;
      for (int arg = 0; arg < 2 && k < s.size(); ++arg) {
        if (s[k] == '{') {
          int depth = 0;
          size_t j = k;
          for (; j < s.size(); ++j) {
            if (s[j] == '{') ++depth;
            if (s[j] == '}' && --depth == 0) break;
          }
          out += s.substr(k, j - k + 1);
          k = j + 1;
        } else {
          out += std::string("{") + s[k] + "}";
          ++k;
        }
      }
    } else {
      out += s[k++];
    }
  }
  return out;
}

// \sqrt3 → \sqrt{3} (MATH's _fix_sqrt).
std::string fix_sqrt(const std::string& s) {
  std::string out;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s.compare(k, 5, "\\sqrt") == 0 && k + 5 < s.size() && s[k + 5] != '{' && s[k + 5] != '[' && s[k + 5] != ' ') {
      out += std::string("\\sqrt{") + s[k + 5] + "}";
      k += 5;
    } else {
      out += s[k];
    }
  }
  return out;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// "-007" → "-7", "+0" → "0"; "" when `s` is not an integer literal.
std::string canonical_integer(std::string_view s) {
  std::string sign;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    if (s[0] == '-') sign = "-";
    s.remove_prefix(1);
  }
  if (!all_digits(s)) return "";
  while (s.size() > 1 && s[0] == '0') s.remove_prefix(1);
  return s == "0" ? "0" : sign + std::string(s);
}

// Hand-written matchers (no std::regex: libstdc++'s recurses per character).
// "1,234,567" or "-12,345.5": thousands groups of three.
bool is_thousands(std::string_view s) {
  size_t k = s.size() > 0 && s[0] == '-' ? 1 : 0;
  size_t dot = s.find('.');
  std::string_view whole = s.substr(k, dot == std::string_view::npos ? std::string_view::npos : dot - k);
  if (dot != std::string_view::npos && !all_digits(s.substr(dot + 1))) return false;
  const size_t first = whole.find(',');
  if (first == std::string_view::npos || first == 0 || first > 3 || !all_digits(whole.substr(0, first))) return false;
  for (size_t at = first; at < whole.size(); at += 4) {
    if (whole[at] != ',' || at + 4 > whole.size() || !all_digits(whole.substr(at + 1, 3))) return false;
  }
  return true;
}

// "[-]W<sep>N/D" with sep a run of spaces (text) or "\frac{N}{D}" (LaTeX): the improper fraction, or "".
std::string mixed_number(std::string_view s) {
  size_t k = 0;
  while (k < s.size() && s[k] == ' ') ++k;
  std::string sign;
  if (k < s.size() && s[k] == '-') {
    sign = "-";
    ++k;
  }
  size_t w = k;
  while (w < s.size() && std::isdigit(static_cast<unsigned char>(s[w]))) ++w;
  if (w == k || w - k > 9) return "";
  const long long whole = std::stoll(std::string(s.substr(k, w - k)));
  std::string_view rest = s.substr(w);
  std::string num, den;
  if (rest.rfind("\\frac{", 0) == 0) {
    const size_t close = rest.find('}');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != '{' || rest.back() != '}') return "";
    num = std::string(rest.substr(6, close - 6));
    den = std::string(rest.substr(close + 2, rest.size() - close - 3));
  } else {
    size_t sp = 0;
    while (sp < rest.size() && rest[sp] == ' ') ++sp;
    if (sp == 0) return "";
    rest = rest.substr(sp);
    while (!rest.empty() && rest.back() == ' ') rest.remove_suffix(1);
    const size_t slash = rest.find('/');
    if (slash == std::string_view::npos) return "";
    num = std::string(rest.substr(0, slash));
    den = std::string(rest.substr(slash + 1));
  }
  if (!all_digits(num) || !all_digits(den) || num.size() > 9 || den.size() > 9) return "";
  const long long n = std::stoll(num), d = std::stoll(den);
  if (d == 0) return "";
  return sign + "\\frac{" + std::to_string(whole * d + n) + "}{" + std::to_string(d) + "}";
}

// Splits at top-level commas (not inside (), [], {}).
std::vector<std::string> split_top(const std::string& s, char sep = ',') {
  std::vector<std::string> parts;
  int depth = 0;
  std::string cur;
  for (size_t k = 0; k < s.size(); ++k) {
    const char c = s[k];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (c == sep && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  return parts;
}

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

// "a\pmb" → {"a+b", "a-b"}; empty when there is no \pm.
std::vector<std::string> expand_pm(const std::string& s) {
  const size_t at = s.find("\\pm");
  if (at == std::string::npos || s.find("\\pm", at + 3) != std::string::npos) return {};
  const std::string left = s.substr(0, at), right = s.substr(at + 3);
  if (left.empty()) return {right, "-(" + right + ")"};
  return {left + "+" + right, left + "-(" + right + ")"};
}

struct Structure {
  char open = 0, close = 0;  // brackets, 0 for a bare list
  std::vector<std::string> items;
};

std::optional<Structure> structure_of(const std::string& s) {
  Structure st;
  std::string inner = s;
  if (s.size() >= 4 && s.compare(0, 2, "\\{") == 0 && s.compare(s.size() - 2, 2, "\\}") == 0) {
    st.open = '{';
    st.close = '}';
    inner = s.substr(2, s.size() - 4);
  } else if (s.size() >= 2 && (s.front() == '(' || s.front() == '[') && (s.back() == ')' || s.back() == ']')) {
    // Only a bracket pair that encloses the whole string; "(1,2),(3,4)" is a bare list of tuples.
    int depth = 0;
    bool encloses = true;
    for (size_t k = 0; k + 1 < s.size() && encloses; ++k) {
      if (s[k] == '(' || s[k] == '[') ++depth;
      if (s[k] == ')' || s[k] == ']') --depth;
      if (depth == 0) encloses = false;
    }
    if (encloses) {
      st.open = s.front();
      st.close = s.back();
      inner = s.substr(1, s.size() - 2);
    }
  }
  st.items = split_top(inner);
  if (st.items.size() < 2) return std::nullopt;
  return st;
}

// A matrix written \matrix{a,b;c,d} by normalisation: its rows of entries; nullopt otherwise.
std::optional<std::vector<std::vector<std::string>>> matrix_of(const std::string& s) {
  if (s.rfind("\\matrix{", 0) != 0 || s.back() != '}') return std::nullopt;
  std::vector<std::vector<std::string>> rows;
  for (const auto& row : split_top(s.substr(8, s.size() - 9), ';')) rows.push_back(split_top(row, ','));
  for (const auto& row : rows) {
    if (row.size() != rows[0].size()) return std::nullopt;
  }
  return rows;
}

// The interval an inequality or a membership describes, in interval notation: "1<=y<=4" →
// "[1,4]", "7>=y" and "y<=7" → "(-\infty,7]", "y\in[1,4]" → "[1,4]"; nullopt for anything else.
// The variable is one letter.
std::optional<std::string> interval_of(const std::string& s) {
  if (s.size() > 3 && std::isalpha(static_cast<unsigned char>(s[0])) && s.compare(1, 3, "\\in") == 0 &&
      (s.size() == 4 || !std::isalpha(static_cast<unsigned char>(s[4])))) {
    return s.substr(4);
  }
  // Tokens: operands and the operators <, <=, >, >=.
  std::vector<std::string> parts, ops;
  std::string cur;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '<' || s[k] == '>') {
      const bool eq = k + 1 < s.size() && s[k + 1] == '=';
      ops.push_back(std::string(1, s[k]) + (eq ? "=" : ""));
      parts.push_back(cur);
      cur.clear();
      if (eq) ++k;
    } else {
      cur += s[k];
    }
  }
  parts.push_back(cur);
  if (ops.empty() || ops.size() > 2) return std::nullopt;
  auto is_var = [](const std::string& p) { return p.size() == 1 && std::isalpha(static_cast<unsigned char>(p[0])); };
  auto less = [](const std::string& op) { return op[0] == '<'; };
  auto closed = [](const std::string& op) { return op.size() == 2; };
  if (ops.size() == 2) {  // a < x < b, or b > x > a
    if (!is_var(parts[1]) || less(ops[0]) != less(ops[1]) || parts[0].empty() || parts[2].empty()) return std::nullopt;
    const bool up = less(ops[0]);
    const std::string& low = up ? parts[0] : parts[2];
    const std::string& high = up ? parts[2] : parts[0];
    const bool low_closed = closed(up ? ops[0] : ops[1]), high_closed = closed(up ? ops[1] : ops[0]);
    return std::string(low_closed ? "[" : "(") + low + "," + high + (high_closed ? "]" : ")");
  }
  // x < b, x > a, b > x, a < x
  const bool var_left = is_var(parts[0]);
  if (var_left == is_var(parts[1])) return std::nullopt;
  const std::string& bound = var_left ? parts[1] : parts[0];
  if (bound.empty()) return std::nullopt;
  const bool upper = var_left == less(ops[0]);  // the bound is above the variable
  const bool c = closed(ops[0]);
  return upper ? "(-\\infty," + bound + (c ? "]" : ")") : std::string(c ? "[" : "(") + bound + ",\\infty)";
}

// The left side of an equation that names what its right side is: a letter with an optional
// subscript or prime ("y", "x_1", "a_{n}") or a function of letters ("f(x)", "g(x,y)").
bool names_a_value(const std::string& left) {
  if (left.empty() || !std::isalpha(static_cast<unsigned char>(left[0]))) return false;
  size_t k = 1;
  if (k < left.size() && left[k] == '_') {
    ++k;
    if (k < left.size() && left[k] == '{') {
      const size_t close = left.find('}', k);
      if (close == std::string::npos) return false;
      k = close + 1;
    } else if (k < left.size() && std::isalnum(static_cast<unsigned char>(left[k]))) {
      ++k;
    } else {
      return false;
    }
  }
  while (k < left.size() && left[k] == '\'') ++k;
  if (k < left.size() && left[k] == '(' && left.back() == ')') {
    for (size_t j = k + 1; j + 1 < left.size(); ++j) {
      if (!std::isalpha(static_cast<unsigned char>(left[j])) && left[j] != ',') return false;
    }
    return true;
  }
  return k == left.size();
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
    return eq != std::string::npos && x.find('=', eq + 1) == std::string::npos && names_a_value(x.substr(0, eq));
  });
}

bool equal_rec(const std::string& answer, const std::string& truth, int depth) {
  if (depth > kMaxDepth) return false;
  const std::string a = normalize_math_answer(answer), b = normalize_math_answer(truth);
  if (a.empty() || b.empty()) return false;
  if (a == b) return true;
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
  auto ma = matrix_of(a), mb = matrix_of(b);
  if (ma || mb) {
    if (!ma || !mb || ma->size() != mb->size() || (*ma)[0].size() != (*mb)[0].size()) return false;
    for (size_t r = 0; r < ma->size(); ++r) {
      if (!lists_equal((*ma)[r], (*mb)[r], true, depth)) return false;
    }
    return true;
  }
  // Inequalities and memberships as intervals ("1<=y<=4" is "y\in[1,4]" is "[1,4]").
  auto va = interval_of(a), vb = interval_of(b);
  if (va || vb) return equal_rec(va ? *va : a, vb ? *vb : b, depth + 1);
  // Several equations ("b=2, c=3"): the same names with the same values, in any order.
  const auto la = split_top(a), lb = split_top(b);
  if (la.size() > 1 && lb.size() > 1 && (all_equations(la) || all_equations(lb))) {
    if (all_equations(la) && all_equations(lb)) return equation_lists_equal(la, lb, depth);
    // "x=2, x=3" against "2, 3": one name's values.
    const auto& equations = all_equations(la) ? la : lb;
    const auto& values = all_equations(la) ? lb : la;
    std::vector<std::string> rights;
    for (const auto& e : equations) {
      if (e.substr(0, e.find('=')) != equations[0].substr(0, equations[0].find('='))) return false;
      rights.push_back(e.substr(e.find('=') + 1));
    }
    return lists_equal(rights, values, false, depth);
  }
  // ±: two values, in any order.
  auto pa = expand_pm(a), pb = expand_pm(b);
  if (!pa.empty() || !pb.empty()) {
    if (pa.empty()) pa = split_top(a);
    if (pb.empty()) {
      auto sb = structure_of(b);
      pb = sb ? sb->items : split_top(b);
    }
    return lists_equal(pa, pb, false, depth);
  }
  // Equations. Against a value, an equation counts only when its left side names that value
  // ("y=3x-2" is answered by "3x-2"; "p+2q=4" is not answered by "4"). Two equations: sides
  // pairwise, or the same line or surface ("3x-y=2" and "y=3x-2").
  const size_t eq_a = a.find('='), eq_b = b.find('=');
  const bool ea = eq_a != std::string::npos, eb = eq_b != std::string::npos;
  if (ea != eb) {
    const std::string& equation = ea ? a : b;
    const size_t eq = ea ? eq_a : eq_b;
    if (equation.find('=', eq + 1) != std::string::npos || !names_a_value(equation.substr(0, eq))) return false;
    return equal_rec(a.substr(a.rfind('=') + 1), b.substr(b.rfind('=') + 1), depth + 1);
  }
  if (ea && eb) {
    auto sa = split_top(a, '='), sb = split_top(b, '=');
    if (sa.size() == sb.size() && lists_equal(sa, sb, true, depth)) return true;
    return same_zero_set(a, b);
  }
  // Tuples and intervals: brackets must match and items agree in order; sets and bare lists in any order.
  auto sa = structure_of(a), sb = structure_of(b);
  if (sa || sb) {
    if (!sa || !sb) return false;
    const bool set_a = sa->open == '{' || sa->open == 0, set_b = sb->open == '{' || sb->open == 0;
    if (set_a && set_b) return lists_equal(sa->items, sb->items, false, depth);
    if (sa->open != sb->open || sa->close != sb->close) return false;
    return lists_equal(sa->items, sb->items, true, depth);
  }
  // Integers exactly (1000001 is not 1000000, however close); other values within the tolerance;
  // then expressions in variables.
  const std::string ia = canonical_integer(a), ib = canonical_integer(b);
  if (!ia.empty() && !ib.empty()) return ia == ib;
  if (auto x = number_of(a)) {
    if (auto y = number_of(b)) return numbers_close(*x, *y);
  }
  return expressions_equal(a, b);
}

// "\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}" (also bmatrix, matrix, smallmatrix) →
// "\matrix{1,2;3,4}"; anything else unchanged.
std::string fix_matrix(const std::string& s) {
  for (std::string_view kind : {"pmatrix", "bmatrix", "Bmatrix", "smallmatrix", "matrix"}) {
    const std::string begin = "\\begin{" + std::string(kind) + "}", end = "\\end{" + std::string(kind) + "}";
    const size_t b = s.find(begin), e = s.rfind(end);
    if (b == std::string::npos || e == std::string::npos || e < b) continue;
    std::string body = s.substr(b + begin.size(), e - b - begin.size());
    std::string out;
    for (size_t k = 0; k < body.size(); ++k) {
      if (body.compare(k, 2, "\\\\") == 0) {
        out += ';';
        ++k;
      } else if (body[k] == '&') {
        out += ',';
      } else {
        out += body[k];
      }
    }
    while (!out.empty() && (out.back() == ';' || std::isspace(static_cast<unsigned char>(out.back())))) out.pop_back();
    return s.substr(0, b) + "\\matrix{" + out + "}" + s.substr(e + end.size());
  }
  return s;
}

// A number followed by unit words: "12 meters", "5 square feet", "3.5 hours." → the number part;
// "" when `s` is not of that form (the words are letters only, one of at least two letters, and
// what comes before them is a number on its own).
std::string strip_unit_words(const std::string& s) {
  size_t k = s.size();
  while (k > 0 && (std::isalpha(static_cast<unsigned char>(s[k - 1])) || s[k - 1] == ' ' || s[k - 1] == '.' ||
                   s[k - 1] == '^' || s[k - 1] == '2' || s[k - 1] == '3')) {
    --k;
  }
  // The suffix must start at a word boundary after a space and hold a word of two letters.
  while (k < s.size() && s[k] != ' ') ++k;
  if (k == 0 || k >= s.size()) return "";
  const std::string words = s.substr(k), number = s.substr(0, k);
  size_t run = 0, longest = 0;
  for (char c : words) {
    run = std::isalpha(static_cast<unsigned char>(c)) ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  if (longest < 2) return "";
  std::string trimmed = number;
  while (!trimmed.empty() && trimmed.back() == ' ') trimmed.pop_back();
  if (trimmed.empty() || trimmed.find('=') != std::string::npos) return "";
  const char last = trimmed.back();
  if (!std::isdigit(static_cast<unsigned char>(last)) && last != '}' && last != ')') return "";
  return trimmed;
}

}  // namespace

std::string normalize_math_answer(std::string_view answer) {
  std::string s(answer.substr(0, kMaxInput));
  // Mixed numbers written with a space ("1 1/2") before spaces disappear.
  if (std::string improper = mixed_number(s); !improper.empty()) s = improper;
  s = fix_matrix(s);
  replace_all(&s, "\n", "");
  replace_all(&s, "{,}", "");   // 12{,}500: LaTeX's thousands separator
  replace_all(&s, ",\\!", "");  // 12,\!500 likewise
  replace_all(&s, "\\!", "");
  replace_all(&s, "\\\\", "\\");
  replace_all(&s, "tfrac", "frac");
  replace_all(&s, "dfrac", "frac");
  replace_all(&s, "cfrac", "frac");
  replace_all(&s, "\\left", "");
  replace_all(&s, "\\right", "");
  replace_all(&s, "\\displaystyle", "");
  replace_all(&s, "^{\\circ}", "");
  replace_all(&s, "^\\circ", "");
  replace_all(&s, "°", "");
  replace_all(&s, "\\$", "");
  replace_all(&s, "$", "");
  // Inequalities as <, <=, >, >= (the long names first: \le is a prefix of \leq).
  for (const auto& [from, to] : std::vector<std::pair<std::string_view, std::string_view>>{
           {"\\leqslant", "<="}, {"\\geqslant", ">="}, {"\\leq", "<="}, {"\\geq", ">="}, {"\\le", "<="},
           {"\\ge", ">="}, {"\\lt", "<"}, {"\\gt", ">"}, {"≤", "<="}, {"≥", ">="}}) {
    replace_all(&s, from, to);
  }
  // Text: \text{x} and its kin → x (spaces kept, so units and joining words stay words).
  for (std::string_view command : {"\\textnormal", "\\textbf", "\\textit", "\\text", "\\mbox", "\\mathrm", "\\boxed"}) {
    unwrap_command(&s, command);
  }
  replace_all(&s, "\\%", "%");
  replace_all(&s, " percent", "%");
  replace_all(&s, "percent", "%");
  replace_all(&s, "\\,", " ");
  replace_all(&s, "\\;", " ");
  replace_all(&s, "\\quad", " ");
  replace_all(&s, "\\ ", " ");
  // Several answers joined by a word: "b = 2 and c = 3" → "b = 2, c = 3".
  replace_all(&s, " and ", ", ");
  replace_all(&s, " or ", ", ");
  // Units after a number: "12 meters" → "12".
  if (std::string number = strip_unit_words(s); !number.empty()) s = number;
  replace_all(&s, "%", "");
  replace_all(&s, " .", " 0.");
  replace_all(&s, "{.", "{0.");
  // Leading and trailing blanks and a sentence's final period.
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  while (!s.empty() && s.back() == '.') s.pop_back();
  size_t lead = 0;
  while (lead < s.size() && std::isspace(static_cast<unsigned char>(s[lead]))) ++lead;
  s.erase(0, lead);
  if (s.empty()) return s;
  if (s[0] == '.') s = "0" + s;
  // "x = 5" → "5" when the left side is a short name and the right side a value (an equation in
  // variables, "y = 3x - 2", stays an equation).
  if (const size_t eq = s.find('='); eq != std::string::npos && s.find('=', eq + 1) == std::string::npos &&
                                     s.find_first_of("<>,", 0) == std::string::npos) {
    std::string left = s.substr(0, eq);
    left.erase(std::remove(left.begin(), left.end(), ' '), left.end());
    const std::string right = s.substr(eq + 1);
    const bool right_has_letters = std::any_of(right.begin(), right.end(), [](char c) {
      return std::isalpha(static_cast<unsigned char>(c));
    }) && right.find("\\pi") == std::string::npos && right.find("\\sqrt") == std::string::npos &&
                                   right.find("\\frac") == std::string::npos;
    if (left.size() <= 2 && !right_has_letters) s = right;
  }
  s = fix_sqrt(s);
  // "41, 250" is a list of two numbers; "41,250" one number with a thousands separator.
  const bool spaced_commas = s.find(", ") != std::string::npos;
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  s = fix_fracs(s);
  if (!spaced_commas && is_thousands(s)) s.erase(std::remove(s.begin(), s.end(), ','), s.end());
  // Mixed numbers written as 1\frac{1}{2}.
  if (std::string improper = mixed_number(s); !improper.empty()) s = improper;
  if (s == "0.5") s = "\\frac{1}{2}";
  // a/b with integers → \frac{a}{b} (MATH's _fix_a_slash_b).
  if (const size_t slash = s.find('/'); slash != std::string::npos && s.find('/', slash + 1) == std::string::npos &&
                                        all_digits(s.substr(0, slash)) && all_digits(s.substr(slash + 1))) {
    s = "\\frac{" + s.substr(0, slash) + "}{" + s.substr(slash + 1) + "}";
  }
  return s;
}

bool math_equal(std::string_view answer, std::string_view ground_truth) {
  if (answer.size() > kMaxInput || ground_truth.size() > kMaxInput) return false;
  const std::string a(answer), b(ground_truth);
  if (equal_rec(a, b, 0)) return true;
  // A percentage against a plain number: "50%" or "50 percent" for 0.5 (the bare 50 already
  // matched 50 above).
  auto percent = [](const std::string& x) { return x.find('%') != std::string::npos || x.find("percent") != std::string::npos; };
  if (percent(a) && !percent(b)) {
    auto x = number_of(normalize_math_answer(a)), y = number_of(normalize_math_answer(b));
    if (x && y) return numbers_close(*x / 100.0, *y);
  }
  return false;
}

}  // namespace rlcpp
