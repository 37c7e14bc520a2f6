// A small, bounded parser and evaluator for the arithmetic in math answers: numbers (also 1.5e3),
// + - * / ^, implicit multiplication, parentheses and braces, \frac, \sqrt (also \sqrt[n]), \pi,
// e-free single-letter variables, \cdot \times \div, sin/cos/tan/csc/sec/cot/ln/log/exp, powers of
// functions (\sin^2 t) and logarithms to a base (\log_2 8). Anything else fails to parse (nullopt)
// rather than guessing. Input length and nesting depth are capped.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace rlcpp {

class MathExpr {
 public:
  // nullopt when `text` is not an expression of the subset, longer than 512 bytes, or nested deeper
  // than about 40 parentheses.
  static std::optional<MathExpr> parse(std::string_view text);
  double eval(const std::map<char, double>& variables = {}) const;
  const std::set<char>& variables() const { return variables_; }

  struct Node {
    enum Op { kNum, kVar, kAdd, kSub, kMul, kDiv, kPow, kNeg, kSqrt, kRoot, kSin, kCos, kTan, kCsc, kSec, kCot, kLn, kLog, kLogBase,
              kExp } op = kNum;
    double value = 0;
    char var = 0;
    int a = -1, b = -1;
  };
  // The parsed tree (a calculator evaluates it exactly): nodes()[root()] is the whole expression.
  const std::vector<Node>& nodes() const { return nodes_; }
  int root() const { return root_; }

 private:
  double eval_node(int node, const std::map<char, double>& variables) const;
  std::vector<Node> nodes_;
  int root_ = -1;
  std::set<char> variables_;
  friend class MathParser;
};

}  // namespace rlcpp
