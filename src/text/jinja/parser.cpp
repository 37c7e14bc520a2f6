#include "text/jinja/parser.h"

#include <fmt/format.h>

#include <set>

#include "util/error.h"

namespace rlcpp::jinja {

namespace {

// Nesting limits: a template is parsed and evaluated by recursion, so depth is bounded (real chat
// templates nest a few levels; a hostile one could otherwise overflow the stack).
constexpr int kMaxNesting = 200;

// Counts one level of nesting for as long as it lives; past kMaxNesting, an error at `pos`.
class Nested {
 public:
  Nested(int& depth, const Pos& pos) : depth_(depth) {
    if (++depth_ > kMaxNesting) fail(pos, fmt::format("nested deeper than {} levels", kMaxNesting));
  }
  ~Nested() { --depth_; }
  Nested(const Nested&) = delete;
  Nested& operator=(const Nested&) = delete;

 private:
  int& depth_;
};

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
    Nested nested(depth_, peek().pos);
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
    Nested nested(depth_, peek().pos);
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
    Nested nested(depth_, peek().pos);
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
  int depth_ = 0;
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
    Nested nested(depth_, k_ < chunks_.size() ? chunks_[k_].pos : Pos{});
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
  int depth_ = 0;
};

}  // namespace

Body parse(std::vector<Chunk> chunks) { return Parser(std::move(chunks)).parse_all(); }

}  // namespace rlcpp::jinja
