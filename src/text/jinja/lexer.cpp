#include "text/jinja/lexer.h"

#include <algorithm>
#include <stdexcept>

#include "util/error.h"

namespace rlcpp::jinja {

void fail(const Pos& pos, const std::string& message) { throw_user_error("chat template {}: {}", pos.str(), message); }

namespace {

class Lexer {
 public:
  explicit Lexer(const std::string& source) : src_(source) {
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();  // keep_trailing_newline=False
  }

  std::vector<Chunk> run() {
    std::vector<Chunk> chunks;
    std::string text;
    bool strip_next = false;     // a `-` closed the previous tag: strip leading whitespace
    bool trim_newline = false;   // trim_blocks: drop one newline after a block tag
    while (at_ < src_.size()) {
      const size_t open = find_open(at_);
      std::string piece = src_.substr(at_, open - at_);
      if (strip_next) {
        size_t k = 0;
        while (k < piece.size() && std::isspace(static_cast<unsigned char>(piece[k]))) ++k;
        piece.erase(0, k);
      } else if (trim_newline && !piece.empty()) {
        if (piece[0] == '\n') piece.erase(0, 1);
        else if (piece.rfind("\r\n", 0) == 0) piece.erase(0, 2);
      }
      advance_to(open);
      if (open >= src_.size()) {
        text += piece;
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      const char marker = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (marker == '-') {
        size_t end = piece.size();
        while (end > 0 && std::isspace(static_cast<unsigned char>(piece[end - 1]))) --end;
        piece.resize(end);
      } else if (kind != '{' && marker != '+') {
        // lstrip_blocks: spaces and tabs from the line start to a block or comment tag go.
        // Whether the tag starts its line is read off the source, before trim_blocks removed anything.
        size_t blanks = 0;
        while (blanks < piece.size() && (piece[piece.size() - 1 - blanks] == ' ' || piece[piece.size() - 1 - blanks] == '\t')) {
          ++blanks;
        }
        const size_t before = open - blanks;  // source index of the first blank
        if (before == 0 || src_[before - 1] == '\n') piece.resize(piece.size() - blanks);
      }
      text += piece;
      const Pos tag_pos = pos_;
      advance_to(open + 2 + ((marker == '-' || marker == '+') ? 1 : 0));
      if (kind == '#') {
        const size_t close = src_.find("#}", at_);
        if (close == std::string::npos) fail(tag_pos, "comment is not closed with #}");
        strip_next = close > at_ && src_[close - 1] == '-';
        trim_newline = !strip_next;
        advance_to(close + 2);
        continue;
      }
      if (!text.empty()) {
        chunks.push_back({Chunk::kText, text, {}, tag_pos});
        text.clear();
      }
      Chunk chunk{kind == '{' ? Chunk::kExpr : Chunk::kStmt, "", {}, tag_pos};
      const std::string close = kind == '{' ? "}}" : "%}";
      chunk.tokens = lex_tag(close, tag_pos, &strip_next);
      trim_newline = kind == '%' && !strip_next;
      if (chunk.type == Chunk::kStmt && !chunk.tokens.empty() && chunk.tokens[0].text == "raw") {
        fail(tag_pos, "{% raw %} blocks are not supported");
      }
      chunks.push_back(std::move(chunk));
    }
    if (!text.empty()) chunks.push_back({Chunk::kText, text, {}, pos_});
    return chunks;
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k) {
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    }
    return src_.size();
  }

  void advance_to(size_t target) {
    while (at_ < target && at_ < src_.size()) {
      if (src_[at_] == '\n') {
        ++pos_.line;
        pos_.col = 1;
      } else {
        ++pos_.col;
      }
      ++at_;
    }
  }

  std::vector<Token> lex_tag(const std::string& close, const Pos& tag_pos, bool* strip_next) {
    std::vector<Token> tokens;
    while (true) {
      while (at_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[at_]))) advance_to(at_ + 1);
      if (at_ >= src_.size()) fail(tag_pos, fmt::format("tag is not closed with {}", close));
      if (src_.compare(at_, 1 + close.size(), "-" + close) == 0) {
        *strip_next = true;
        advance_to(at_ + 1 + close.size());
        break;
      }
      if (src_.compare(at_, close.size(), close) == 0) {
        *strip_next = false;
        advance_to(at_ + close.size());
        break;
      }
      Token token;
      token.pos = pos_;
      const char c = src_[at_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = at_;
        while (end < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
        token.type = Token::kName;
        token.text = src_.substr(at_, end - at_);
        advance_to(end);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t end = at_;
        bool is_float = false;
        while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
        if (end + 1 < src_.size() && src_[end] == '.' && std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
          is_float = true;
          ++end;
          while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) ++end;
        }
        std::string digits = src_.substr(at_, end - at_);
        digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
        token.type = is_float ? Token::kFloat : Token::kInt;
        try {
          if (is_float) token.f = std::stod(digits); else token.i = std::stoll(digits);
        } catch (const std::out_of_range&) {
          fail(token.pos, fmt::format("number {} is out of range", digits.substr(0, 40)));
        }
        token.text = digits;
        advance_to(end);
      } else if (c == '\'' || c == '"') {
        token.type = Token::kString;
        size_t k = at_ + 1;
        std::string value;
        while (k < src_.size() && src_[k] != c) {
          if (src_[k] == '\\' && k + 1 < src_.size()) {
            const char e = src_[k + 1];
            switch (e) {
              case 'n': value += '\n'; break;
              case 't': value += '\t'; break;
              case 'r': value += '\r'; break;
              case '\\': value += '\\'; break;
              case '\'': value += '\''; break;
              case '"': value += '"'; break;
              default: value += '\\'; value += e;
            }
            k += 2;
          } else {
            value += src_[k++];
          }
        }
        if (k >= src_.size()) fail(token.pos, "string literal is not closed");
        token.text = value;
        advance_to(k + 1);
      } else {
        static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                    "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
        bool matched = false;
        for (const char* op : ops) {
          const size_t n = std::strlen(op);
          if (src_.compare(at_, n, op) == 0) {
            token.type = Token::kOp;
            token.text = op;
            advance_to(at_ + n);
            matched = true;
            break;
          }
        }
        if (!matched) fail(token.pos, fmt::format("unexpected character '{}'", c));
      }
      tokens.push_back(std::move(token));
    }
    Token end;
    end.type = Token::kEnd;
    end.pos = pos_;
    tokens.push_back(end);
    return tokens;
  }

  std::string src_;
  size_t at_ = 0;
  Pos pos_;
};

}  // namespace

std::vector<Chunk> lex(const std::string& source) { return Lexer(source).run(); }

}  // namespace rlcpp::jinja
