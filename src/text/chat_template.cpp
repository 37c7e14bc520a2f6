#include "text/chat_template.h"

#include <spdlog/spdlog.h>

#include "text/tokenizer.h"

namespace rlcpp {

const char* const kChatMlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

namespace {

nlohmann::ordered_json special_tokens_of(const Tokenizer& tokenizer) {
  const auto& c = tokenizer.config();
  return {{"bos_token", c.bos_token}, {"eos_token", c.eos_token}, {"pad_token", c.pad_token},
          {"unk_token", c.unk_token}};
}

std::string source_of(const Tokenizer& tokenizer) {
  if (!tokenizer.config().chat_template.empty()) return tokenizer.config().chat_template;
  spdlog::info("the model has no chat_template in tokenizer_config.json: using ChatML (<|im_start|>role ... <|im_end|>)");
  return kChatMlTemplate;
}

}  // namespace

ChatTemplate::ChatTemplate(const Tokenizer& tokenizer)
    : template_(source_of(tokenizer)),
      special_tokens_(special_tokens_of(tokenizer)) {}

ChatTemplate::ChatTemplate(const std::string& source, const nlohmann::ordered_json& special_tokens)
    : template_(source), special_tokens_(special_tokens) {}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra) const {
  nlohmann::ordered_json variables = special_tokens_;
  variables["messages"] = messages;
  variables["add_generation_prompt"] = add_generation_prompt;
  variables["tools"] = nullptr;
  variables["documents"] = nullptr;
  for (auto it = extra.begin(); it != extra.end(); ++it) variables[it.key()] = it.value();
  return template_.render(variables);
}

}  // namespace rlcpp
