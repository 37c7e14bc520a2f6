#include "text/jinja.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <set>

#include "text/jinja_value.h"
#include "util/error.h"

namespace rlcpp::jinja {

namespace {

// ---------------------------------------------------------------------------------------------
// Lexing: the template becomes text chunks and tag chunks, whitespace rules applied.

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

[[noreturn]] void fail(const Pos& pos, const std::string& message) {
  throw_user_error("chat template {}: {}", pos.str(), message);
}

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
        if (is_float) token.f = std::stod(digits); else token.i = std::stoll(digits);
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

// ---------------------------------------------------------------------------------------------
// Syntax tree.

struct Expr;
using ExprPtr = std::shared_ptr<Expr>;

struct Expr {
  enum Type { kLiteral, kName, kAttr, kIndex, kSlice, kCall, kFilter, kTest, kUnary, kBinary, kCond, kList, kDict };
  Type type = kLiteral;
  Pos pos;
  Value literal;
  std::string name;  // kName, kAttr, kFilter, kTest, kUnary/kBinary operator
  std::vector<ExprPtr> args;  // operands / call args / list items / dict keys and values interleaved
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // kTest: `is not`
};

struct Node;
using Body = std::vector<std::shared_ptr<Node>>;

struct Node {
  enum Type { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kBlock };
  Type type = kText;
  Pos pos;
  std::string text;                            // kText; kSet/kSetBlock/kMacro: target name
  std::string attr;                            // kSet on `ns.attr`
  std::vector<std::string> targets;            // kFor loop variables; kMacro parameter names
  std::vector<ExprPtr> exprs;                  // kOutput: [value]; kIf: conditions; kFor: [iter, filter?]; kSet: [value]; kMacro: defaults
  std::vector<Body> bodies;                    // kIf: one per condition (+ else); kFor: [body, else]; kSetBlock/kMacro/kBlock: [body]
};

// ---------------------------------------------------------------------------------------------
// Parsing.

class ExprParser {
 public:
  ExprParser(const std::vector<Token>& tokens, size_t start) : t_(tokens), k_(start) {}

  ExprPtr parse() { return parse_cond(); }
  // An expression without a trailing `if` (a for loop's iterable, whose `if` is the loop filter).
  ExprPtr parse_no_ternary() { return parse_or(); }
  const Token& peek() const { return t_[k_]; }
  size_t position() const { return k_; }
  bool at_end() const { return t_[k_].type == Token::kEnd; }
  bool accept_op(const char* op) {
    if (t_[k_].type == Token::kOp && t_[k_].text == op) {
      ++k_;
      return true;
    }
    return false;
  }
  bool accept_name(const char* name) {
    if (t_[k_].type == Token::kName && t_[k_].text == name) {
      ++k_;
      return true;
    }
    return false;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(peek().pos, fmt::format("expected '{}' but found '{}'", op, describe(peek())));
  }
  std::string expect_name() {
    if (t_[k_].type != Token::kName) fail(peek().pos, fmt::format("expected a name but found '{}'", describe(peek())));
    return t_[k_++].text;
  }
  static std::string describe(const Token& t) { return t.type == Token::kEnd ? "end of tag" : t.text; }

  // Conditional without the `else` part allowed (Jinja: undefined when false).
  ExprPtr parse_cond() {
    ExprPtr value = parse_or();
    while (accept_name("if")) {
      auto e = make(Expr::kCond, value->pos);
      e->args = {parse_or(), value};
      if (accept_name("else")) e->args.push_back(parse_cond());
      value = e;
    }
    return value;
  }

