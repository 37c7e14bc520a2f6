// RolloutBackend's default multi-turn generation: each turn a whole-sequence generate() call, for
// backends that cannot continue a sequence (remote servers); the engine overrides it. And EarlyStop.
#include "engine/rollout_backend.h"

#include <algorithm>
#include <future>

#include "engine/sampling.h"

namespace rlcpp {

EarlyStop EarlyStop::first(size_t n_first, size_t n_requests) {
  EarlyStop stop;
  for (size_t r = 0; r < n_requests; ++r) stop.group_of.push_back(r < n_first ? static_cast<int64_t>(r) : -1);
  stop.groups = static_cast<int64_t>(std::min(n_first, n_requests));
  return stop;
}

std::shared_future<TurnOutcome> ready_outcome(TurnOutcome outcome) {
  std::promise<TurnOutcome> promise;
  promise.set_value(std::move(outcome));
  return promise.get_future().share();
}

std::vector<GeneratedSample> RolloutBackend::generate_turns(const std::vector<GenerationRequest>& requests,
                                                            TurnHandler& handler, const EarlyStop& /*stop*/) {
  struct Trajectory {
    size_t request = 0;
    int64_t sample = 0, turn = 0, turn_limit = 0;
    bool done = false;
    std::vector<int32_t> ids;  // prompt and response so far
    GeneratedSample out;
  };
  std::vector<Trajectory> all;
  for (size_t r = 0; r < requests.size(); ++r) {
    for (int64_t s = 0; s < requests[r].n; ++s) {
      Trajectory t;
      t.request = r;
      t.sample = s;
      t.turn_limit = handler.first_turn_limit(static_cast<int64_t>(r));
      t.ids = requests[r].prompt_ids;
      t.out.request = static_cast<int64_t>(r);
      t.out.sample = s;
      t.out.policy_version = -1;
      all.push_back(std::move(t));
    }
  }
  for (;;) {
    std::vector<size_t> active;
    std::vector<GenerationRequest> calls;
    for (size_t k = 0; k < all.size(); ++k) {
      Trajectory& t = all[k];
      if (t.done) continue;
      const GenerationRequest& request = requests[t.request];
      GenerationRequest call;
      call.prompt_ids = t.ids;
      call.params = request.params;
      const int64_t budget = request.params.max_new_tokens - static_cast<int64_t>(t.out.token_ids.size());
      call.params.max_new_tokens = t.turn_limit > 0 ? std::min(budget, t.turn_limit) : budget;
      call.seed = sample_seed(sample_seed(request.seed, t.sample), t.turn);
      active.push_back(k);
      calls.push_back(std::move(call));
    }
    if (calls.empty()) break;
    auto results = generate(calls);
    std::vector<std::pair<size_t, std::shared_future<TurnOutcome>>> answers;
    for (auto& result : results) {
      Trajectory& t = all[active[static_cast<size_t>(result.request)]];
      const auto& params = requests[t.request].params;
      t.ids.insert(t.ids.end(), result.token_ids.begin(), result.token_ids.end());
      t.out.token_ids.insert(t.out.token_ids.end(), result.token_ids.begin(), result.token_ids.end());
      result.logprobs.resize(result.token_ids.size(), 0.0F);
      t.out.logprobs.insert(t.out.logprobs.end(), result.logprobs.begin(), result.logprobs.end());
      if (!result.top_logprobs.empty() || !t.out.top_logprobs.empty()) {
        t.out.top_logprobs.resize(t.out.token_ids.size() - result.token_ids.size());
        for (auto& top : result.top_logprobs) t.out.top_logprobs.push_back(std::move(top));
        t.out.top_logprobs.resize(t.out.token_ids.size());
      }
      t.out.policy_version = t.out.policy_version < 0 ? result.policy_version : std::min(t.out.policy_version, result.policy_version);
      t.out.finish_reason = result.finish_reason;
      const int64_t response = static_cast<int64_t>(t.out.token_ids.size());
      if (result.finish_reason == FinishReason::kAbort || response >= params.max_new_tokens) {
        t.done = true;
        continue;
      }
      answers.emplace_back(active[static_cast<size_t>(result.request)],
                           handler.turn_ended({static_cast<int64_t>(t.request), t.sample, result.token_ids,
                                               result.finish_reason, response}));
    }
    for (auto& [k, answer] : answers) {
      Trajectory& t = all[k];
      const TurnOutcome& outcome = answer.get();
      const auto& params = requests[t.request].params;
      const int64_t response = static_cast<int64_t>(t.out.token_ids.size());
      if (!outcome.go_on || !room_for(response, outcome.inserted, params)) {
        if (outcome.go_on) t.out.finish_reason = FinishReason::kLength;
        t.done = true;
        continue;
      }
      t.out.inserted.push_back({response, static_cast<int64_t>(outcome.inserted.size())});
      t.ids.insert(t.ids.end(), outcome.inserted.begin(), outcome.inserted.end());
      t.out.token_ids.insert(t.out.token_ids.end(), outcome.inserted.begin(), outcome.inserted.end());
      t.out.logprobs.resize(t.out.token_ids.size(), 0.0F);
      if (!t.out.top_logprobs.empty()) t.out.top_logprobs.resize(t.out.token_ids.size());
      t.turn_limit = outcome.turn_limit;
      ++t.turn;
    }
  }
  std::vector<GeneratedSample> out;
  for (auto& t : all) {
    t.out.policy_version = std::max<int64_t>(t.out.policy_version, 0);
    out.push_back(std::move(t.out));
  }
  return out;
}

}  // namespace rlcpp

