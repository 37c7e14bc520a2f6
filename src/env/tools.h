// Tools a model calls in a multi-turn rollout: the built-in `python` (the call's code run in the
// sandbox, its output returned) and `calculator` (exact rational arithmetic on the math grader's
// expression parser), declared to the model through the chat template's `tools` variable as
// OpenAI-style function schemas. A call that cannot run (unknown tool, wrong arguments, malformed
// JSON) gets an error message back as the tool's answer.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "sandbox/sandbox.h"
#include "text/tool_calls.h"

namespace rlcpp {

class SandboxPool;

struct ToolAnswer {
  std::string text;
  bool error = false;  // the call could not run as asked (counted per step as a tool error)
};

class Tool {
 public:
  virtual ~Tool() = default;
  virtual std::string name() const = 0;
  // {"type": "function", "function": {"name", "description", "parameters"}}
  virtual nlohmann::ordered_json schema() const = 0;
  // Runs one call within `timeout_s` seconds. Safe from any number of threads.
  virtual ToolAnswer call(const nlohmann::ordered_json& arguments, double timeout_s) const = 0;
};

// The calculator's exact value of an expression ("7006652", "-3/4"; a decimal with 12 significant
// digits where a function leaves the rationals), or an error message.
ToolAnswer calculate(const std::string& expression);

std::unique_ptr<Tool> make_calculator_tool();
// `pool` must outlive the tool; `limits` are each run's (its wall limit is the call's timeout).
std::unique_ptr<Tool> make_python_tool(SandboxPool& pool, SandboxLimits limits);

class ToolSet {
 public:
  ToolSet() = default;
  // `spec`: built-in names separated by commas ("python,calculator"), or the path of a JSON file
  // holding an array of OpenAI-style function schemas (each name one of the built-ins: the file
  // changes how they are described to the model). `pool` runs the python tool's code.
  ToolSet(const std::string& spec, SandboxPool* pool, SandboxLimits limits);
  bool empty() const { return tools_.empty(); }
  // The `tools` template variable.
  nlohmann::ordered_json schemas() const;
  std::vector<std::string> names() const;
  // A parsed call's answer: the tool's, or an error message for a malformed call or unknown tool.
  ToolAnswer call(const ToolCall& call, double timeout_s) const;

 private:
  std::vector<std::unique_ptr<Tool>> tools_;
  std::vector<nlohmann::ordered_json> schemas_;
};

}  // namespace rlcpp
