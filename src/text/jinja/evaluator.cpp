#include "text/jinja/evaluator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>

#include "text/jinja/builtins.h"
#include "util/error.h"

namespace rlcpp::jinja {

namespace {

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

// Work limits of one render: a template is a program, and a hostile or broken one (a macro that
// calls itself, a loop over range(10**6) inside another) must end with an error, not a crash.
constexpr int kMaxDepth = 256;               // nested expression evaluations and macro calls
constexpr int64_t kMaxIterations = 1000000;  // loop iterations over the whole render
constexpr size_t kMaxOutput = 16 << 20;      // bytes written over the whole render (16 MiB)

class Evaluator {
 public:
  explicit Evaluator(std::string* out) : out_(out) {}

  // One level deeper (an expression, a macro call) for as long as it lives.
  class Deeper {
   public:
    Deeper(Evaluator& e, const Pos& pos, const char* what) : e_(e) {
      if (++e_.depth_ > kMaxDepth) {
        fail(pos, fmt::format("{} nested deeper than {} levels (a macro that calls itself without end?)", what, kMaxDepth));
      }
    }
    ~Deeper() { --e_.depth_; }
    Deeper(const Deeper&) = delete;
    Deeper& operator=(const Deeper&) = delete;

   private:
    Evaluator& e_;
  };

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
      case Node::kText: write(n.text, n.pos); return Flow::kNormal;
      case Node::kOutput: write(eval(*n.exprs[0], scope).str(), n.pos); return Flow::kNormal;
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
          Deeper deeper(*this, macro->pos, "macro calls");
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
      if (++iterations_ > kMaxIterations) {
        fail(n.pos, fmt::format("more than {} loop iterations in one render", kMaxIterations));
      }
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
    Deeper deeper(*this, e.pos, "expressions");
    switch (e.type) {
      case Expr::kLiteral: return e.literal;
      case Expr::kName: {
        if (const Value* v = scope.find(e.name)) return *v;
        return global(e.name, e.pos);
      }
      case Expr::kAttr: return attribute(eval(*e.args[0], scope), e.name, e.pos);
      case Expr::kIndex: return index_value(eval(*e.args[0], scope), eval(*e.args[1], scope), e.pos);
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
        return apply_filter(e.name, args, kwargs, e.pos);
      }
      case Expr::kTest: {
        List args;
        for (const auto& a : e.args) args.push_back(eval(*a, scope));
        const bool result = apply_test(e.name, args, e.pos);
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
      if (b.i > 0 && a.s.size() * static_cast<size_t>(b.i) > kMaxOutput) {
        fail(e.pos, fmt::format("a string repeated to more than {} MiB", kMaxOutput >> 20));
      }
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
    // Integer results that do not fit 64 bits (Python's ints are unbounded) become floats.
    int64_t r = 0;
    if (op == "+") return ints && !__builtin_add_overflow(ai, bi, &r) ? Value::integer(r) : Value::number(ad + bd);
    if (op == "-") return ints && !__builtin_sub_overflow(ai, bi, &r) ? Value::integer(r) : Value::number(ad - bd);
    if (op == "*") return ints && !__builtin_mul_overflow(ai, bi, &r) ? Value::integer(r) : Value::number(ad * bd);
    if (op == "**") {
      const double p = std::pow(ad, bd);
      const bool exact = ints && bi >= 0 && std::abs(p) < 9.007199254740992e15;  // below 2^53: exact in double
      return exact ? Value::integer(static_cast<int64_t>(p)) : Value::number(p);
    }
    if (bd == 0) fail(e.pos, "division by zero");
    if (op == "/") return Value::number(ad / bd);
    if (op == "//") {
      if (ints && !(ai == INT64_MIN && bi == -1)) {
        const int64_t q = ai / bi;
        return Value::integer(q - ((ai % bi != 0) && ((ai < 0) != (bi < 0)) ? 1 : 0));  // floor, as Python
      }
      return Value::number(std::floor(ad / bd));
    }
    if (op == "%") {
      if (ints && bi == -1) return Value::integer(0);
      if (ints) {  // the sign of the divisor, as Python
        const int64_t m = ai % bi;
        return Value::integer(m != 0 && ((m < 0) != (bi < 0)) ? m + bi : m);
      }
      return Value::number(ad - bd * std::floor(ad / bd));
    }
    fail(e.pos, fmt::format("unknown operator {}", op));
  }

  // Appends to the current output, counting every byte written in the render (captured macro
  // output and {% set %} blocks too).
  void write(const std::string& text, const Pos& pos) {
    written_ += text.size();
    if (written_ > kMaxOutput) fail(pos, fmt::format("the render writes more than {} MiB", kMaxOutput >> 20));
    *out_ += text;
  }

  std::string* out_;
  int depth_ = 0;
  int64_t iterations_ = 0;
  size_t written_ = 0;
};

}  // namespace

std::string render(const Body& body, const nlohmann::ordered_json& variables) {
  std::string out;
  Scope globals(nullptr);
  if (variables.is_object()) {
    for (auto it = variables.begin(); it != variables.end(); ++it) globals.set(it.key(), from_json(it.value()));
  }
  Scope scope(&globals);
  Evaluator(&out).exec(body, scope);
  return out;
}

}  // namespace rlcpp::jinja
