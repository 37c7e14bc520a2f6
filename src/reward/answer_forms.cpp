// The forms a normalised math answer takes (answer_forms.h): hand-written matchers, no std::regex
// (libstdc++'s recurses per character).
#include "reward/answer_forms.h"

#include <algorithm>
#include <cctype>
#include <utility>

namespace rlcpp::answer_forms {

namespace {

bool is_letter(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }
bool is_upper(char c) { return std::isupper(static_cast<unsigned char>(c)) != 0; }

bool is_negated_var(const std::string& p) { return p.size() == 2 && p[0] == '-' && is_letter(p[1]); }

// The variable an operand of an inequality bounds: the operand when it names a value ("x", "x_1",
// "f(x)"), the name inside an absolute value ("|z|" → "z"); "" for anything else.
std::string bounded_name(const std::string& p) {
  if (names_a_value(p)) return p;
  if (p.size() > 2 && p.front() == '|' && p.back() == '|' && names_a_value(p.substr(1, p.size() - 2))) {
    return p.substr(1, p.size() - 2);
  }
  return "";
}

std::string joined(const std::vector<std::string>& items, char sep) {
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    if (k > 0) out += sep;
    out += items[k];
  }
  return out;
}

// -p as text: "-1" → "1", "2" → "-2", "\frac{1}{2}" → "-\frac{1}{2}", "a+b" → "-(a+b)". A plain
// term keeps its plain form, so a rounded bound "-0.33" still reads as a decimal.
std::string negated(const std::string& p) {
  if (p.empty()) return p;
  if (p[0] == '-' && p.find_first_of("+-", 1) == std::string::npos) return p.substr(1);
  if (p.find_first_of("+-") == std::string::npos) return "-" + p;
  return "-(" + p + ")";
}

}  // namespace

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

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

std::optional<Decimal> decimal_literal(std::string_view s) {
  Decimal d;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    d.negative = s[0] == '-';
    s.remove_prefix(1);
  }
  const size_t dot = s.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view whole = s.substr(0, dot), fraction = s.substr(dot + 1);
  if (!all_digits(fraction) || (!whole.empty() && !all_digits(whole)) || whole.size() + fraction.size() > 18) {
    return std::nullopt;
  }
  d.mantissa = std::stoull(std::string(whole) + std::string(fraction));
  d.n_decimals = static_cast<int>(fraction.size());
  return d;
}

std::optional<Fraction> fraction_literal(std::string_view s) {
  bool negative = false;
  if (!s.empty() && s[0] == '-') {
    negative = true;
    s.remove_prefix(1);
  }
  if (!s.starts_with("\\frac{") || s.back() != '}') return std::nullopt;
  const size_t close = s.find('}');
  if (close + 1 >= s.size() || s[close + 1] != '{') return std::nullopt;
  std::string_view num = s.substr(6, close - 6);
  const std::string_view den = s.substr(close + 2, s.size() - close - 3);
  if (!num.empty() && num[0] == '-') {
    negative = !negative;
    num.remove_prefix(1);
  }
  if (!all_digits(num) || !all_digits(den) || num.size() > 9 || den.size() > 9) return std::nullopt;
  Fraction f{std::stoll(std::string(num)), std::stoll(std::string(den))};
  if (f.denominator == 0) return std::nullopt;
  if (negative) f.numerator = -f.numerator;
  return f;
}

