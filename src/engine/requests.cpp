#include "engine/requests.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>

#include "text/tokenizer.h"
#include "util/error.h"

namespace rlcpp {

// Stop checks after a token was appended: stop token, stop string in the decoded text of the turn,
// length (the response budget, or the turn's limit). Returns true when the turn is done; a stop
// string also sets `cut` (the turn's text up to it).
bool check_stop(const Sequence& s, const Tokenizer* tokenizer, std::optional<std::string>* cut, FinishReason* reason) {
  const SamplingParams& p = *s.params;
  const int32_t last = s.tokens.back();
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), last) != p.stop_token_ids.end()) {
    *reason = FinishReason::kStop;
    return true;
  }
  if (tokenizer != nullptr && !p.stop_strings.empty()) {
    // A stop string that just appeared ends in the last token, and every token is at least one
    // byte: decoding the last (longest stop + 4) tokens finds it without re-decoding the response.
    size_t longest = 0;
    for (const auto& stop : p.stop_strings) longest = std::max(longest, stop.size());
    const int64_t turn = static_cast<int64_t>(s.tokens.size()) - s.turn_start;
    const int64_t tail = std::min<int64_t>(turn, static_cast<int64_t>(longest) + 4);
    const std::string tail_text = tokenizer->decode(std::vector<int32_t>(s.tokens.end() - tail, s.tokens.end()));
    bool seen = false;
    for (const auto& stop : p.stop_strings) seen = seen || (!stop.empty() && tail_text.find(stop) != std::string::npos);
    if (seen) {
      std::string text = tokenizer->decode(std::vector<int32_t>(s.tokens.begin() + s.turn_start, s.tokens.end()));
      size_t first = std::string::npos;
      for (const auto& stop : p.stop_strings) {
        if (!stop.empty()) first = std::min(first, text.find(stop));
      }
      if (first != std::string::npos) {
        text.resize(first);
        *cut = std::move(text);
        *reason = FinishReason::kStop;
        return true;
      }
    }
  }
  const bool turn_full = s.turn_limit > 0 && static_cast<int64_t>(s.tokens.size()) - s.turn_start >= s.turn_limit;
  if (s.n_response() >= p.max_new_tokens || turn_full) {
    *reason = FinishReason::kLength;
    return true;
  }
  return false;
}

// `cut_text`: the response text cut before a stop string, when one stopped it.
GeneratedSample to_sample(const Sequence& s, const Tokenizer* tokenizer, int64_t version,
                          const std::optional<std::string>& cut_text) {
  GeneratedSample out;
  out.request = s.request;
  out.sample = s.sample;
  out.token_ids.assign(s.tokens.begin() + s.n_prompt, s.tokens.end());
  out.logprobs = s.logprobs;
  out.top_logprobs = s.top_logprobs;
  out.finish_reason = s.finish_reason;
  out.policy_version = s.versions.empty() ? version : s.versions.front().version;
  if (s.versions.size() > 1) out.version_changes.assign(s.versions.begin() + 1, s.versions.end());
  out.inserted = s.inserted;
  if (tokenizer != nullptr) out.text = cut_text ? *cut_text : tokenizer->decode(out.token_ids, true);
  return out;
}

// A request's sampling settings and prompt ids, checked; `r` names it in the error.
void validate_request(const GenerationRequest& request, size_t r, int64_t vocab) {
  const auto& p = request.params;
  if (p.temperature < 0) throw_user_error("request {}: temperature {} must be >= 0", r, p.temperature);
  if (p.top_p <= 0 || p.top_p > 1) throw_user_error("request {}: top_p {} must be in (0, 1]", r, p.top_p);
  if (p.min_p < 0 || p.min_p >= 1) throw_user_error("request {}: min_p {} must be in [0, 1)", r, p.min_p);
  if (p.top_k < 0) throw_user_error("request {}: top_k {} must be >= 0", r, p.top_k);
  if (p.max_new_tokens < 1) throw_user_error("request {}: max_new_tokens {} must be >= 1", r, p.max_new_tokens);
  if (p.logprobs < 0) throw_user_error("request {}: logprobs {} must be >= 0", r, p.logprobs);
  for (int32_t id : request.prompt_ids) {
    if (id < 0 || id >= vocab) throw_user_error("request {}: prompt token {} is outside the vocabulary (0..{})", r, id, vocab - 1);
  }
}

// A request within the model's positions (max_position_embeddings): a prompt that leaves no room
// for one new token is an error; a response that would run past the last position is capped
// there, and the first capped request of the process says so.
GenerationRequest fit_request(GenerationRequest request, size_t r, int64_t max_positions) {
  if (max_positions <= 0) return request;
  static std::atomic<bool> said{false};
  const int64_t prompt = static_cast<int64_t>(request.prompt_ids.size());
  const int64_t room = max_positions - prompt;
  if (room < 1) {
    throw_user_error("request {}: its prompt of {} tokens fills the model's {} positions (max_position_embeddings); "
                     "shorten it, or limit prompts with -mpt/--max-prompt-tokens (--overflow truncate_left or drop)",
                     r, prompt, max_positions);
  }
  auto& p = request.params;
  if (p.max_new_tokens > room) {
    if (!said.exchange(true)) {
      spdlog::warn("a prompt of {} tokens leaves room for {} new tokens in the model's {} positions: its response is "
                   "capped there (-mnt {})", prompt, room, max_positions, p.max_new_tokens);
    }
    p.max_new_tokens = room;
  }
  return request;
}

}  // namespace rlcpp