 private:
  ExprPtr make(Expr::Type type, const Pos& pos) {
    auto e = std::make_shared<Expr>();
    e->type = type;
    e->pos = pos;
    return e;
  }
  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::kBinary, a->pos);
    e->name = op;
    e->args = {std::move(a), std::move(b)};
    return e;
  }
  ExprPtr parse_or() {
    auto e = parse_and();
    while (accept_name("or")) e = binary("or", e, parse_and());
    return e;
  }
  ExprPtr parse_and() {
    auto e = parse_not();
    while (accept_name("and")) e = binary("and", e, parse_not());
    return e;
  }
  ExprPtr parse_not() {
    if (peek().type == Token::kName && peek().text == "not") {
      const Pos pos = peek().pos;
      ++k_;
      auto e = make(Expr::kUnary, pos);
      e->name = "not";
      e->args = {parse_not()};
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    auto e = parse_math1();
    while (true) {
      const Token& t = peek();
      if (t.type == Token::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" ||
                                   t.text == "<=" || t.text == ">=")) {
        ++k_;
        e = binary(t.text, e, parse_math1());
      } else if (accept_name("in")) {
        e = binary("in", e, parse_math1());
      } else if (t.type == Token::kName && t.text == "not" && t_[k_ + 1].type == Token::kName &&
                 t_[k_ + 1].text == "in") {
        k_ += 2;
        e = binary("not in", e, parse_math1());
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_math1() {
    auto e = parse_concat();
    while (peek().type == Token::kOp && (peek().text == "+" || peek().text == "-")) {
      const std::string op = t_[k_++].text;
      e = binary(op, e, parse_concat());
    }
    return e;
  }
  ExprPtr parse_concat() {
    auto e = parse_math2();
    while (accept_op("~")) e = binary("~", e, parse_math2());
    return e;
  }
  ExprPtr parse_math2() {
    auto e = parse_pow();
    while (peek().type == Token::kOp &&
           (peek().text == "*" || peek().text == "/" || peek().text == "//" || peek().text == "%")) {
      const std::string op = t_[k_++].text;
      e = binary(op, e, parse_pow());
    }
    return e;
  }
  ExprPtr parse_pow() {
    auto e = parse_unary(true);
    while (accept_op("**")) e = binary("**", e, parse_unary(true));
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (peek().type == Token::kOp && (peek().text == "-" || peek().text == "+")) {
      const Token& t = t_[k_++];
      e = make(Expr::kUnary, t.pos);
      e->name = t.text;
      e->args = {parse_unary(false)};
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters(e) : e;
  }
  void parse_call_args(Expr* e) {
    // after '(' : positional and keyword arguments
    if (accept_op(")")) return;
    while (true) {
      if (peek().type == Token::kName && t_[k_ + 1].type == Token::kOp && t_[k_ + 1].text == "=") {
        const std::string key = t_[k_].text;
        k_ += 2;
        e->kwargs.emplace_back(key, parse_cond());
      } else {
        e->args.push_back(parse_cond());
      }
      if (accept_op(")")) return;
      expect_op(",");
    }
  }
  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (accept_op("|")) {
        auto f = make(Expr::kFilter, peek().pos);
        f->name = expect_name();
        f->args.push_back(e);
        if (accept_op("(")) parse_call_args(f.get());
        e = f;
      } else if (peek().type == Token::kName && peek().text == "is") {
        ++k_;
        auto test = make(Expr::kTest, peek().pos);
        test->negated = accept_name("not");
        if (peek().type == Token::kOp && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                          peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
          test->name = t_[k_++].text;
        } else {
          test->name = expect_name();
        }
        test->args.push_back(e);
        if (accept_op("(")) {
          parse_call_args(test.get());
        } else if (peek().type == Token::kString || peek().type == Token::kInt || peek().type == Token::kFloat ||
                   (peek().type == Token::kName && peek().text != "and" && peek().text != "or" &&
                    peek().text != "if" && peek().text != "else" && peek().text != "in" && peek().text != "not" &&
                    peek().text != "is")) {
          test->args.push_back(parse_postfix(parse_primary()));  // `is divisibleby 3`, `is sameas none`
        }
        e = test;
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (accept_op(".")) {
        auto a = make(Expr::kAttr, peek().pos);
        if (peek().type == Token::kInt) {
          a->type = Expr::kIndex;
          auto idx = make(Expr::kLiteral, peek().pos);
          idx->literal = Value::integer(t_[k_++].i);
          a->args = {e, idx};
        } else {
          a->name = expect_name();
          a->args = {e};
        }
        e = a;
      } else if (accept_op("[")) {
        const Pos pos = peek().pos;
        ExprPtr parts[3];
        int colons = 0;
        while (!accept_op("]")) {
          if (accept_op(":")) {
            if (++colons > 2) fail(pos, "a slice takes at most two ':'");
            continue;
          }
          parts[colons] = parse_cond();
        }
        if (colons == 0) {
          if (!parts[0]) fail(pos, "empty subscript []");
          auto idx = make(Expr::kIndex, pos);
          idx->args = {e, parts[0]};
          e = idx;
        } else {
          auto s = make(Expr::kSlice, pos);
          s->args = {e, parts[0], parts[1], parts[2]};
          e = s;
        }
      } else if (peek().type == Token::kOp && peek().text == "(") {
        ++k_;
        auto c = make(Expr::kCall, e->pos);
        c->args.push_back(e);
        parse_call_args(c.get());
        e = c;
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_primary() {
    const Token& t = peek();
    auto e = make(Expr::kLiteral, t.pos);
    switch (t.type) {
      case Token::kString: {
        std::string value = t_[k_++].text;
        while (peek().type == Token::kString) value += t_[k_++].text;  // adjacent literals concatenate
        e->literal = Value::string(value);
        return e;
      }
      case Token::kInt: e->literal = Value::integer(t_[k_++].i); return e;
      case Token::kFloat: e->literal = Value::number(t_[k_++].f); return e;
      case Token::kName: {
        const std::string name = t_[k_++].text;
        if (name == "true" || name == "True") e->literal = Value::boolean(true);
        else if (name == "false" || name == "False") e->literal = Value::boolean(false);
        else if (name == "none" || name == "None") e->literal = Value::none();
        else {
          e->type = Expr::kName;
          e->name = name;
        }
        return e;
      }
      case Token::kOp:
        if (accept_op("(")) {
          auto first = parse_cond();
          if (accept_op(")")) return first;
          auto list = make(Expr::kList, t.pos);  // a tuple
          list->args.push_back(first);
          while (accept_op(",")) {
            if (peek().type == Token::kOp && peek().text == ")") break;
            list->args.push_back(parse_cond());
          }
          expect_op(")");
          return list;
        }
        if (accept_op("[")) {
          e->type = Expr::kList;
          while (!accept_op("]")) {
            e->args.push_back(parse_cond());
            if (!accept_op(",")) {
              expect_op("]");
              break;
            }
          }
          return e;
        }
        if (accept_op("{")) {
          e->type = Expr::kDict;
          while (!accept_op("}")) {
            e->args.push_back(parse_cond());
            expect_op(":");
            e->args.push_back(parse_cond());
            if (!accept_op(",")) {
              expect_op("}");
              break;
            }
          }
          return e;
        }
        [[fallthrough]];
      default:
        fail(t.pos, fmt::format("unexpected '{}' in expression", describe(t)));
    }
  }

  const std::vector<Token>& t_;
  size_t k_;
};

class Parser {
 public:
  explicit Parser(std::vector<Chunk> chunks) : chunks_(std::move(chunks)) {}

  Body parse_all() {
    std::string end;
    Body body = parse_body({}, &end);
    return body;
  }

 private:
  static std::string keyword(const Chunk& c) {
    return c.type == Chunk::kStmt && c.tokens[0].type == Token::kName ? c.tokens[0].text : "";
  }

  // Parses nodes until a statement whose keyword is in `terminators` (returned in *end, not consumed).
  Body parse_body(const std::set<std::string>& terminators, std::string* end) {
    Body body;
    while (k_ < chunks_.size()) {
      const Chunk& c = chunks_[k_];
      if (c.type == Chunk::kText) {
        auto n = std::make_shared<Node>();
        n->type = Node::kText;
        n->text = c.text;
        body.push_back(n);
        ++k_;
        continue;
      }
      if (c.type == Chunk::kExpr) {
        ExprParser p(c.tokens, 0);
        auto n = std::make_shared<Node>();
        n->type = Node::kOutput;
        n->pos = c.pos;
        n->exprs = {p.parse()};
        if (!p.at_end()) fail(p.peek().pos, fmt::format("unexpected '{}' in {{{{ }}}}", ExprParser::describe(p.peek())));
        body.push_back(n);
        ++k_;
        continue;
      }
      const std::string kw = keyword(c);
      if (terminators.count(kw)) {
        *end = kw;
        return body;
      }
      body.push_back(parse_statement(c, kw));
    }
    if (!terminators.empty()) {
      std::string closing = *terminators.begin();
      for (const auto& t : terminators) {
        if (t.rfind("end", 0) == 0) closing = t;
      }
      fail(chunks_.empty() ? Pos{} : chunks_.back().pos, fmt::format("missing {{% {} %}}", closing));
    }
    return body;
  }

  void expect_end(ExprParser& p) {
    if (!p.at_end()) fail(p.peek().pos, fmt::format("unexpected '{}' at the end of the tag", ExprParser::describe(p.peek())));
  }

  std::shared_ptr<Node> parse_statement(const Chunk& c, const std::string& kw) {
    auto n = std::make_shared<Node>();
    n->pos = c.pos;
    ExprParser p(c.tokens, 1);
    ++k_;
    std::string end;
    if (kw == "if") {
      n->type = Node::kIf;
      n->exprs.push_back(p.parse());
      expect_end(p);
      while (true) {
        n->bodies.push_back(parse_body({"elif", "else", "endif"}, &end));
        const Chunk& term = chunks_[k_++];
        ExprParser tp(term.tokens, 1);
        if (end == "elif") {
          n->exprs.push_back(tp.parse());
          expect_end(tp);
        } else if (end == "else") {
          expect_end(tp);
          n->bodies.push_back(parse_body({"endif"}, &end));
          ++k_;
          break;
        } else {
          break;
        }
      }
      return n;
    }
    if (kw == "for") {
      n->type = Node::kFor;
      n->targets.push_back(p.expect_name());
      while (p.accept_op(",")) n->targets.push_back(p.expect_name());
      if (!p.accept_name("in")) fail(p.peek().pos, "expected 'in' in for loop");
      n->exprs.push_back(p.parse_no_ternary());
      if (p.accept_name("if")) n->exprs.push_back(p.parse());
      if (p.accept_name("recursive")) fail(c.pos, "recursive for loops are not supported");
      expect_end(p);
      n->bodies.push_back(parse_body({"else", "endfor"}, &end));
      ++k_;
      if (end == "else") {
        n->bodies.push_back(parse_body({"endfor"}, &end));
        ++k_;
      }
      return n;
    }
    if (kw == "set") {
      n->text = p.expect_name();
      if (p.accept_op(".")) n->attr = p.expect_name();
      if (p.accept_op("=")) {
        n->type = Node::kSet;
        n->exprs.push_back(p.parse());
        expect_end(p);
        return n;
      }
      expect_end(p);
      n->type = Node::kSetBlock;
      n->bodies.push_back(parse_body({"endset"}, &end));
      ++k_;
      return n;
    }
    if (kw == "macro") {
      n->type = Node::kMacro;
      n->text = p.expect_name();
      p.expect_op("(");
      while (!p.accept_op(")")) {
        n->targets.push_back(p.expect_name());
        n->exprs.push_back(p.accept_op("=") ? p.parse() : nullptr);
        if (!p.accept_op(",")) {
          p.expect_op(")");
          break;
        }
      }
      expect_end(p);
      n->bodies.push_back(parse_body({"endmacro"}, &end));
      ++k_;
      return n;
    }
    if (kw == "break" || kw == "continue") {
      n->type = kw == "break" ? Node::kBreak : Node::kContinue;
      expect_end(p);
      return n;
    }
    if (kw == "generation") {  // transformers' AssistantTracker marks; rendered as its body
      n->type = Node::kBlock;
      n->bodies.push_back(parse_body({"endgeneration"}, &end));
      ++k_;
      return n;
    }
    fail(c.pos, fmt::format("statement '{{% {} %}}' is not supported by rlcpp's template engine", kw));
  }

  std::vector<Chunk> chunks_;
  size_t k_ = 0;
};


// ---------------------------------------------------------------------------------------------
// Evaluation.

class Scope {
 public:
  explicit Scope(Scope* parent) : parent_(parent) {}
  const Value* find(const std::string& name) const {
    auto it = vars_.find(name);
    if (it != vars_.end()) return &it->second;
    return parent_ ? parent_->find(name) : nullptr;
  }
  void set(const std::string& name, Value value) { vars_[name] = std::move(value); }

 private:
  Scope* parent_;
  std::map<std::string, Value> vars_;
};

enum class Flow { kNormal, kBreak, kContinue };

// Python-style slice bounds.
std::vector<int64_t> slice_indices(int64_t length, const Value& start, const Value& stop, const Value& step_v) {
  const int64_t step = step_v.is_undefined() || step_v.is_none() ? 1 : step_v.i;
  std::vector<int64_t> out;
  if (step == 0) return out;
  auto clamp = [&](const Value& v, int64_t fallback) {
    if (v.is_undefined() || v.is_none()) return fallback;
    int64_t x = v.i;
    if (x < 0) x += length;
    if (step > 0) return std::clamp<int64_t>(x, 0, length);
    return std::clamp<int64_t>(x, -1, length - 1);
  };
  const int64_t begin = clamp(start, step > 0 ? 0 : length - 1);
  const int64_t end = clamp(stop, step > 0 ? length : -1);
  for (int64_t k = begin; step > 0 ? k < end : k > end; k += step) out.push_back(k);
  return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string strip_chars(const std::string& s, const Value& chars, bool left, bool right) {
  auto in_set = [&](char c) { return chars.is_string() ? chars.s.find(c) != std::string::npos : is_space(c); };
  size_t b = 0, e = s.size();
  if (left) while (b < e && in_set(s[b])) ++b;
  if (right) while (e > b && in_set(s[e - 1])) --e;
  return s.substr(b, e - b);
}

Value split_string(const std::string& s, const Value& sep, int64_t maxsplit) {
  List parts;
  if (!sep.is_string()) {  // whitespace runs, no empty strings
    size_t k = 0;
    while (k < s.size()) {
      while (k < s.size() && is_space(s[k])) ++k;
      if (k >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(Value::string(strip_chars(s.substr(k), Value(), false, true)));
        break;
      }
      size_t e = k;
      while (e < s.size() && !is_space(s[e])) ++e;
      parts.push_back(Value::string(s.substr(k, e - k)));
      k = e;
    }
    return Value::make_list(std::move(parts));
  }
  if (sep.s.empty()) throw_user_error("chat template: split() with an empty separator");
  size_t k = 0;
  while (true) {
    const size_t found = s.find(sep.s, k);
    if (found == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
      parts.push_back(Value::string(s.substr(k)));
      break;
    }
    parts.push_back(Value::string(s.substr(k, found - k)));
    k = found + sep.s.size();
  }
  return Value::make_list(std::move(parts));
}

std::string replace_all(std::string s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  size_t k = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    k = s.find(from, k);
    if (k == std::string::npos) break;
    s.replace(k, from.size(), to);
    k += to.size();
  }
  return s;
}

std::string title_case(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      c = start ? static_cast<char>(std::toupper(c)) : static_cast<char>(std::tolower(c));
      start = false;
    } else {
      start = true;
    }
  }
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

const Value* kwarg(const KwArgs& kwargs, const std::string& name) {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return &v;
  }
  return nullptr;
}

// Argument `index` or keyword `name`, else undefined.
Value arg(const List& args, const KwArgs& kwargs, size_t index, const std::string& name) {
  if (index < args.size()) return args[index];
  if (const Value* v = kwarg(kwargs, name)) return *v;
  return Value();
}

class Evaluator {
 public:
  explicit Evaluator(std::string* out) : out_(out) {}

  Flow exec(const Body& body, Scope& scope) {
    for (const auto& node : body) {
      const Flow flow = exec(*node, scope);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

 private:
  Flow exec(const Node& n, Scope& scope) {
    switch (n.type) {
      case Node::kText: *out_ += n.text; return Flow::kNormal;
      case Node::kOutput: *out_ += eval(*n.exprs[0], scope).str(); return Flow::kNormal;
      case Node::kIf:
        for (size_t k = 0; k < n.bodies.size(); ++k) {
          if (k >= n.exprs.size() || eval(*n.exprs[k], scope).truthy()) return exec(n.bodies[k], scope);
        }
        return Flow::kNormal;
      case Node::kFor: return exec_for(n, scope);
      case Node::kSet: {
        Value value = eval(*n.exprs[0], scope);
        assign(n, scope, std::move(value));
        return Flow::kNormal;
      }
      case Node::kSetBlock: {
        std::string captured;
        std::string* saved = out_;
        out_ = &captured;
        exec(n.bodies[0], scope);
        out_ = saved;
        assign(n, scope, Value::string(captured));
        return Flow::kNormal;
      }
      case Node::kMacro: {
        const Node* macro = &n;
        Scope* defining = &scope;
        scope.set(n.text, Value::callable([this, macro, defining](List& args, KwArgs& kwargs) {
          Scope local(defining);
          for (size_t k = 0; k < macro->targets.size(); ++k) {
            Value v = arg(args, kwargs, k, macro->targets[k]);
            if (v.is_undefined() && macro->exprs[k]) v = eval(*macro->exprs[k], local);
            local.set(macro->targets[k], v);
          }
          std::string captured;
          std::string* saved = out_;
          out_ = &captured;
          exec(macro->bodies[0], local);
          out_ = saved;
          return Value::string(captured);
        }));
        return Flow::kNormal;
      }
      case Node::kBreak: return Flow::kBreak;
      case Node::kContinue: return Flow::kContinue;
      case Node::kBlock: return exec(n.bodies[0], scope);
    }
    return Flow::kNormal;
  }

  void assign(const Node& n, Scope& scope, Value value) {
    if (n.attr.empty()) {
      scope.set(n.text, std::move(value));
      return;
    }
    const Value* target = scope.find(n.text);
    if (target == nullptr || !target->is_namespace) {
      fail(n.pos, fmt::format("cannot set attribute '{}' of '{}': only namespace() objects take attributes", n.attr,
                              n.text));
    }
    target->dict->set(n.attr, std::move(value));
  }

  List iterate(const Value& v, const Pos& pos) {
    if (v.is_list()) return *v.list;
    if (v.is_dict()) {
      List keys;
      for (const auto& [k, value] : v.dict->items) keys.push_back(Value::string(k));
      return keys;
    }
    if (v.is_string()) {
      List chars;
      size_t k = 0;
      while (k < v.s.size()) {
        size_t len = 1;
        const unsigned char lead = static_cast<unsigned char>(v.s[k]);
        if (lead >= 0xF0) len = 4; else if (lead >= 0xE0) len = 3; else if (lead >= 0xC0) len = 2;
        chars.push_back(Value::string(v.s.substr(k, len)));
        k += len;
      }
      return chars;
    }
    if (v.is_undefined() || v.is_none()) return {};
    fail(pos, fmt::format("cannot iterate over a {}", v.type_name()));
  }

  Flow exec_for(const Node& n, Scope& scope) {
    List items = iterate(eval(*n.exprs[0], scope), n.pos);
    if (n.exprs.size() > 1) {  // loop filter
      List kept;
      for (const auto& item : items) {
        Scope probe(&scope);
        bind_targets(n, probe, item);
        if (eval(*n.exprs[1], probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (n.bodies.size() > 1) {
        Scope local(&scope);
        exec(n.bodies[1], local);
      }
      return Flow::kNormal;
    }
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < length; ++k) {
      Scope local(&scope);
      bind_targets(n, local, items[k]);
      Value loop = Value::make_dict();
      loop.dict->set("index", Value::integer(k + 1));
      loop.dict->set("index0", Value::integer(k));
      loop.dict->set("revindex", Value::integer(length - k));
      loop.dict->set("revindex0", Value::integer(length - k - 1));
      loop.dict->set("first", Value::boolean(k == 0));
      loop.dict->set("last", Value::boolean(k == length - 1));
      loop.dict->set("length", Value::integer(length));
      loop.dict->set("previtem", k > 0 ? items[k - 1] : Value());
      loop.dict->set("nextitem", k + 1 < length ? items[k + 1] : Value());
      loop.dict->set("cycle", Value::callable([k](List& args, KwArgs&) {
        return args.empty() ? Value() : args[static_cast<size_t>(k) % args.size()];
      }));
      local.set("loop", loop);
      const Flow flow = exec(n.bodies[0], local);
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void bind_targets(const Node& n, Scope& scope, const Value& item) {
    if (n.targets.size() == 1) {
      scope.set(n.targets[0], item);
      return;
    }
    if (!item.is_list() || item.list->size() != n.targets.size()) {
      fail(n.pos, fmt::format("cannot unpack a {} into {} loop variables", item.type_name(), n.targets.size()));
    }
    for (size_t k = 0; k < n.targets.size(); ++k) scope.set(n.targets[k], (*item.list)[k]);
  }

  Value eval(const Expr& e, Scope& scope) {
    switch (e.type) {
      case Expr::kLiteral: return e.literal;
      case Expr::kName: {
        if (const Value* v = scope.find(e.name)) return *v;
        return global(e.name, e.pos);
      }
      case Expr::kAttr: return attribute(eval(*e.args[0], scope), e.name, e.pos);
      case Expr::kIndex: return index(eval(*e.args[0], scope), eval(*e.args[1], scope), e.pos);
      case Expr::kSlice: {
        Value base = eval(*e.args[0], scope);
        Value parts[3];
        for (int k = 0; k < 3; ++k) {
          if (e.args[k + 1]) parts[k] = eval(*e.args[k + 1], scope);
        }
        if (base.is_string()) {
          std::string out;
          for (int64_t k : slice_indices(static_cast<int64_t>(base.s.size()), parts[0], parts[1], parts[2])) {
            out += base.s[static_cast<size_t>(k)];
          }
          return Value::string(out);
        }
        if (base.is_list()) {
          List out;
          for (int64_t k : slice_indices(static_cast<int64_t>(base.list->size()), parts[0], parts[1], parts[2])) {
            out.push_back((*base.list)[static_cast<size_t>(k)]);
          }
          return Value::make_list(std::move(out));
        }
        fail(e.pos, fmt::format("cannot slice a {}", base.type_name()));
      }
      case Expr::kCall: {
        Value fn = eval(*e.args[0], scope);
        List args;
        for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k], scope));
        KwArgs kwargs;
        for (const auto& [k, v] : e.kwargs) kwargs.emplace_back(k, eval(*v, scope));
        if (fn.kind != Value::Kind::kCallable) fail(e.pos, fmt::format("a {} is not callable", fn.type_name()));
        return (*fn.fn)(args, kwargs);
      }
      case Expr::kFilter: {
        List args;
        for (const auto& a : e.args) args.push_back(eval(*a, scope));
        KwArgs kwargs;
        for (const auto& [k, v] : e.kwargs) kwargs.emplace_back(k, eval(*v, scope));
        return filter(e.name, args, kwargs, e.pos);
      }
      case Expr::kTest: {
        List args;
        for (const auto& a : e.args) args.push_back(eval(*a, scope));
        const bool result = test(e.name, args, e.pos);
        return Value::boolean(e.negated ? !result : result);
      }
      case Expr::kUnary: {
        Value v = eval(*e.args[0], scope);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (!v.is_number()) fail(e.pos, fmt::format("unary {} on a {}", e.name, v.type_name()));
        if (e.name == "+") return v;
        return v.kind == Value::Kind::kInt ? Value::integer(-v.i) : Value::number(-v.f);
      }
      case Expr::kBinary: return binary(e, scope);
      case Expr::kCond:
        if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
        return e.args.size() > 2 ? eval(*e.args[2], scope) : Value();
      case Expr::kList: {
        List items;
        for (const auto& a : e.args) items.push_back(eval(*a, scope));
        return Value::make_list(std::move(items));
      }
      case Expr::kDict: {
        Value dict = Value::make_dict();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          dict.dict->set(eval(*e.args[k], scope).str(), eval(*e.args[k + 1], scope));
        }
        return dict;
      }
    }
    return Value();
  }

  Value binary(const Expr& e, Scope& scope) {
    const std::string& op = e.name;
    Value a = eval(*e.args[0], scope);
    if (op == "and") return a.truthy() ? eval(*e.args[1], scope) : a;
    if (op == "or") return a.truthy() ? a : eval(*e.args[1], scope);
    Value b = eval(*e.args[1], scope);
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "~") return Value::string(a.str() + b.str());
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.is_string()) found = b.s.find(a.str()) != std::string::npos;
      else if (b.is_list()) found = std::any_of(b.list->begin(), b.list->end(), [&](const Value& x) { return equal(x, a); });
      else if (b.is_dict()) found = b.dict->find(a.str()) != nullptr;
      else if (!b.is_undefined() && !b.is_none()) fail(e.pos, fmt::format("'in' on a {}", b.type_name()));
      return Value::boolean(op == "in" ? found : !found);
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp = 0;
      if (a.is_number() && b.is_number()) cmp = a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double();
      else if (a.is_string() && b.is_string()) cmp = a.s.compare(b.s) < 0 ? -1 : a.s.compare(b.s) > 0;
      else fail(e.pos, fmt::format("cannot compare {} {} {}", a.type_name(), op, b.type_name()));
      if (op == "<") return Value::boolean(cmp < 0);
      if (op == ">") return Value::boolean(cmp > 0);
      if (op == "<=") return Value::boolean(cmp <= 0);
      return Value::boolean(cmp >= 0);
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value::string(a.s + b.s);
      if (a.is_list() && b.is_list()) {
        List items = *a.list;
        items.insert(items.end(), b.list->begin(), b.list->end());
        return Value::make_list(std::move(items));
      }
    }
    if (op == "*" && a.is_string() && b.kind == Value::Kind::kInt) {
      std::string out;
      for (int64_t k = 0; k < b.i; ++k) out += a.s;
      return Value::string(out);
    }
    if (!(a.is_number() || a.kind == Value::Kind::kBool) || !(b.is_number() || b.kind == Value::Kind::kBool)) {
      fail(e.pos, fmt::format("unsupported operands for {}: {} and {}", op, a.type_name(), b.type_name()));
    }
    const bool ints = a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat;
    const int64_t ai = a.kind == Value::Kind::kBool ? a.b : a.i, bi = b.kind == Value::Kind::kBool ? b.b : b.i;
    const double ad = a.as_double(), bd = b.as_double();
    if (op == "+") return ints ? Value::integer(ai + bi) : Value::number(ad + bd);
    if (op == "-") return ints ? Value::integer(ai - bi) : Value::number(ad - bd);
    if (op == "*") return ints ? Value::integer(ai * bi) : Value::number(ad * bd);
    if (op == "**") return ints && bi >= 0 ? Value::integer(static_cast<int64_t>(std::pow(ai, bi))) : Value::number(std::pow(ad, bd));
    if (bd == 0) fail(e.pos, "division by zero");
    if (op == "/") return Value::number(ad / bd);
    if (op == "//") {
      if (ints) return Value::integer(static_cast<int64_t>(std::floor(static_cast<double>(ai) / static_cast<double>(bi))));
      return Value::number(std::floor(ad / bd));
    }
    if (op == "%") {
      if (ints) return Value::integer(((ai % bi) + bi) % bi);
      return Value::number(ad - bd * std::floor(ad / bd));
    }
    fail(e.pos, fmt::format("unknown operator {}", op));
  }

  Value index(const Value& base, const Value& key, const Pos& pos) {
    if (base.is_list() && key.kind == Value::Kind::kInt) {
      int64_t k = key.i < 0 ? key.i + static_cast<int64_t>(base.list->size()) : key.i;
      if (k < 0 || k >= static_cast<int64_t>(base.list->size())) return Value();
      return (*base.list)[static_cast<size_t>(k)];
    }
    if (base.is_string() && key.kind == Value::Kind::kInt) {
      int64_t k = key.i < 0 ? key.i + static_cast<int64_t>(base.s.size()) : key.i;
      if (k < 0 || k >= static_cast<int64_t>(base.s.size())) return Value();
      return Value::string(base.s.substr(static_cast<size_t>(k), 1));
    }
    if (base.is_dict() && key.is_string()) {
      const Value* v = base.dict->find(key.s);
      return v ? *v : Value();
    }
    if (base.is_undefined() || base.is_none()) return Value();
    fail(pos, fmt::format("cannot index a {} with a {}", base.type_name(), key.type_name()));
  }

  Value attribute(const Value& base, const std::string& name, const Pos& pos) {
    if (base.is_dict()) {
      static const std::set<std::string> methods = {"items", "keys", "values", "get"};
      if (!methods.count(name) || base.is_namespace) {
        const Value* v = base.dict->find(name);
        return v ? *v : Value();
      }
      auto dict = base.dict;
      return Value::callable([dict, name](List& args, KwArgs&) {
        if (name == "get") {
          const Value* v = args.empty() ? nullptr : dict->find(args[0].str());
          return v ? *v : (args.size() > 1 ? args[1] : Value::none());
        }
        List out;
        for (const auto& [k, v] : dict->items) {
          if (name == "items") out.push_back(Value::make_list({Value::string(k), v}));
          else if (name == "keys") out.push_back(Value::string(k));
          else out.push_back(v);
        }
        return Value::make_list(std::move(out));
      });
    }
    if (base.is_string()) return string_method(base.s, name, pos);
    if (base.is_list() && (name == "index" || name == "count")) {
      auto list = base.list;
      return Value::callable([list, name](List& args, KwArgs&) {
        int64_t count = 0;
        for (size_t k = 0; k < list->size(); ++k) {
          if (!args.empty() && equal((*list)[k], args[0])) {
            if (name == "index") return Value::integer(static_cast<int64_t>(k));
            ++count;
          }
        }
        return name == "index" ? Value::integer(-1) : Value::integer(count);
      });
    }
    if (base.is_undefined() || base.is_none() || base.is_list() || base.is_number()) return Value();
    fail(pos, fmt::format("a {} has no attribute '{}'", base.type_name(), name));
  }

  Value string_method(const std::string& s, const std::string& name, const Pos& pos) {
    static const std::set<std::string> known = {"startswith", "endswith", "strip", "lstrip", "rstrip", "split",
                                                "upper", "lower", "title", "capitalize", "replace", "find",
                                                "count", "join", "isdigit", "isspace", "isalpha", "format"};
    if (!known.count(name)) fail(pos, fmt::format("string method '{}' is not supported", name));
    return Value::callable([s, name](List& args, KwArgs& kwargs) -> Value {
      auto affix = [&](bool prefix) {
        List candidates = !args.empty() && args[0].is_list() ? *args[0].list : List{arg(args, kwargs, 0, "prefix")};
        for (const auto& c : candidates) {
          const std::string& x = c.s;
          if (x.size() <= s.size() && (prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0)) {
            return Value::boolean(true);
          }
        }
        return Value::boolean(false);
      };
      if (name == "startswith") return affix(true);
      if (name == "endswith") return affix(false);
      if (name == "strip") return Value::string(strip_chars(s, arg(args, kwargs, 0, "chars"), true, true));
      if (name == "lstrip") return Value::string(strip_chars(s, arg(args, kwargs, 0, "chars"), true, false));
      if (name == "rstrip") return Value::string(strip_chars(s, arg(args, kwargs, 0, "chars"), false, true));
      if (name == "split") {
        Value maxsplit = arg(args, kwargs, 1, "maxsplit");
        return split_string(s, arg(args, kwargs, 0, "sep"), maxsplit.kind == Value::Kind::kInt ? maxsplit.i : -1);
      }
      if (name == "upper") return Value::string(upper(s));
      if (name == "lower") return Value::string(lower(s));
      if (name == "title") return Value::string(title_case(s));
      if (name == "capitalize") return Value::string(s.empty() ? s : upper(s.substr(0, 1)) + lower(s.substr(1)));
      if (name == "replace") {
        Value count = arg(args, kwargs, 2, "count");
        return Value::string(replace_all(s, arg(args, kwargs, 0, "old").str(), arg(args, kwargs, 1, "new").str(),
                                         count.kind == Value::Kind::kInt ? count.i : -1));
      }
      if (name == "find") {
        const size_t k = s.find(arg(args, kwargs, 0, "sub").str());
        return Value::integer(k == std::string::npos ? -1 : static_cast<int64_t>(k));
      }
      if (name == "count") {
        const std::string sub = arg(args, kwargs, 0, "sub").str();
        int64_t n = 0;
        for (size_t k = sub.empty() ? std::string::npos : s.find(sub); k != std::string::npos; k = s.find(sub, k + sub.size())) ++n;
        return Value::integer(n);
      }
      if (name == "join") {
        std::string out;
        const Value items = arg(args, kwargs, 0, "iterable");
        if (items.is_list()) {
          for (size_t k = 0; k < items.list->size(); ++k) out += (k ? s : "") + (*items.list)[k].str();
        }
        return Value::string(out);
      }
      if (name == "isdigit" || name == "isspace" || name == "isalpha") {
        if (s.empty()) return Value::boolean(false);
        for (unsigned char c : s) {
          const bool ok = name == "isdigit" ? std::isdigit(c) : name == "isspace" ? is_space(static_cast<char>(c)) : std::isalpha(c);
          if (!ok) return Value::boolean(false);
        }
        return Value::boolean(true);
      }
      // format: positional {} only
      std::string out;
      size_t next = 0;
      for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] == '{' && k + 1 < s.size() && s[k + 1] == '}') {
          out += next < args.size() ? args[next++].str() : "";
          ++k;
        } else {
          out += s[k];
        }
      }
      return Value::string(out);
    });
  }

