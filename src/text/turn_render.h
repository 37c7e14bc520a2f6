// Token-exact multi-turn conversations (token in, token out): what a chat template inserts after
// an assistant turn the model sampled (the new messages rendered alone, with the template's own
// formatting, then encoded), and the check at a trajectory's end that the sequence equals the
// template's rendering of the whole conversation.
//
// The model's tokens are never decoded and encoded again; only the inserted text is encoded. The
// check tells four outcomes apart:
//   exact         the whole conversation renders and encodes to the sequence;
//   noncanonical  the same text, but the model sampled another split of its own text into tokens
//                 than the tokenizer would make (harmless here: the sampled ids are trained; a
//                 trainer that re-tokenised would get other ids);
//   rerender      the template renders earlier turns differently once more messages follow (Qwen3
//                 drops the empty reasoning block of earlier assistant turns): by design, not drift;
//   mismatch      real drift: the template's rendering of the conversation and the sequence differ
//                 although the template renders every prefix of it as a prefix of the whole.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/enum_table.h"

namespace rlcpp {

enum class TitoKind { kExact, kNoncanonical, kRerender, kMismatch };

const EnumTable<TitoKind>& tito_kinds();

struct TitoCheck {
  TitoKind kind = TitoKind::kExact;
  std::string detail;  // the first difference: where, and both id runs around it
};

struct RenderedDelta {
  std::string text;
  std::vector<int32_t> ids;
};

class TurnRenderer {
 public:
  // `variables`: the conversation's template variables (tools, enable_thinking, ...). The
  // tokenizer and template must outlive the renderer.
  TurnRenderer(const Tokenizer& tokenizer, const ChatTemplate& chat, nlohmann::ordered_json variables);

  // What follows an assistant turn that ended with token `stop`: `messages` (tool answers, a user
  // or environment turn) as the template writes them after an assistant turn, and the generation
  // prompt. The template's end-of-turn text after the assistant's content is the model's own stop
  // token, so it is not repeated.
  RenderedDelta delta(const nlohmann::ordered_json& messages, int32_t stop) const;

  // A trajectory's check. `conversation`: every message (the prompt's, each assistant turn as the
  // text the model sampled without its stop token, the inserted ones); `expected`: the text the
  // sequence was built from (the prompt's text, then each turn's sampled text and inserted text);
  // `ids`: the prompt's and the response's tokens; `sampled`: per token of `ids`, whether the model
  // sampled it.
  TitoCheck check(const nlohmann::ordered_json& conversation, const std::string& expected,
                  const std::vector<int32_t>& ids, const std::vector<uint8_t>& sampled) const;

  // Whether rendering each prefix of `conversation` gives a prefix of the next one's rendering.
  bool prefix_stable(const nlohmann::ordered_json& conversation) const;

  const nlohmann::ordered_json& variables() const { return variables_; }

 private:
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;
  std::string describe(const std::vector<int32_t>& ids, size_t at) const;

  const Tokenizer& tokenizer_;
  const ChatTemplate& chat_;
  nlohmann::ordered_json variables_;
};

}  // namespace rlcpp
