// Stop strings in a response generated in pieces (a round cut at a checkpoint, a partial rollout's
// chunks over rollout servers). Each piece's engine checks only the text of its own tokens, so a
// stop string spanning two pieces goes unseen there and the sample runs on past it.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "engine/sampling.h"
#include "text/tokenizer.h"

namespace rlcpp {

// Ends a joined sample as one uncut generation would have: at the first token whose response text
// so far holds one of `stops`, the tokens after it (and their log-probs and version changes)
// dropped, the finish reason kStop and the text cut before the stop string. Without one, the text
// is the whole response decoded (not piece by piece). Returns whether a stop string ended it.
inline bool settle_stop_strings(GeneratedSample& s, const Tokenizer& tokenizer, const std::vector<std::string>& stops) {
  auto text_of = [&](size_t n) {
    return tokenizer.decode(std::vector<int32_t>(s.token_ids.begin(), s.token_ids.begin() + static_cast<std::ptrdiff_t>(n)), true);
  };
  auto first_stop = [&](const std::string& text) {
    size_t first = std::string::npos;
    for (const auto& stop : stops) {
      if (!stop.empty()) first = std::min(first, text.find(stop));
    }
    return first;
  };
  std::string text = text_of(s.token_ids.size());
  if (first_stop(text) == std::string::npos) {
    s.text = std::move(text);
    return false;
  }
  // The fewest tokens whose text holds a stop string (more tokens only add text).
  size_t lo = 1, hi = s.token_ids.size();
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (first_stop(text_of(mid)) != std::string::npos) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  text = text_of(lo);
  text.resize(first_stop(text));
  s.token_ids.resize(lo);
  if (!s.logprobs.empty()) s.logprobs.resize(lo);
  if (!s.top_logprobs.empty()) s.top_logprobs.resize(lo);
  s.version_changes.erase(std::remove_if(s.version_changes.begin(), s.version_changes.end(),
                                         [&](const VersionChange& c) { return c.start >= static_cast<int64_t>(lo); }),
                          s.version_changes.end());
  s.finish_reason = FinishReason::kStop;
  s.text = std::move(text);
  return true;
}

}  // namespace rlcpp