  Value global(const std::string& name, const Pos& pos) {
    if (name == "raise_exception") {
      return Value::callable([pos](List& args, KwArgs&) -> Value {
        throw_user_error("chat template {}: raise_exception: {}", pos.str(), args.empty() ? "" : args[0].str());
      });
    }
    if (name == "range") {
      return Value::callable([pos](List& args, KwArgs&) {
        int64_t start = 0, stop = 0, step = 1;
        if (args.size() == 1) stop = args[0].i;
        else if (args.size() >= 2) { start = args[0].i; stop = args[1].i; }
        if (args.size() >= 3) step = args[2].i;
        if (step == 0) fail(pos, "range() step must not be zero");
        List out;
        for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
          out.push_back(Value::integer(k));
          if (out.size() > 1000000) fail(pos, "range() too large");
        }
        return Value::make_list(std::move(out));
      });
    }
    if (name == "namespace" || name == "dict") {
      const bool ns = name == "namespace";
      return Value::callable([ns](List& args, KwArgs& kwargs) {
        Value v = Value::make_dict();
        v.is_namespace = ns;
        if (!args.empty() && args[0].is_dict()) v.dict->items = args[0].dict->items;
        for (const auto& [k, value] : kwargs) v.dict->set(k, value);
        return v;
      });
    }
    if (name == "strftime_now") {
      return Value::callable([](List& args, KwArgs&) {
        const std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char buffer[256];
        const size_t n = std::strftime(buffer, sizeof buffer, args.empty() ? "%d %b %Y" : args[0].str().c_str(), &tm);
        return Value::string(std::string(buffer, n));
      });
    }
    return Value();  // undefined
  }

  bool test(const std::string& name, const List& args, const Pos& pos) {
    const Value& v = args[0];
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "number") return v.is_number();
    if (name == "integer") return v.kind == Value::Kind::kInt;
    if (name == "float") return v.kind == Value::Kind::kFloat;
    if (name == "boolean") return v.kind == Value::Kind::kBool;
    if (name == "true") return v.kind == Value::Kind::kBool && v.b;
    if (name == "false") return v.kind == Value::Kind::kBool && !v.b;
    if (name == "mapping") return v.is_dict();
    if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string();
    if (name == "sequence") return v.is_list() || v.is_string() || v.is_dict();
    if (name == "callable") return v.kind == Value::Kind::kCallable;
    if (name == "lower") return v.is_string() && lower(v.s) == v.s;
    if (name == "upper") return v.is_string() && upper(v.s) == v.s;
    if (name == "odd" || name == "even") {
      if (v.kind != Value::Kind::kInt) fail(pos, fmt::format("'{}' test on a {}", name, v.type_name()));
      return (((v.i % 2) + 2) % 2 == 1) == (name == "odd");
    }
    if (args.size() < 2) fail(pos, fmt::format("test '{}' is not supported or needs an argument", name));
    const Value& other = args[1];
    if (name == "divisibleby") return other.i != 0 && v.kind == Value::Kind::kInt && v.i % other.i == 0;
    if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return equal(v, other);
    if (name == "ne" || name == "!=") return !equal(v, other);
    if (name == "in") {
      if (other.is_list()) return std::any_of(other.list->begin(), other.list->end(), [&](const Value& x) { return equal(x, v); });
      if (other.is_string()) return other.s.find(v.str()) != std::string::npos;
      if (other.is_dict()) return other.dict->find(v.str()) != nullptr;
      return false;
    }
    if (name == "lt" || name == "<" || name == "gt" || name == ">" || name == "le" || name == "<=" || name == "ge" ||
        name == ">=") {
      const double a = v.as_double(), b = other.as_double();
      if (name == "lt" || name == "<") return a < b;
      if (name == "gt" || name == ">") return a > b;
      if (name == "le" || name == "<=") return a <= b;
      return a >= b;
    }
    fail(pos, fmt::format("test '{}' is not supported", name));
  }

  Value filter(const std::string& name, List& args, KwArgs& kwargs, const Pos& pos) {
    Value v = args[0];
    List rest(args.begin() + 1, args.end());
    auto length_of = [&](const Value& x) -> int64_t {
      if (x.is_string()) {
        int64_t n = 0;
        for (unsigned char c : x.s) n += (c & 0xc0) != 0x80;
        return n;
      }
      if (x.is_list()) return static_cast<int64_t>(x.list->size());
      if (x.is_dict()) return static_cast<int64_t>(x.dict->items.size());
      fail(pos, fmt::format("length of a {}", x.type_name()));
    };
    if (name == "trim") return Value::string(strip_chars(v.str(), arg(rest, kwargs, 0, "chars"), true, true));
    if (name == "tojson") {
      Value indent = arg(rest, kwargs, 0, "indent");
      Value sort_keys = arg(rest, kwargs, 1, "sort_keys");
      return Value::string(to_json(v, indent.kind == Value::Kind::kInt ? static_cast<int>(indent.i) : -1, sort_keys.truthy()));
    }
    if (name == "length" || name == "count") return Value::integer(length_of(v));
    if (name == "upper") return Value::string(upper(v.str()));
    if (name == "lower") return Value::string(lower(v.str()));
    if (name == "title") return Value::string(title_case(v.str()));
    if (name == "capitalize") {
      const std::string s = v.str();
      return Value::string(s.empty() ? s : upper(s.substr(0, 1)) + lower(s.substr(1)));
    }
    if (name == "string") return Value::string(v.str());
    if (name == "safe" || name == "e" || name == "escape") return v;
    if (name == "list") return Value::make_list(iterate(v, pos));
    if (name == "first" || name == "last") {
      List items = iterate(v, pos);
      if (items.empty()) return Value();
      return name == "first" ? items.front() : items.back();
    }
    if (name == "reverse") {
      if (v.is_string()) return Value::string(std::string(v.s.rbegin(), v.s.rend()));
      List items = iterate(v, pos);
      std::reverse(items.begin(), items.end());
      return Value::make_list(std::move(items));
    }
    if (name == "join") {
      const Value sep = arg(rest, kwargs, 0, "d");
      const Value attribute_name = arg(rest, kwargs, 1, "attribute");
      std::string out;
      List items = iterate(v, pos);
      for (size_t k = 0; k < items.size(); ++k) {
        const Value item = attribute_name.is_string() ? index(items[k], attribute_name, pos) : items[k];
        out += (k ? sep.str() : "") + item.str();
      }
      return Value::string(out);
    }
    if (name == "default" || name == "d") {
      const Value fallback = arg(rest, kwargs, 0, "default_value");
      const bool boolean = arg(rest, kwargs, 1, "boolean").truthy();
      if (v.is_undefined() || (boolean && !v.truthy())) return fallback.is_undefined() ? Value::string("") : fallback;
      return v;
    }
    if (name == "int") {
      if (v.kind == Value::Kind::kInt) return v;
      if (v.kind == Value::Kind::kFloat) return Value::integer(static_cast<int64_t>(v.f));
      if (v.kind == Value::Kind::kBool) return Value::integer(v.b);
      try { return Value::integer(std::stoll(v.str())); } catch (...) { return Value::integer(0); }
    }
    if (name == "float") {
      if (v.is_number()) return Value::number(v.as_double());
      try { return Value::number(std::stod(v.str())); } catch (...) { return Value::number(0.0); }
    }
    if (name == "abs") return v.kind == Value::Kind::kInt ? Value::integer(std::llabs(v.i)) : Value::number(std::fabs(v.as_double()));
    if (name == "round") {
      const Value precision = arg(rest, kwargs, 0, "precision");
      const double scale = std::pow(10.0, precision.kind == Value::Kind::kInt ? precision.i : 0);
      return Value::number(std::round(v.as_double() * scale) / scale);
    }
    if (name == "replace") {
      Value count = arg(rest, kwargs, 2, "count");
      return Value::string(replace_all(v.str(), arg(rest, kwargs, 0, "old").str(), arg(rest, kwargs, 1, "new").str(),
                                       count.kind == Value::Kind::kInt ? count.i : -1));
    }
    if (name == "items") {
      if (!v.is_dict()) fail(pos, fmt::format("items of a {}", v.type_name()));
      List out;
      for (const auto& [k, value] : v.dict->items) out.push_back(Value::make_list({Value::string(k), value}));
      return Value::make_list(std::move(out));
    }
    if (name == "indent") {
      const Value width_v = arg(rest, kwargs, 0, "width");
      const std::string pad = width_v.is_string() ? width_v.s : std::string(width_v.kind == Value::Kind::kInt ? width_v.i : 4, ' ');
      const bool first = arg(rest, kwargs, 1, "first").truthy();
      const bool blank = arg(rest, kwargs, 2, "blank").truthy();
      const std::string s = v.str();
      std::string out;
      size_t start = 0;
      bool first_line = true;
      while (true) {
        const size_t nl = s.find('\n', start);
        const std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
        if ((first_line ? first : true) && (blank || !line.empty())) out += pad;
        out += line;
        if (nl == std::string::npos) break;
        out += '\n';
        start = nl + 1;
        first_line = false;
      }
      return Value::string(out);
    }
    if (name == "unique") {
      List out;
      for (const auto& item : iterate(v, pos)) {
        if (std::none_of(out.begin(), out.end(), [&](const Value& x) { return equal(x, item); })) out.push_back(item);
      }
      return Value::make_list(std::move(out));
    }
    if (name == "sum" || name == "max" || name == "min") {
      List items = iterate(v, pos);
      if (name == "sum") {
        Value total = Value::integer(0);
        for (const auto& item : items) {
          total = total.kind == Value::Kind::kInt && item.kind == Value::Kind::kInt ? Value::integer(total.i + item.i)
                                                                                    : Value::number(total.as_double() + item.as_double());
        }
        return total;
      }
      if (items.empty()) return Value();
      Value best = items[0];
      for (const auto& item : items) {
        const bool less = item.is_string() ? item.s < best.s : item.as_double() < best.as_double();
        if (name == "min" ? less : (!less && !equal(item, best))) best = item;
      }
      return best;
    }
    if (name == "map") {
      const Value attribute_name = arg({}, kwargs, 0, "attribute");
      List out;
      for (const auto& item : iterate(v, pos)) {
        if (attribute_name.is_string()) {
          out.push_back(index(item, attribute_name, pos));
        } else if (!rest.empty()) {
          List fargs{item};
          fargs.insert(fargs.end(), rest.begin() + 1, rest.end());
          KwArgs none;
          out.push_back(filter(rest[0].str(), fargs, none, pos));
        }
      }
      return Value::make_list(std::move(out));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      const bool attr = name.ends_with("attr");
      const bool keep_if = name.starts_with("select");
      List out;
      for (const auto& item : iterate(v, pos)) {
        size_t k = 0;
        Value subject = attr ? index(item, rest.at(k++), pos) : item;
        bool result;
        if (k < rest.size()) {
          List targs{subject};
          targs.insert(targs.end(), rest.begin() + static_cast<long>(k) + 1, rest.end());
          result = test(rest[k].str(), targs, pos);
        } else {
          result = subject.truthy();
        }
        if (result == keep_if) out.push_back(item);
      }
      return Value::make_list(std::move(out));
    }
    if (name == "wordcount") {
      return Value::integer(static_cast<int64_t>(split_string(v.str(), Value(), -1).list->size()));
    }
    fail(pos, fmt::format("filter '{}' is not supported by rlcpp's template engine", name));
  }

  std::string* out_;
};

}  // namespace

struct Program {
  Body body;
};

Template::Template(const std::string& source) : program_(std::make_unique<Program>()) {
  program_->body = Parser(Lexer(source).run()).parse_all();
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& variables) const {
  std::string out;
  Scope globals(nullptr);
  if (variables.is_object()) {
    for (auto it = variables.begin(); it != variables.end(); ++it) globals.set(it.key(), from_json(it.value()));
  }
  Scope scope(&globals);
  Evaluator(&out).exec(program_->body, scope);
  return out;
}

}  // namespace rlcpp::jinja
