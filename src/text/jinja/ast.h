// The syntax tree of a parsed template: expressions and statement nodes.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/lexer.h"
#include "text/jinja/value.h"

namespace rlcpp::jinja {

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

}  // namespace rlcpp::jinja
