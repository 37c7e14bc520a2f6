// Tool calls as chat templates write them: the format a template uses (Hermes' <tool_call> JSON of
// Qwen2.5 and Qwen3, or Llama 3.1's JSON object and <|python_tag|>), and the calls parsed out of an
// assistant turn's text. A malformed call is kept with the reason, so the tool's answer can say it.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "util/enum_table.h"

namespace rlcpp {

class Tokenizer;

enum class ToolFormat {
  kHermes,  // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Qwen2.5, Qwen3, ChatML models)
  kLlama3,  // the turn is {"name": ..., "parameters": {...}}; <|python_tag|>code is a python call
};

const EnumTable<ToolFormat>& tool_formats();

// The format a template's source writes tool calls in: Llama 3.1's when it knows <|python_tag|> or
// the ipython role, else Hermes'.
ToolFormat detect_tool_format(const std::string& template_source);
// The format of `tokenizer`'s chat template (ChatML's, Hermes', when it has none).
ToolFormat template_tool_format(const Tokenizer& tokenizer);

struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
  std::string error;  // not empty: the call is malformed (bad JSON, no name, arguments not an object)
  std::string text;   // the call as written
};

// The calls in an assistant turn's text, in order (none: the turn answers).
std::vector<ToolCall> parse_tool_calls(const std::string& text, ToolFormat format);

// How a call is written in `format` (what a supervised example or a test puts in an assistant turn).
std::string format_tool_call(const std::string& name, const nlohmann::ordered_json& arguments, ToolFormat format);

}  // namespace rlcpp
