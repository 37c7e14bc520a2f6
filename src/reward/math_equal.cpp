#include "reward/math_equal.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
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
  int compared = 0;
  for (int trial = 0; trial < 8; ++trial) {
    std::map<char, double> point;
    for (char v : vars) point[v] = pick(rng);
    const double x = ea->eval(point), y = eb->eval(point);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (!numbers_close(x, y)) return false;
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
    // Only a bracket pair that encloses the whole string.
    int depth = 0;
    for (size_t k = 0; k + 1 < s.size(); ++k) {
      if (s[k] == '(' || s[k] == '[') ++depth;
      if (s[k] == ')' || s[k] == ']') --depth;
      if (depth == 0) return std::nullopt;
    }
    st.open = s.front();
    st.close = s.back();
    inner = s.substr(1, s.size() - 2);
  }
  st.items = split_top(inner);
  if (st.items.size() < 2) return std::nullopt;
  return st;
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
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [](char x, char y) { return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y)); });
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
  // Equations: compare right-hand sides when only one side is an equation, sides pairwise when both are.
  const bool ea = a.find('=') != std::string::npos, eb = b.find('=') != std::string::npos;
  if (ea != eb) return equal_rec(a.substr(a.rfind('=') + 1), b.substr(b.rfind('=') + 1), depth + 1);
  if (ea && eb) {
    auto sa = split_top(a, '='), sb = split_top(b, '=');
    return sa.size() == sb.size() && lists_equal(sa, sb, true, depth);
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

}  // namespace

std::string normalize_math_answer(std::string_view answer) {
  std::string s(answer.substr(0, kMaxInput));
  // Mixed numbers written with a space ("1 1/2") before spaces disappear.
  if (std::string improper = mixed_number(s); !improper.empty()) s = improper;
  replace_all(&s, "\n", "");
  replace_all(&s, "\\!", "");
  replace_all(&s, "\\\\", "\\");
  replace_all(&s, "tfrac", "frac");
  replace_all(&s, "dfrac", "frac");
  replace_all(&s, "\\left", "");
  replace_all(&s, "\\right", "");
  replace_all(&s, "\\displaystyle", "");
  replace_all(&s, "^{\\circ}", "");
  replace_all(&s, "^\\circ", "");
  replace_all(&s, "°", "");
  replace_all(&s, "\\$", "");
  replace_all(&s, "$", "");
  // Units: "5 \text{ cm}" → "5" (MATH's _remove_right_units), then any other \text{x} → x.
  if (const size_t units = s.find("\\text{ "); units != std::string::npos && units > 0) s = s.substr(0, units);
  unwrap_command(&s, "\\text");
  unwrap_command(&s, "\\textbf");
  unwrap_command(&s, "\\mbox");
  unwrap_command(&s, "\\mathrm");
  unwrap_command(&s, "\\boxed");
  replace_all(&s, "\\%", "");
  replace_all(&s, "%", "");
  replace_all(&s, "\\,", "");
  replace_all(&s, "\\;", "");
  replace_all(&s, "\\ ", "");
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
  // "x = 5" → "5" when the left side is a short name.
  if (const size_t eq = s.find('='); eq != std::string::npos && s.find('=', eq + 1) == std::string::npos) {
    std::string left = s.substr(0, eq);
    left.erase(std::remove(left.begin(), left.end(), ' '), left.end());
    if (left.size() <= 2) s = s.substr(eq + 1);
  }
  s = fix_sqrt(s);
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  s = fix_fracs(s);
  // Thousands separators: "1,234,567" (groups of three) is one number.
  if (is_thousands(s)) s.erase(std::remove(s.begin(), s.end(), ','), s.end());
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
  // A percentage against a plain number: "50%" for 0.5 (the bare 50 already matched 50 above).
  if (a.find('%') != std::string::npos && b.find('%') == std::string::npos) {
    auto x = number_of(normalize_math_answer(a)), y = number_of(normalize_math_answer(b));
    if (x && y) return numbers_close(*x / 100.0, *y);
  }
  return false;
}

}  // namespace rlcpp