std::vector<std::string> split_top(const std::string& s, char sep) {
  std::vector<std::string> parts;
  int depth = 0;
  std::string cur;
  for (const char c : s) {
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

std::vector<std::string> list_items(const std::string& s) {
  auto by_semicolon = split_top(s, ';');
  return by_semicolon.size() > 1 ? by_semicolon : split_top(s, ',');
}

std::optional<Structure> structure_of(const std::string& s) {
  Structure st;
  std::string inner = s;
  if (s.size() >= 4 && s.compare(0, 2, "\\{") == 0 && s.compare(s.size() - 2, 2, "\\}") == 0) {
    st.open = '{';
    st.close = '}';
    inner = s.substr(2, s.size() - 4);
  } else if (s.size() >= 2 && ((s.front() == '{' && s.back() == '}') ||
                               ((s.front() == '(' || s.front() == '[') && (s.back() == ')' || s.back() == ']')))) {
    // Only a bracket pair that encloses the whole string; "(1,2),(3,4)" is a bare list of tuples.
    int depth = 0;
    bool encloses = true;
    for (size_t k = 0; k + 1 < s.size() && encloses; ++k) {
      if (s[k] == '(' || s[k] == '[' || s[k] == '{') ++depth;
      if (s[k] == ')' || s[k] == ']' || s[k] == '}') --depth;
      if (depth == 0) encloses = false;
    }
    if (encloses) {
      st.open = s.front();
      st.close = s.back();
      inner = s.substr(1, s.size() - 2);
    }
  }
  st.items = list_items(inner);
  if (st.items.size() < 2) return std::nullopt;
  return st;
}

std::optional<std::vector<std::vector<std::string>>> matrix_of(const std::string& s) {
  if (s.rfind("\\matrix{", 0) != 0 || s.back() != '}') return std::nullopt;
  std::vector<std::vector<std::string>> rows;
  for (const auto& row : split_top(s.substr(8, s.size() - 9), ';')) rows.push_back(split_top(row, ','));
  for (const auto& row : rows) {
    if (row.size() != rows[0].size()) return std::nullopt;
  }
  return rows;
}

std::vector<std::string> expand_pm(const std::string& s) {
  const size_t at = s.find("\\pm");
  if (at == std::string::npos || s.find("\\pm", at + 3) != std::string::npos) return {};
  const std::string left = s.substr(0, at), right = s.substr(at + 3);
  if (left.empty()) return {right, "-(" + right + ")"};
  return {left + "+" + right, left + "-(" + right + ")"};
}

std::optional<std::string> interval_of(const std::string& s, std::string* variable) {
  if (s.size() > 3 && is_letter(s[0]) && s.compare(1, 3, "\\in") == 0 && (s.size() == 4 || !is_letter(s[4]))) {
    if (variable) *variable = s.substr(0, 1);
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
  // In the negated variable, a < -x < b is -b < x < -a and -x > c is -c > x: the operands and
  // operators in reverse order, each operand negated.
  if (ops.size() == 2 ? is_negated_var(parts[1]) : is_negated_var(parts[0]) != is_negated_var(parts[1])) {
    std::reverse(parts.begin(), parts.end());
    std::reverse(ops.begin(), ops.end());
    for (auto& p : parts) p = negated(p);
  }
  auto less = [](const std::string& op) { return op[0] == '<'; };
  auto closed = [](const std::string& op) { return op.size() == 2; };
  if (ops.size() == 2) {  // a < x < b, or b > x > a
    const std::string name = bounded_name(parts[1]);
    if (name.empty() || less(ops[0]) != less(ops[1]) || parts[0].empty() || parts[2].empty()) return std::nullopt;
    const bool up = less(ops[0]);
    const std::string& low = up ? parts[0] : parts[2];
    const std::string& high = up ? parts[2] : parts[0];
    const bool low_closed = closed(up ? ops[0] : ops[1]), high_closed = closed(up ? ops[1] : ops[0]);
    if (variable) *variable = name;
    const std::string inside = std::string(low_closed ? "[" : "(") + low + "," + high + (high_closed ? "]" : ")");
    if (name == parts[1]) return inside;
    // low <= |z| <= high: z in [-high, -low] or in [low, high]
    return std::string(high_closed ? "[" : "(") + negated(high) + "," + negated(low) + (low_closed ? "]" : ")") +
           "\\cup" + inside;
  }
  // x < b, x > a, b > x, a < x
  const std::string left = bounded_name(parts[0]), right = bounded_name(parts[1]);
  if (left.empty() == right.empty()) return std::nullopt;
  const bool var_left = !left.empty();
  const std::string& bound = var_left ? parts[1] : parts[0];
  if (bound.empty()) return std::nullopt;
  const bool upper = var_left == less(ops[0]);  // the bound is above the variable
  const bool c = closed(ops[0]);
  if (variable) *variable = var_left ? left : right;
  if ((var_left ? left : right) == (var_left ? parts[0] : parts[1])) {
    return upper ? "(-\\infty," + bound + (c ? "]" : ")") : std::string(c ? "[" : "(") + bound + ",\\infty)";
  }
  // |z| < b: z in (-b, b); |z| > a: z below -a or above a
  if (upper) return std::string(c ? "[" : "(") + negated(bound) + "," + bound + (c ? "]" : ")");
  return "(-\\infty," + negated(bound) + (c ? "]" : ")") + "\\cup" + (c ? "[" : "(") + bound + ",\\infty)";
}

std::vector<std::string> union_parts(const std::string& s) {
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    if (depth == 0 && s.compare(k, 4, "\\cup") == 0 && (k + 4 >= s.size() || !is_letter(s[k + 4]))) {
      parts.push_back(cur);
      cur.clear();
      k += 3;
      continue;
    }
    if (s[k] == '(' || s[k] == '[' || s[k] == '{') ++depth;
    if (s[k] == ')' || s[k] == ']' || s[k] == '}') --depth;
    cur += s[k];
  }
  parts.push_back(cur);
  return parts;
}

std::optional<std::string> labelled_tuple(const std::string& s) {
  const auto items = split_top(s);
  if (items.size() < 2) return std::nullopt;
  std::vector<std::string> names, values;
  for (const auto& item : items) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq + 1 == item.size() || item.find('=', eq + 1) != std::string::npos) return std::nullopt;
    std::string name = item.substr(0, eq);
    if (!names_a_value(name) || std::find(names.begin(), names.end(), name) != names.end()) return std::nullopt;
    names.push_back(std::move(name));
    values.push_back(item.substr(eq + 1));
  }
  return "(" + joined(names, ',') + ")=(" + joined(values, ',') + ")";
}

