#include "text/tool_calls.h"

#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace rlcpp {

const EnumTable<ToolFormat>& tool_formats() {
  static const EnumTable<ToolFormat> table(
      "tool-call format", {{ToolFormat::kHermes, "hermes", "<tool_call>{\"name\", \"arguments\"}</tool_call> (Qwen2.5, Qwen3)"},
                           {ToolFormat::kLlama3, "llama3", "a {\"name\", \"parameters\"} turn, <|python_tag|> code (Llama 3.1)"}});
  return table;
}

ToolFormat detect_tool_format(const std::string& source) {
  if (source.find("<|python_tag|>") != std::string::npos || source.find("ipython") != std::string::npos) {
    return ToolFormat::kLlama3;
  }
  return ToolFormat::kHermes;
}

ToolFormat template_tool_format(const Tokenizer& tokenizer) {
  const std::string& source = tokenizer.config().chat_template;
  return detect_tool_format(source.empty() ? std::string(kChatMlTemplate) : source);
}

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// A call from its JSON text; `arguments_key` is "arguments" (Hermes) or "parameters" (Llama 3.1,
// which also accepts "arguments").
ToolCall call_from_json(const std::string& text, const char* arguments_key) {
  ToolCall call;
  call.text = text;
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    call.error = fmt::format("the tool call is not valid JSON ({})", e.what());
    return call;
  }
  if (!j.is_object()) {
    call.error = "the tool call must be a JSON object with \"name\" and \"" + std::string(arguments_key) + "\"";
    return call;
  }
  if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty()) {
    call.error = "the tool call has no \"name\" string";
    return call;
  }
  call.name = j["name"].get<std::string>();
  const char* key = j.contains(arguments_key) ? arguments_key : "arguments";
  if (j.contains(key)) {
    auto args = j[key];
    if (args.is_string()) {  // some models write the arguments as a JSON string
      try {
        args = nlohmann::ordered_json::parse(args.get<std::string>());
      } catch (const nlohmann::json::exception&) {
      }
    }
    if (!args.is_object()) {
      call.error = fmt::format("the \"{}\" of tool call \"{}\" must be a JSON object", arguments_key, call.name);
      return call;
    }
    call.arguments = args;
  }
  return call;
}

}  // namespace

std::vector<ToolCall> parse_tool_calls(const std::string& text, ToolFormat format) {
  std::vector<ToolCall> calls;
  if (format == ToolFormat::kHermes) {
    static const std::string open = "<tool_call>", close = "</tool_call>";
    size_t at = 0;
    while ((at = text.find(open, at)) != std::string::npos) {
      const size_t body = at + open.size();
      const size_t end = text.find(close, body);
      if (end == std::string::npos) {
        ToolCall call;
        call.text = text.substr(at);
        call.error = "the tool call has no closing </tool_call>";
        calls.push_back(std::move(call));
        break;
      }
      calls.push_back(call_from_json(trim(text.substr(body, end - body)), "arguments"));
      at = end + close.size();
    }
    return calls;
  }
  static const std::string tag = "<|python_tag|>";
  std::string body = trim(text);
  const bool tagged = body.rfind(tag, 0) == 0;
  if (tagged) body = trim(body.substr(tag.size()));
  if (!body.empty() && body.front() == '{') {
    // One call, or several separated by ';' as Llama 3.1's template allows.
    size_t depth = 0, start = 0;
    bool in_string = false, escaped = false;
    for (size_t k = 0; k < body.size(); ++k) {
      const char c = body[k];
      if (in_string) {
        if (escaped) {
          escaped = false;
        } else if (c == '\\') {
          escaped = true;
        } else if (c == '"') {
          in_string = false;
        }
        continue;
      }
      if (c == '"') in_string = true;
      if (c == '{') ++depth;
      if (c == '}' && depth > 0 && --depth == 0) {
        calls.push_back(call_from_json(body.substr(start, k + 1 - start), "parameters"));
        start = body.find_first_not_of(" \t\r\n;", k + 1);
        if (start == std::string::npos) return calls;
        k = start - 1;
      }
    }
    if (depth > 0 || start < body.size()) {
      calls.push_back(call_from_json(body.substr(start), "parameters"));  // unbalanced: its JSON error
    }
    return calls;
  }
  if (tagged) {
    ToolCall call;
    call.name = "python";
    call.arguments = {{"code", body}};
    call.text = text;
    calls.push_back(std::move(call));
  }
  return calls;
}

std::string format_tool_call(const std::string& name, const nlohmann::ordered_json& arguments, ToolFormat format) {
  if (format == ToolFormat::kHermes) {
    nlohmann::ordered_json j{{"name", name}, {"arguments", arguments}};
    return "<tool_call>\n" + j.dump() + "\n</tool_call>";
  }
  nlohmann::ordered_json j{{"name", name}, {"parameters", arguments}};
  return j.dump();
}

}  // namespace rlcpp
