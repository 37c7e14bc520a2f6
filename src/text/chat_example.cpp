#include "text/chat_example.h"

#include "util/error.h"

namespace rlcpp {

ChatExample build_chat_example(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                               const nlohmann::ordered_json& messages_in, const std::string& system_prompt,
                               const std::string& where) {
  nlohmann::ordered_json messages = messages_in;
  if (!system_prompt.empty() && (messages.empty() || messages[0]["role"] != "system")) {
    messages.insert(messages.begin(), nlohmann::ordered_json{{"role", "system"}, {"content", system_prompt}});
  }
  ChatExample out;
  std::string done;  // rendered text already tokenised
  auto append = [&](const std::string& text, bool learn) {
    const auto ids = tokenizer.encode(text, /*add_special_tokens=*/false);
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.loss_mask.insert(out.loss_mask.end(), ids.size(), learn ? 1 : 0);
    if (learn) out.n_learned += static_cast<int64_t>(ids.size());
  };
  for (size_t k = 0; k < messages.size(); ++k) {
    if (messages[k]["role"] != "assistant") continue;
    const nlohmann::ordered_json before(messages.begin(), messages.begin() + static_cast<long>(k));
    const nlohmann::ordered_json through(messages.begin(), messages.begin() + static_cast<long>(k) + 1);
    const std::string prefix = chat_template.render(before, /*add_generation_prompt=*/true);
    const std::string full = chat_template.render(through, /*add_generation_prompt=*/false);
    if (full.compare(0, prefix.size(), prefix) != 0 || prefix.compare(0, done.size(), done) != 0) {
      throw_user_error("{}: the chat template does not render assistant turn {} as a continuation of the conversation "
                       "before it, so the tokens to learn cannot be told apart", where, k);
    }
    append(prefix.substr(done.size()), false);
    append(full.substr(prefix.size()), true);
    done = full;
  }
  const std::string all = chat_template.render(messages, /*add_generation_prompt=*/false);
  if (all.size() > done.size() && all.compare(0, done.size(), done) == 0) append(all.substr(done.size()), false);
  if (out.n_learned == 0) throw_user_error("{}: no assistant tokens to learn from", where);
  return out;
}

}  // namespace rlcpp
