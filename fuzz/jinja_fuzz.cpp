// libFuzzer target for the chat-template engine: the input is a template, parsed and rendered with
// a conversation (messages of every role, tools, add_generation_prompt). A template may be
// rejected (UserError), but no input may crash, overflow the stack or run long (-timeout).
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "text/jinja/template.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json variables = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "What is 2+2?"},
                 {"role": "assistant", "content": "<think>add</think>4"}, {"role": "tool", "content": "{\"x\": 1}"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false})");
  try {
    rlcpp::jinja::Template t(std::string(reinterpret_cast<const char*>(data), size));
    t.render(variables);
  } catch (const rlcpp::UserError&) {
  }
  return 0;
}
