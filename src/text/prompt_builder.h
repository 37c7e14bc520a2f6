// Prompts as the trainer sees them: optional system prompt, chat template with the generation
// prompt, tokenisation, and the max_prompt_tokens policy (truncate from the left, or drop).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/prompt_dataset.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/enum_table.h"

namespace rlcpp {

enum class PromptOverflow { kTruncateLeft, kDrop, kError };

const EnumTable<PromptOverflow>& prompt_overflows();

struct PromptOptions {
  std::string system_prompt;          // prepended as a system message when the record has none; empty: none
  int64_t max_prompt_tokens = 0;      // 0: unlimited
  int64_t context_tokens = 0;         // the model's positions: prompts keep room for a response under it too (0: none)
  PromptOverflow overflow = PromptOverflow::kTruncateLeft;
  std::string source;                 // the dataset's path, for messages naming a prompt's line
  nlohmann::ordered_json template_variables = nlohmann::ordered_json::object();  // e.g. enable_thinking
};

struct BuiltPrompt {
  nlohmann::ordered_json messages;  // what was rendered (the system prompt added)
  std::string text;             // the rendered template (before any truncation)
  std::vector<int32_t> ids;     // what the engine is given
  bool truncated = false;
};

class PromptBuilder {
 public:
  PromptBuilder(const Tokenizer& tokenizer, PromptOptions options);
  // nullopt when the prompt is over max_prompt_tokens (or leaves no room under context_tokens) and
  // the policy is drop; a UserError naming the line when it is error. The first truncated prompt
  // is a warning; the rest are counted.
  std::optional<BuiltPrompt> build(const PromptRecord& record);
  // The same for messages that come from no dataset record (a server's chat, an episode's first
  // turn); `line` names them in messages (0: none). `variables` join the template's for this
  // prompt alone (a served chat's tools).
  std::optional<BuiltPrompt> build(const nlohmann::ordered_json& messages, int64_t line = 0,
                                   const nlohmann::ordered_json& variables = nlohmann::ordered_json::object());
  int64_t n_truncated() const { return n_truncated_; }
  int64_t n_dropped() const { return n_dropped_; }

 private:
  const Tokenizer& tokenizer_;
  ChatTemplate template_;
  PromptOptions options_;
  int64_t n_truncated_ = 0, n_dropped_ = 0;
};

}  // namespace rlcpp
