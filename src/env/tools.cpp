#include "env/tools.h"

#include <cmath>
#include <fstream>
#include <optional>

#include "reward/math_expr.h"
#include "sandbox/sandbox_pool.h"
#include "util/error.h"
#include "util/file.h"

namespace rlcpp {

namespace {

using Int = __int128;

struct Fraction {
  Int num = 0, den = 1;
};

Int gcd(Int a, Int b) {
  if (a < 0) a = -a;
  if (b < 0) b = -b;
  while (b != 0) {
    const Int t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// nullopt on overflow or a zero denominator.
std::optional<Fraction> normalized(Int num, Int den) {
  if (den == 0) return std::nullopt;
  if (den < 0) {
    num = -num;
    den = -den;
  }
  const Int g = gcd(num, den);
  if (g > 1) {
    num /= g;
    den /= g;
  }
  return Fraction{num, den};
}

std::optional<Fraction> mul(const Fraction& a, const Fraction& b) {
  Int n, d;
  if (__builtin_mul_overflow(a.num, b.num, &n) || __builtin_mul_overflow(a.den, b.den, &d)) return std::nullopt;
  return normalized(n, d);
}

std::optional<Fraction> add(const Fraction& a, const Fraction& b) {
  Int x, y, n, d;
  if (__builtin_mul_overflow(a.num, b.den, &x) || __builtin_mul_overflow(b.num, a.den, &y) ||
      __builtin_add_overflow(x, y, &n) || __builtin_mul_overflow(a.den, b.den, &d)) {
    return std::nullopt;
  }
  return normalized(n, d);
}

// A parsed number as an exact fraction: its shortest decimal form read back digit by digit.
std::optional<Fraction> exact_number(double value) {
  if (!std::isfinite(value)) return std::nullopt;
  const std::string text = fmt::format("{}", value);
  if (text.find_first_of("eE") != std::string::npos) return std::nullopt;
  Int num = 0, den = 1;
  bool point = false;
  for (char c : text) {
    if (c == '.') {
      point = true;
      continue;
    }
    if (c < '0' || c > '9') continue;
    if (__builtin_mul_overflow(num, 10, &num) || __builtin_add_overflow(num, c - '0', &num)) return std::nullopt;
    if (point && __builtin_mul_overflow(den, 10, &den)) return std::nullopt;
  }
  return normalized(value < 0 ? -num : num, den);
}

// The exact value of node `k`, or nullopt where it leaves the rationals (or overflows).
std::optional<Fraction> exact(const MathExpr& expr, int k) {
  const MathExpr::Node& n = expr.nodes()[static_cast<size_t>(k)];
  using Op = MathExpr::Node;
  switch (n.op) {
    case Op::kNum: return exact_number(n.value);
    case Op::kNeg: {
      auto a = exact(expr, n.a);
      if (!a) return std::nullopt;
      return Fraction{-a->num, a->den};
    }
    case Op::kAdd:
    case Op::kSub: {
      auto a = exact(expr, n.a), b = exact(expr, n.b);
      if (!a || !b) return std::nullopt;
      if (n.op == Op::kSub) b->num = -b->num;
      return add(*a, *b);
    }
    case Op::kMul: {
      auto a = exact(expr, n.a), b = exact(expr, n.b);
      if (!a || !b) return std::nullopt;
      return mul(*a, *b);
    }
    case Op::kDiv: {
      auto a = exact(expr, n.a), b = exact(expr, n.b);
      if (!a || !b || b->num == 0) return std::nullopt;
      return mul(*a, Fraction{b->den, b->num});
    }
    case Op::kPow: {
      auto a = exact(expr, n.a), b = exact(expr, n.b);
      if (!a || !b || b->den != 1 || b->num > 64 || b->num < -64) return std::nullopt;
      Fraction out{1, 1};
      for (Int e = 0; e < (b->num < 0 ? -b->num : b->num); ++e) {
        auto next = mul(out, *a);
        if (!next) return std::nullopt;
        out = *next;
      }
      if (b->num < 0) {
        if (out.num == 0) return std::nullopt;
        return normalized(out.den, out.num);
      }
      return out;
    }
    default: return std::nullopt;
  }
}

std::string to_string(Int v) {
  if (v == 0) return "0";
  const bool negative = v < 0;
  std::string digits;
  while (v != 0) {
    const int d = static_cast<int>(v % 10);
    digits.push_back(static_cast<char>('0' + (d < 0 ? -d : d)));
    v /= 10;
  }
  if (negative) digits.push_back('-');
  return {digits.rbegin(), digits.rend()};
}

nlohmann::ordered_json function_schema(const std::string& name, const std::string& description,
                                       const std::string& argument, const std::string& argument_description) {
  return {{"type", "function"},
          {"function",
           {{"name", name},
            {"description", description},
            {"parameters",
             {{"type", "object"},
              {"properties", {{argument, {{"type", "string"}, {"description", argument_description}}}}},
              {"required", {argument}}}}}}};
}

// The one string argument a built-in takes, or an error answer naming the tool and what it takes.
std::optional<std::string> string_argument(const nlohmann::ordered_json& arguments, const std::string& tool,
                                           const std::string& name, ToolAnswer* error) {
  if (!arguments.is_object() || !arguments.contains(name) || !arguments[name].is_string()) {
    error->text = fmt::format("error: {} takes {{\"{}\": string}}, got {}", tool, name, arguments.dump());
    error->error = true;
    return std::nullopt;
  }
  return arguments[name].get<std::string>();
}

class CalculatorTool : public Tool {
 public:
  std::string name() const override { return "calculator"; }
  nlohmann::ordered_json schema() const override {
    return function_schema("calculator", "Evaluate an arithmetic expression exactly (+ - * / ^ and parentheses).",
                           "expression", "The expression, for example 1234 * 5678");
  }
  ToolAnswer call(const nlohmann::ordered_json& arguments, double) const override {
    ToolAnswer error;
    const auto expression = string_argument(arguments, "calculator", "expression", &error);
    return expression ? calculate(*expression) : error;
  }
};

class PythonTool : public Tool {
 public:
  PythonTool(SandboxPool& pool, SandboxLimits limits) : pool_(pool), limits_(limits) {}
  std::string name() const override { return "python"; }
  nlohmann::ordered_json schema() const override {
    return function_schema("python", "Run a Python 3 program in a sandbox and return what it prints.", "code",
                           "The program; print the values you need");
  }
  ToolAnswer call(const nlohmann::ordered_json& arguments, double timeout_s) const override {
    ToolAnswer answer;
    const auto code = string_argument(arguments, "python", "code", &answer);
    if (!code) return answer;
    SandboxRun run;
    run.language = "python";
    run.source = *code;
    run.limits = limits_;
    run.limits.wall_seconds = timeout_s;
    run.limits.cpu_seconds = std::min(run.limits.cpu_seconds, timeout_s);
    const SandboxResult result = pool_.run(run);
    RLCPP_CHECK(!result.setup_failed, "the python tool's sandbox could not start: {}", result.stderr_text);
    answer.text = result.stdout_text;
    if (result.stopped_by == SandboxStop::kWallLimit || result.stopped_by == SandboxStop::kCpuLimit) {
      answer.text += fmt::format("error: the code ran past the tool's limit of {} s", timeout_s);
      return answer;
    }
    if (result.stopped_by == SandboxStop::kOutputLimit) answer.text += "\nerror: the output was cut at its limit";
    if (!result.status.exited || result.status.code != 0) answer.text += result.stderr_text;
    if (answer.text.empty()) answer.text = "(no output)";
    return answer;
  }

 private:
  SandboxPool& pool_;
  SandboxLimits limits_;
};

}  // namespace

ToolAnswer calculate(const std::string& expression) {
  ToolAnswer answer;
  const auto expr = MathExpr::parse(expression);
  if (!expr) {
    answer.text = fmt::format("error: the calculator cannot read {}", nlohmann::json(expression).dump());
    answer.error = true;
    return answer;
  }
  if (!expr->variables().empty()) {
    answer.text = "error: the calculator takes numbers, not variables";
    answer.error = true;
    return answer;
  }
  if (const auto value = exact(*expr, expr->root())) {
    answer.text = to_string(value->num) + (value->den == 1 ? "" : "/" + to_string(value->den));
    return answer;
  }
  const double v = expr->eval();
  if (!std::isfinite(v)) {
    answer.text = "error: the expression has no finite value";
    answer.error = true;
    return answer;
  }
  answer.text = fmt::format("{:.12g}", v);
  return answer;
}

std::unique_ptr<Tool> make_calculator_tool() { return std::make_unique<CalculatorTool>(); }

std::unique_ptr<Tool> make_python_tool(SandboxPool& pool, SandboxLimits limits) {
  return std::make_unique<PythonTool>(pool, limits);
}

namespace {

std::unique_ptr<Tool> builtin(const std::string& name, SandboxPool* pool, SandboxLimits limits, const std::string& where) {
  if (name == "calculator") return make_calculator_tool();
  if (name == "python") {
    RLCPP_CHECK(pool != nullptr, "the python tool without a sandbox pool");
    return make_python_tool(*pool, limits);
  }
  throw_user_error("{}: unknown tool \"{}\"; the built-in tools are python and calculator", where, name);
}

}  // namespace

ToolSet::ToolSet(const std::string& spec, SandboxPool* pool, SandboxLimits limits) {
  const bool file = spec.find(".json") != std::string::npos || spec.find('/') != std::string::npos;
  if (!file) {
    size_t begin = 0;
    while (begin <= spec.size()) {
      const size_t end = std::min(spec.find(',', begin), spec.size());
      std::string name = spec.substr(begin, end - begin);
      name.erase(0, name.find_first_not_of(' '));
      name.erase(name.find_last_not_of(' ') + 1);
      if (!name.empty()) {
        for (const auto& t : tools_) {
          if (t->name() == name) throw_user_error("--tools {}: \"{}\" is named twice", spec, name);
        }
        tools_.push_back(builtin(name, pool, limits, "--tools " + spec));
        schemas_.push_back(tools_.back()->schema());
      }
      begin = end + 1;
    }
    if (tools_.empty()) throw_user_error("--tools \"{}\": name at least one tool (python, calculator)", spec);
    return;
  }
  const std::string where = "--tools " + spec;
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(read_file(spec));
  } catch (const nlohmann::json::exception& e) {
    throw_user_error("{}: not valid JSON ({})", where, e.what());
  }
  if (!j.is_array() || j.empty()) throw_user_error("{}: expected a JSON array of function schemas", where);
  for (size_t k = 0; k < j.size(); ++k) {
    const auto& schema = j[k];
    const auto* function = schema.is_object() && schema.contains("function") ? &schema["function"] : &schema;
    if (!function->is_object() || !function->contains("name") || !(*function)["name"].is_string()) {
      throw_user_error("{}: schema {} has no function name (OpenAI's {{\"type\": \"function\", \"function\": "
                       "{{\"name\", \"description\", \"parameters\"}}}})", where, k);
    }
    tools_.push_back(builtin((*function)["name"].get<std::string>(), pool, limits, fmt::format("{} schema {}", where, k)));
    schemas_.push_back(schema.contains("function") ? schema : nlohmann::ordered_json{{"type", "function"}, {"function", schema}});
  }
}

nlohmann::ordered_json ToolSet::schemas() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& s : schemas_) out.push_back(s);
  return out;
}

std::vector<std::string> ToolSet::names() const {
  std::vector<std::string> out;
  for (const auto& t : tools_) out.push_back(t->name());
  return out;
}

ToolAnswer ToolSet::call(const ToolCall& call, double timeout_s) const {
  if (!call.error.empty()) return {"error: " + call.error, true};
  for (const auto& t : tools_) {
    if (t->name() == call.name) return t->call(call.arguments, timeout_s);
  }
  std::string known;
  for (const auto& t : tools_) known += (known.empty() ? "" : ", ") + t->name();
  return {fmt::format("error: unknown tool \"{}\"; the tools are {}", call.name, known), true};
}

}  // namespace rlcpp
