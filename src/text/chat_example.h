// Supervised examples from chats: the conversation through the chat template, tokenised, with the
// assistant turns marked as the tokens to learn. Each assistant turn is found by rendering the
// conversation up to it with the generation prompt and then including it: the difference is the
// turn as the template writes it (content and end-of-turn token), so any template works as long
// as it renders a conversation as a continuation of its prefix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace rlcpp {

struct ChatExample {
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss_mask;  // 1 on assistant-turn tokens
  int64_t n_learned = 0;
};

// `where` names the record for errors (file:line). A system prompt, when given and the chat has
// none, is prepended as the prompts of RL training are.
ChatExample build_chat_example(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                               const nlohmann::ordered_json& messages, const std::string& system_prompt,
                               const std::string& where);

}  // namespace rlcpp
