#include "reward/extract.h"

#include <vector>

namespace rlcpp {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

bool blank(std::string_view s) {
  for (char c : s) {
    if (!is_space(c)) return false;
  }
  return true;
}

size_t count(std::string_view text, std::string_view needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string_view::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

}  // namespace

namespace {

struct Boxed {
  std::string content;
  size_t start = 0, end = 0;  // of the command, and one past its argument
};

// The last \boxed{...} or \fbox{...} beginning before `limit`; nullopt when there is none or its
// braces never close.
std::optional<Boxed> last_boxed(std::string_view text, size_t limit) {
  size_t best = std::string_view::npos, command_len = 0;
  for (std::string_view command : {"\\boxed", "\\fbox"}) {
    if (limit < command.size()) continue;
    const size_t at = text.rfind(command, limit - command.size());
    if (at != std::string_view::npos && (best == std::string_view::npos || at > best)) {
      best = at;
      command_len = command.size();
    }
  }
  if (best == std::string_view::npos) return std::nullopt;
  size_t k = best + command_len;
  const size_t after_command = k;
  while (k < text.size() && is_space(text[k])) ++k;
  if (k >= text.size() || text[k] != '{') {
    if (k == after_command) return std::nullopt;  // `\boxedx`: another command
    // `\boxed 5`: up to the next '$' or the end.
    const size_t end = text.find('$', k);
    std::string value = trim(text.substr(k, end == std::string_view::npos ? std::string_view::npos : end - k));
    if (value.empty()) return std::nullopt;
    return Boxed{value, best, end == std::string_view::npos ? text.size() : end};
  }
  int depth = 0;
  for (size_t j = k; j < text.size(); ++j) {
    if (text[j] == '\\' && j + 1 < text.size() && (text[j + 1] == '{' || text[j + 1] == '}')) {
      ++j;  // escaped brace: literal
      continue;
    }
    if (text[j] == '{') ++depth;
    if (text[j] == '}' && --depth == 0) return Boxed{std::string(text.substr(k + 1, j - k - 1)), best, j + 1};
  }
  return std::nullopt;
}

// Text between two boxed answers that only joins them: blanks, $, punctuation, "and", "\quad".
bool only_joins(std::string_view between) {
  std::string rest(between);
  for (std::string_view word : {"\\text{and}", "\\text{ and }", "\\quad", "\\qquad", "and", "\\,"}) {
    for (size_t at = rest.find(word); at != std::string::npos; at = rest.find(word)) rest.erase(at, word.size());
  }
  for (char c : rest) {
    if (!is_space(c) && c != '$' && c != ',' && c != ';' && c != '&' && c != '\\' && c != '(' && c != ')') return false;
  }
  return true;
}

}  // namespace

std::optional<std::string> extract_boxed(std::string_view text) {
  auto last = last_boxed(text, text.size());
  if (!last) return std::nullopt;
  // Several answers boxed one after another ("\boxed{b = 2} and \boxed{c = 3}") are one list.
  std::string answer = last->content;
  size_t start = last->start;
  for (int more = 0; more < 8; ++more) {
    auto previous = last_boxed(text, start);
    if (!previous || previous->end > start || !only_joins(text.substr(previous->end, start - previous->end))) break;
    answer = previous->content + ", " + answer;
    start = previous->start;
  }
  return answer;
}

std::optional<std::string> extract_think_answer(std::string_view text) {
  for (std::string_view tag : {"<think>", "</think>", "<answer>", "</answer>"}) {
    if (count(text, tag) != 1) return std::nullopt;
  }
  const size_t think = text.find("<think>"), think_end = text.find("</think>");
  const size_t answer = text.find("<answer>"), answer_end = text.find("</answer>");
  if (!(think < think_end && think_end < answer && answer < answer_end)) return std::nullopt;
  if (!blank(text.substr(0, think)) || !blank(text.substr(think_end + 8, answer - think_end - 8)) ||
      !blank(text.substr(answer_end + 9))) {
    return std::nullopt;
  }
  const std::string_view content = text.substr(answer + 8, answer_end - answer - 8);
  if (auto boxed = extract_boxed(content)) return boxed;
  return trim(content);
}

std::optional<std::string> extract_answer_line(std::string_view text) {
  const size_t at = text.rfind("Answer:");
  if (at == std::string_view::npos) return std::nullopt;
  const size_t start = at + 7;
  const size_t end = text.find('\n', start);
  std::string value = trim(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
  if (!value.empty() && value.back() == '.') value.pop_back();
  if (value.size() >= 2 && value.front() == '$' && value.back() == '$') value = trim(value.substr(1, value.size() - 2));
  if (auto boxed = extract_boxed(value)) return boxed;
  return value;
}

}  // namespace rlcpp
