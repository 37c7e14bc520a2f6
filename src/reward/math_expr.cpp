#include "reward/math_expr.h"

#include <cctype>
#include <cmath>

namespace rlcpp {

namespace {
constexpr size_t kMaxLength = 512;
constexpr int kMaxDepth = 200;  // recursion levels: about 40 nested parentheses
constexpr size_t kMaxNodes = 4096;
}  // namespace

class MathParser {
 public:
  MathParser(std::string_view text, MathExpr* out) : s_(text), out_(out) {}

  bool run() {
    out_->root_ = expr(0);
    skip();
    return ok_ && out_->root_ >= 0 && k_ == s_.size();
  }

 private:
  void skip() {
    while (k_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[k_]))) {
        ++k_;
      } else if (s_.compare(k_, 2, "\\,") == 0 || s_.compare(k_, 2, "\\;") == 0 || s_.compare(k_, 2, "\\:") == 0 ||
                 s_.compare(k_, 2, "\\ ") == 0 || s_.compare(k_, 2, "\\!") == 0) {
        k_ += 2;
      } else {
        break;
      }
    }
  }
  bool peek(std::string_view t) {
    skip();
    return s_.compare(k_, t.size(), t) == 0;
  }
  bool accept(std::string_view t) {
    if (!peek(t)) return false;
    k_ += t.size();
    return true;
  }
  // A known LaTeX command at k_ ("\frac" → "frac"), without consuming. Known names are matched as
  // prefixes, longest first, since normalisation removed the spaces ("\pi r" became "\pir").
  std::string_view command() {
    skip();
    if (k_ >= s_.size() || s_[k_] != '\\') return {};
    static const std::string_view known[] = {"frac", "sqrt", "cdot", "times", "infty", "div", "sin", "cos",
                                             "tan", "csc", "sec", "cot", "exp", "log", "ln", "pi"};
    for (std::string_view name : known) {
      if (s_.compare(k_ + 1, name.size(), name) == 0) return name;
    }
    size_t e = k_ + 1;
    while (e < s_.size() && std::isalpha(static_cast<unsigned char>(s_[e]))) ++e;
    return s_.substr(k_ + 1, e - k_ - 1);  // unknown: the caller fails on it
  }
  int node(MathExpr::Node n) {
    if (out_->nodes_.size() >= kMaxNodes) {
      ok_ = false;
      return -1;
    }
    out_->nodes_.push_back(n);
    return static_cast<int>(out_->nodes_.size()) - 1;
  }
  int binary(MathExpr::Node::Op op, int a, int b) {
    if (a < 0 || b < 0) {
      ok_ = false;
      return -1;
    }
    MathExpr::Node n;
    n.op = op;
    n.a = a;
    n.b = b;
    return node(n);
  }
  bool deep(int depth) {
    if (depth > kMaxDepth) ok_ = false;
    return !ok_;
  }

  int expr(int depth) {
    if (deep(depth)) return -1;
    int left = term(depth + 1);
    while (ok_) {
      if (accept("+")) left = binary(MathExpr::Node::kAdd, left, term(depth + 1));
      else if (accept("-")) left = binary(MathExpr::Node::kSub, left, term(depth + 1));
      else break;
    }
    return left;
  }
  bool starts_atom() {
    skip();
    if (k_ >= s_.size()) return false;
    const char c = s_[k_];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '(' || c == '{' || std::isalpha(static_cast<unsigned char>(c))) return true;
    const std::string_view cmd = command();
    return cmd == "frac" || cmd == "sqrt" || cmd == "pi" || cmd == "sin" || cmd == "cos" || cmd == "tan" ||
           cmd == "csc" || cmd == "sec" || cmd == "cot" || cmd == "ln" || cmd == "log" || cmd == "exp";
  }
  int term(int depth) {
    if (deep(depth)) return -1;
    int left = unary(depth + 1);
    while (ok_) {
      if (accept("*") || accept("\\cdot") || accept("\\times")) left = binary(MathExpr::Node::kMul, left, unary(depth + 1));
      else if (accept("/") || accept("\\div")) left = binary(MathExpr::Node::kDiv, left, unary(depth + 1));
      else if (starts_atom()) left = binary(MathExpr::Node::kMul, left, power(depth + 1));  // implicit: 2x, 3\pi
      else break;
    }
    return left;
  }
  int unary(int depth) {
    if (deep(depth)) return -1;
    if (accept("-")) {
      MathExpr::Node n;
      n.op = MathExpr::Node::kNeg;
      n.a = unary(depth + 1);
      if (n.a < 0) ok_ = false;
      return node(n);
    }
    if (accept("+")) return unary(depth + 1);
    return power(depth + 1);
  }
  int power(int depth) {
    if (deep(depth)) return -1;
    int base = atom(depth + 1);
    if (accept("^")) return binary(MathExpr::Node::kPow, base, unary(depth + 1));
    return base;
  }
  int group(int depth) {  // {expr} or a single character/number (\frac12)
    if (accept("{")) {
      int e = expr(depth + 1);
      if (!accept("}")) ok_ = false;
      return e;
    }
    skip();
    if (k_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k_]))) {
      MathExpr::Node n;
      n.value = s_[k_++] - '0';
      return node(n);
    }
    return atom(depth + 1);
  }
  int atom(int depth) {
    if (deep(depth)) return -1;
    skip();
    if (k_ >= s_.size()) {
      ok_ = false;
      return -1;
    }
    const char c = s_[k_];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return number();
    if (accept("(")) {
      int e = expr(depth + 1);
      if (!accept(")")) ok_ = false;
      return e;
    }
    if (peek("{")) return group(depth + 1);
    const std::string_view cmd = command();
    if (!cmd.empty()) {
      k_ += 1 + cmd.size();
      if (cmd == "frac") {
        int a = group(depth + 1);
        int b = group(depth + 1);
        return binary(MathExpr::Node::kDiv, a, b);
      }
      if (cmd == "sqrt") {
        if (accept("[")) {
          int index = expr(depth + 1);
          if (!accept("]")) ok_ = false;
          return binary(MathExpr::Node::kRoot, group(depth + 1), index);
        }
        MathExpr::Node n;
        n.op = MathExpr::Node::kSqrt;
        n.a = group(depth + 1);
        if (n.a < 0) ok_ = false;
        return node(n);
      }
      if (cmd == "pi" || cmd == "infty") {
        MathExpr::Node n;
        n.value = cmd == "pi" ? M_PI : std::numeric_limits<double>::infinity();
        return node(n);
      }
      return function(cmd, depth);
    }
    if (std::isalpha(static_cast<unsigned char>(c))) {
      for (std::string_view f : {"sqrt", "sin", "cos", "tan", "csc", "sec", "cot", "ln", "log", "exp", "pi"}) {
        if (s_.compare(k_, f.size(), f) == 0) {
          k_ += f.size();
          if (f == "pi") {
            MathExpr::Node n;
            n.value = M_PI;
            return node(n);
          }
          return function(f, depth);
        }
      }
      MathExpr::Node n;
      n.op = MathExpr::Node::kVar;
      n.var = c;
      out_->variables_.insert(c);
      ++k_;
      return node(n);
    }
    ok_ = false;
    return -1;
  }
  int function(std::string_view name, int depth) {
    MathExpr::Node n;
    if (name == "sqrt") n.op = MathExpr::Node::kSqrt;
    else if (name == "sin") n.op = MathExpr::Node::kSin;
    else if (name == "cos") n.op = MathExpr::Node::kCos;
    else if (name == "tan") n.op = MathExpr::Node::kTan;
    else if (name == "csc") n.op = MathExpr::Node::kCsc;
    else if (name == "sec") n.op = MathExpr::Node::kSec;
    else if (name == "cot") n.op = MathExpr::Node::kCot;
    else if (name == "ln") n.op = MathExpr::Node::kLn;
    else if (name == "log") n.op = MathExpr::Node::kLog;
    else if (name == "exp") n.op = MathExpr::Node::kExp;
    else {
      ok_ = false;  // an unknown command: not an expression we can evaluate
      return -1;
    }
    // \log_b x: the base as a group or one digit/letter.
    int base = -1;
    if (n.op == MathExpr::Node::kLog && accept("_")) {
      base = group(depth + 1);
      if (base < 0) ok_ = false;
    }
    // \sin^2 t: the power applies to the function's value.
    int exponent = -1;
    if (n.op != MathExpr::Node::kSqrt && accept("^")) {
      exponent = group(depth + 1);
      if (exponent < 0) ok_ = false;
    }
    n.a = peek("{") ? group(depth + 1) : power(depth + 1);
    if (n.a < 0) ok_ = false;
    int f = -1;
    if (base >= 0) {
      f = binary(MathExpr::Node::kLogBase, n.a, base);
    } else {
      f = node(n);
    }
    return exponent >= 0 ? binary(MathExpr::Node::kPow, f, exponent) : f;
  }
  int number() {
    size_t e = k_;
    while (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) ++e;
    if (e < s_.size() && s_[e] == '.') {
      ++e;
      while (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) ++e;
    }
    // Scientific notation only as digits 'e' [sign] digits (a lone e is not a number).
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t x = e + 1;
      if (x < s_.size() && (s_[x] == '+' || s_[x] == '-')) ++x;
      if (x < s_.size() && std::isdigit(static_cast<unsigned char>(s_[x]))) {
        e = x;
        while (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) ++e;
      }
    }
    const std::string digits(s_.substr(k_, e - k_));
    if (digits == ".") {
      ok_ = false;
      return -1;
    }
    k_ = e;
    MathExpr::Node n;
    n.value = std::strtod(digits.c_str(), nullptr);
    return node(n);
  }

  std::string_view s_;
  MathExpr* out_;
  size_t k_ = 0;
  bool ok_ = true;
};