namespace rlcpp {

void PiecedSample::append(GeneratedSample piece) {
  const auto before = static_cast<int64_t>(out.token_ids.size());
  // The piece's versions per token: its first token's, then its own changes, each kept only where
  // it differs from the version the sample's tokens so far end with.
  auto add_version = [&](int64_t start, int64_t version) {
    if (before + start == 0) {
      out.policy_version = version;
      return;
    }
    const int64_t current = out.version_changes.empty() ? out.policy_version : out.version_changes.back().version;
    if (version != current) out.version_changes.push_back({before + start, version});
  };
  if (!piece.token_ids.empty()) {
    add_version(0, piece.policy_version);
    for (const auto& change : piece.version_changes) add_version(change.start, change.version);
  } else if (before == 0 && pieces == 0) {
    out.policy_version = piece.policy_version;
  }
  for (const auto& run : piece.inserted) out.inserted.push_back({before + run.start, run.length});
  out.token_ids.insert(out.token_ids.end(), piece.token_ids.begin(), piece.token_ids.end());
  if (!piece.logprobs.empty() || !out.logprobs.empty()) {  // none from a backend that gives none
    out.logprobs.resize(static_cast<size_t>(before), 0.0F);
    piece.logprobs.resize(piece.token_ids.size(), 0.0F);
    out.logprobs.insert(out.logprobs.end(), piece.logprobs.begin(), piece.logprobs.end());
  }
  if (!piece.top_logprobs.empty() || !out.top_logprobs.empty()) {
    out.top_logprobs.resize(static_cast<size_t>(before));
    for (auto& top : piece.top_logprobs) out.top_logprobs.push_back(std::move(top));
    out.top_logprobs.resize(out.token_ids.size());
  }
  out.text += piece.text;
  out.finish_reason = piece.finish_reason;
  ++pieces;
}

GenerationRequest PiecedSample::continuation(const GenerationRequest& original, int64_t limit) const {
  GenerationRequest call;
  call.prompt_ids = original.prompt_ids;
  call.prompt_ids.insert(call.prompt_ids.end(), out.token_ids.begin(), out.token_ids.end());
  call.params = original.params;
  call.params.max_new_tokens = limit - static_cast<int64_t>(out.token_ids.size());
  call.n = 1;
  call.seed = sample_seed(sample_seed(original.seed, out.sample), pieces);
  return call;
}

}  // namespace rlcpp
