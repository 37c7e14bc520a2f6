// Lexing for rlcpp's Jinja subset: a template becomes text chunks and tag chunks ({{ }} and {% %},
// comments dropped) with the whitespace rules transformers uses (trim_blocks, lstrip_blocks, `-`
// markers, keep_trailing_newline=False); tags are tokenised.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rlcpp::jinja {

struct Pos {
  int line = 1, col = 1;
  std::string str() const { return fmt::format("{}:{}", line, col); }
};

struct Token {
  enum Type { kName, kString, kInt, kFloat, kOp, kEnd } type = kEnd;
  std::string text;
  int64_t i = 0;
  double f = 0;
  Pos pos;
};

struct Chunk {
  enum Type { kText, kExpr, kStmt } type = kText;
  std::string text;
  std::vector<Token> tokens;  // for kExpr and kStmt, ending with kEnd
  Pos pos;
};

// A template error at `pos`: a UserError "chat template LINE:COL: message".
[[noreturn]] void fail(const Pos& pos, const std::string& message);

std::vector<Chunk> lex(const std::string& source);

}  // namespace rlcpp::jinja