std::optional<MathExpr> MathExpr::parse(std::string_view text) {
  if (text.empty() || text.size() > kMaxLength) return std::nullopt;
  MathExpr expr;
  MathParser parser(text, &expr);
  if (!parser.run()) return std::nullopt;
  return expr;
}

double MathExpr::eval(const std::map<char, double>& variables) const { return eval_node(root_, variables); }

double MathExpr::eval_node(int index, const std::map<char, double>& variables) const {
  const Node& n = nodes_[static_cast<size_t>(index)];
  switch (n.op) {
    case Node::kNum: return n.value;
    case Node::kVar: {
      auto it = variables.find(n.var);
      return it == variables.end() ? std::nan("") : it->second;
    }
    case Node::kAdd: return eval_node(n.a, variables) + eval_node(n.b, variables);
    case Node::kSub: return eval_node(n.a, variables) - eval_node(n.b, variables);
    case Node::kMul: return eval_node(n.a, variables) * eval_node(n.b, variables);
    case Node::kDiv: return eval_node(n.a, variables) / eval_node(n.b, variables);
    case Node::kPow: return std::pow(eval_node(n.a, variables), eval_node(n.b, variables));
    case Node::kNeg: return -eval_node(n.a, variables);
    case Node::kSqrt: return std::sqrt(eval_node(n.a, variables));
    case Node::kRoot: return std::pow(eval_node(n.a, variables), 1.0 / eval_node(n.b, variables));
    case Node::kSin: return std::sin(eval_node(n.a, variables));
    case Node::kCos: return std::cos(eval_node(n.a, variables));
    case Node::kTan: return std::tan(eval_node(n.a, variables));
    case Node::kCsc: return 1.0 / std::sin(eval_node(n.a, variables));
    case Node::kSec: return 1.0 / std::cos(eval_node(n.a, variables));
    case Node::kCot: return 1.0 / std::tan(eval_node(n.a, variables));
    case Node::kLogBase: return std::log(eval_node(n.a, variables)) / std::log(eval_node(n.b, variables));
    case Node::kLn: return std::log(eval_node(n.a, variables));
    case Node::kLog: return std::log10(eval_node(n.a, variables));
    case Node::kExp: return std::exp(eval_node(n.a, variables));
  }
  return std::nan("");
}

}  // namespace rlcpp
