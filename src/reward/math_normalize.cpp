// Normalisation of a math answer before comparison (math_equal.h): MATH's strip_string (\frac12,
// \sqrt3, a/b, \left, units, dollars, degrees) plus \text{} unwrapping, thousands separators, mixed
// numbers, percentages in words, "or" and "and" between answers as commas, matrices as
// \matrix{a,b;c,d} and inequalities as <, <=, >, >=.
#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "reward/answer_forms.h"
#include "reward/math_equal.h"

namespace rlcpp {

namespace {

using answer_forms::all_digits;
using answer_forms::kMaxInput;

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

// A number followed by unit words: "12 meters", "5 square feet", "3.5 hours.", "28% points" → the
// number part; "" when `s` is not of that form (the words are letters only, one of at least two
// letters, and what comes before them is a number, or a percentage, on its own).
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
  if (!std::isdigit(static_cast<unsigned char>(last)) && last != '}' && last != ')' && last != '%') return "";
  return trimmed;
}

// "or" and "and" glued between two values, as "\text{or}" leaves them: "(11,7)or(7,11)", "2or3" →
// "(11,7),(7,11)", "2,3". A letter on either side keeps the word ("for", "x=1orx=2").
void split_glued_words(std::string* s) {
  for (std::string_view word : {"or", "and"}) {
    for (size_t at = s->find(word); at != std::string::npos; at = s->find(word, at + 1)) {
      const size_t end = at + word.size();
      if (at == 0 || end >= s->size()) continue;
      const char before = (*s)[at - 1], after = (*s)[end];
      const bool value_before = std::isdigit(static_cast<unsigned char>(before)) || before == ')' || before == ']' ||
                                before == '}';
      const bool value_after = std::isdigit(static_cast<unsigned char>(after)) ||
                               std::string_view("([{\\-+").find(after) != std::string_view::npos;
      if (value_before && value_after) s->replace(at, word.size(), ",");
    }
  }
}

// Letters outside LaTeX command names: "\frac{1}{2}x" has one, "\frac{\pi}{2}" and "\sqrt{3}" none.
bool has_variable_letters(std::string_view s) {
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '\\') {
      while (k + 1 < s.size() && std::isalpha(static_cast<unsigned char>(s[k + 1]))) ++k;
    } else if (std::isalpha(static_cast<unsigned char>(s[k]))) {
      return true;
    }
  }
  return false;
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
  // Percentages: "28\%", "28 percent", "28 per cent", "28 percentage (points)" → "28%" (longer words first).
  for (std::string_view word : {"\\%", " percentage", "percentage", " per cent", " percent", "percent"}) {
    replace_all(&s, word, "%");
  }
  replace_all(&s, "\\,", " ");
  replace_all(&s, "\\;", " ");
  replace_all(&s, "\\quad", " ");
  replace_all(&s, "\\ ", " ");
  // Several answers joined by a word: "b = 2 and c = 3" → "b = 2, c = 3", "19, 46, and 82" → "19, 46, 82".
  replace_all(&s, ", and ", ", ");
  replace_all(&s, ", or ", ", ");
  replace_all(&s, " and ", ", ");
  replace_all(&s, " or ", ", ");
  split_glued_words(&s);
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
  // variables, "y = 3x - 2" or "y = \frac{1}{2}x", stays an equation).
  if (const size_t eq = s.find('='); eq != std::string::npos && s.find('=', eq + 1) == std::string::npos &&
                                     s.find_first_of("<>,", 0) == std::string::npos) {
    std::string left = s.substr(0, eq);
    left.erase(std::remove(left.begin(), left.end(), ' '), left.end());
    const std::string right = s.substr(eq + 1);
    if (left.size() <= 2 && !has_variable_letters(right)) s = right;
  }
  s = fix_sqrt(s);
  // "41, 250" is a list of two numbers; "41,250" one number with a thousands separator.
  const bool spaced_commas = s.find(", ") != std::string::npos;
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  // An empty item left by a joining word after a comma ("19, 46, \text{ and } 82").
  for (size_t at = s.find(",,"); at != std::string::npos; at = s.find(",,", at)) s.erase(at, 1);
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

}  // namespace rlcpp