std::optional<std::string> labelled_tuples(const std::string& s) {
  const auto groups = split_top(s, ';');
  if (groups.size() < 2) return std::nullopt;
  std::vector<std::string> tuples;
  for (const auto& group : groups) {
    auto tuple = labelled_tuple(group);
    // The names end at the tuple's '=' (a name holds none).
    if (!tuple || (!tuples.empty() && tuple->substr(0, tuple->find('=')) != tuples[0].substr(0, tuples[0].find('=')))) {
      return std::nullopt;
    }
    tuples.push_back(std::move(*tuple));
  }
  return joined(tuples, ',');
}

bool names_a_value(const std::string& s) {
  if (s.empty() || !is_letter(s[0])) return false;
  size_t k = 1;
  if (k < s.size() && s[k] == '_') {
    ++k;
    if (k < s.size() && s[k] == '{') {
      const size_t close = s.find('}', k);
      if (close == std::string::npos) return false;
      k = close + 1;
    } else if (k < s.size() && std::isalnum(static_cast<unsigned char>(s[k]))) {
      ++k;
    } else {
      return false;
    }
  }
  while (k < s.size() && s[k] == '\'') ++k;
  if (k < s.size() && s[k] == '(' && s.back() == ')') {
    for (size_t j = k + 1; j + 1 < s.size(); ++j) {
      if (!is_letter(s[j]) && s[j] != ',') return false;
    }
    return true;
  }
  return k == s.size();
}

bool names_a_figure_part(const std::string& s) {
  std::string_view v = s;
  if (v.size() >= 2 && v.front() == '|' && v.back() == '|') {
    v = v.substr(1, v.size() - 2);
  } else if (v.starts_with("\\overline{") && v.back() == '}') {
    v = v.substr(10, v.size() - 11);
  } else if (v.starts_with("m\\angle")) {
    v.remove_prefix(7);
  } else if (v.starts_with("\\angle")) {
    v.remove_prefix(6);
  }
  const size_t fewest = v.size() == s.size() ? 2 : 1;  // a bare capital may be a variable; \angleA is a part
  return v.size() >= fewest && v.size() <= 4 && std::all_of(v.begin(), v.end(), is_upper);
}

bool is_label(const std::string& s) {
  auto single = [](const std::string& x) { return names_a_value(x) || names_a_figure_part(x); };
  if (single(s)) return true;
  if (s.size() > 2 && s.front() == '(' && s.back() == ')') {
    const auto items = split_top(s.substr(1, s.size() - 2));
    return items.size() >= 2 && std::all_of(items.begin(), items.end(), single);
  }
  const auto ratio = split_top(s, ':');
  return ratio.size() >= 2 && std::all_of(ratio.begin(), ratio.end(), single);
}

std::vector<std::string> chain_members(const std::string& s) {
  if (s.find_first_of("<>") != std::string::npos || list_items(s).size() > 1) return {};
  auto members = split_top(s, '=');
  if (members.size() < 3 || members.size() > 8) return {};
  for (const auto& m : members) {
    if (m.empty()) return {};
  }
  return members;
}

}  // namespace rlcpp::answer_forms
