// A compiled PCRE2 regular expression (UTF + UCP, JIT when available), as Hugging Face tokenizers
// use Oniguruma: `\p{L}`, `\s`, look-ahead, inline flags. Thread-safe after construction.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rlcpp {

class Regex {
 public:
  // Compiles `pattern`; a pattern PCRE2 rejects is a UserError naming `where` and the offset.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches [begin, end) left to right; empty matches are skipped (the scan moves
  // on by one character), as Hugging Face's splitter drops empty pieces.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// Escapes `literal` for use inside a pattern.
std::string regex_escape(std::string_view literal);

// tokenizer.json's pattern object, {"String": literal} or {"Regex": pattern}, as a PCRE2 pattern;
// anything else is a UserError naming `where`.
std::string pattern_from_json(const nlohmann::json& json, const std::string& where);

}  // namespace rlcpp
