// Chat templates: a model's `chat_template` (tokenizer_config.json) rendered with the Jinja subset,
// given messages, add_generation_prompt, the special tokens and optional tools. A model without a
// template falls back to ChatML, said once in the log.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "text/jinja/template.h"

namespace rlcpp {

class Tokenizer;

// The ChatML template (<|im_start|>role\ncontent<|im_end|>\n), used when a model has none.
extern const char* const kChatMlTemplate;

class ChatTemplate {
 public:
  // The tokenizer's template, or ChatML when it has none.
  explicit ChatTemplate(const Tokenizer& tokenizer);
  ChatTemplate(const std::string& source, const nlohmann::ordered_json& special_tokens);

  // messages: [{"role", "content"}, ...]. `extra` adds template variables (tools, enable_thinking,
  // date_string, ...); tools and documents default to none as transformers passes them.
  // Objects keep their key order (tool schemas are printed with tojson in that order).
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

 private:
  jinja::Template template_;
  nlohmann::ordered_json special_tokens_;  // bos_token, eos_token, pad_token, unk_token
};

}  // namespace rlcpp
