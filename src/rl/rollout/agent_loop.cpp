#include "rl/rollout/agent_loop.h"

#include <future>
#include <memory>

#include "util/error.h"

namespace rlcpp {

namespace {

// The backend's view of the episodes: turn ends become episode turns, on threads of their own
// when a tool or an environment may take a while.
class EpisodeTurns : public TurnHandler {
 public:
  EpisodeTurns(const Agent& agent, std::vector<std::vector<Episode*>> by_request, std::vector<int64_t> budgets)
      : agent_(agent), by_request_(std::move(by_request)), budgets_(std::move(budgets)) {
    const auto names = agent_.tools().names();
    slow_ = agent_.environment() != nullptr || std::find(names.begin(), names.end(), "python") != names.end();
    reported_.resize(by_request_.size());
    for (size_t r = 0; r < by_request_.size(); ++r) reported_[r].assign(by_request_[r].size(), 0);
  }

  int64_t first_turn_limit() const override { return agent_.options().max_tokens_per_turn; }
  int64_t resume_lag() const override { return agent_.options().resume_lag; }

  std::shared_future<TurnOutcome> turn_ended(const TurnEnd& end) override {
    Episode* episode = by_request_.at(static_cast<size_t>(end.request)).at(static_cast<size_t>(end.sample));
    reported_[static_cast<size_t>(end.request)][static_cast<size_t>(end.sample)] = end.response_tokens;
    const int64_t budget = budgets_[static_cast<size_t>(end.request)];
    auto run = [episode, end, budget] {
      const EpisodeNext next = episode->turn(end.turn_ids, end.reason == FinishReason::kStop, end.response_tokens, budget);
      return TurnOutcome{next.go_on, next.inserted, next.turn_limit};
    };
    if (!slow_) return ready_outcome(run());
    return std::async(std::launch::async, run).share();
  }

  // The response tokens a sample had when its last turn was reported (its later tokens, if any,
  // are a turn the response budget cut).
  int64_t reported(int64_t request, int64_t sample) const {
    return reported_[static_cast<size_t>(request)][static_cast<size_t>(sample)];
  }

 private:
  const Agent& agent_;
  std::vector<std::vector<Episode*>> by_request_;
  std::vector<int64_t> budgets_;
  std::vector<std::vector<int64_t>> reported_;
  bool slow_ = false;
};

}  // namespace

std::vector<EpisodeResult> run_episodes(RolloutBackend& backend, const Agent& agent,
                                        const std::vector<EpisodePrompt>& prompts, const SamplingParams& sampling,
                                        int64_t G) {
  const Tokenizer& tokenizer = agent.tokenizer();
  // The episodes, and their starts (an environment's first observation, on the environment's
  // workers at once).
  std::vector<std::unique_ptr<Episode>> episodes;
  for (const auto& p : prompts) {
    for (int64_t s = 0; s < G; ++s) {
      episodes.push_back(std::make_unique<Episode>(agent, p.id * G + s, p.messages, p.record));
    }
  }
  std::vector<std::optional<std::string>> observations(episodes.size());
  if (agent.environment() != nullptr) {
    std::vector<std::future<std::optional<std::string>>> starts;
    for (auto& e : episodes) starts.push_back(std::async(std::launch::async, [&e] { return e->start(); }));
    for (size_t k = 0; k < starts.size(); ++k) observations[k] = starts[k].get();
  }
  // One request per prompt (its G samples share the prefill), or one per sample where the
  // environment's first messages differ within the group.
  std::vector<GenerationRequest> requests;
  std::vector<std::vector<Episode*>> by_request;
  std::vector<int64_t> budgets;
  struct Origin {
    size_t request;
    int64_t sample;
  };
  std::vector<Origin> origin(episodes.size());
  for (size_t p = 0; p < prompts.size(); ++p) {
    const size_t first = p * static_cast<size_t>(G);
    bool same = true;
    for (int64_t s = 1; s < G; ++s) same = same && observations[first + static_cast<size_t>(s)] == observations[first];
    auto add_request = [&](const std::vector<int32_t>& ids, int64_t n, uint64_t seed, size_t episode0) {
      GenerationRequest request;
      request.prompt_ids = ids;
      request.params = sampling;
      request.n = n;
      request.seed = seed;
      std::vector<Episode*> members;
      for (int64_t s = 0; s < n; ++s) {
        origin[episode0 + static_cast<size_t>(s)] = {requests.size(), s};
        members.push_back(episodes[episode0 + static_cast<size_t>(s)].get());
      }
      requests.push_back(std::move(request));
      by_request.push_back(std::move(members));
      budgets.push_back(sampling.max_new_tokens);
    };
    for (int64_t s = 0; s < (same ? 1 : G); ++s) {
      const size_t k = first + static_cast<size_t>(s);
      Episode& episode = *episodes[k];
      std::vector<int32_t> ids = prompts[p].ids;
      std::string text = prompts[p].text;
      bool truncated = prompts[p].truncated;
      if (observations[k]) {  // the prompt with the environment's first message
        text = agent.chat().render(episode.prompt_messages(), true, agent.template_variables());
        ids = tokenizer.encode(text);
        truncated = false;
      }
      for (int64_t j = 0; j < (same ? G : 1); ++j) episodes[k + static_cast<size_t>(j)]->set_prompt_text(truncated ? "" : text);
      if (same) {
        add_request(ids, G, prompts[p].seed, first);
      } else {
        add_request(ids, 1, sample_seed(prompts[p].seed, s), k);
      }
    }
  }
  EpisodeTurns handler(agent, by_request, budgets);
  auto generated = backend.generate_turns(requests, handler);
  std::vector<std::vector<GeneratedSample*>> found(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) found[r].assign(static_cast<size_t>(requests[r].n), nullptr);
  for (auto& g : generated) found.at(static_cast<size_t>(g.request)).at(static_cast<size_t>(g.sample)) = &g;
  std::vector<EpisodeResult> out;
  for (size_t k = 0; k < episodes.size(); ++k) {
    Episode& episode = *episodes[k];
    const Origin o = origin[k];
    GeneratedSample* g = found[o.request][static_cast<size_t>(o.sample)];
    RLCPP_CHECK(g != nullptr, "the backend gave no trajectory for request {} sample {}", o.request, o.sample);
    EpisodeResult result;
    result.prompt_ids = requests[o.request].prompt_ids;
    // A last turn the response budget cut was never reported: it is the episode's last turn.
    const int64_t reported = handler.reported(static_cast<int64_t>(o.request), o.sample);
    const auto n = static_cast<int64_t>(g->token_ids.size());
    int64_t last_inserted_end = 0;
    for (const auto& run : g->inserted) last_inserted_end = run.start + run.length;
    const bool cut = n > std::max(reported, last_inserted_end);
    if (cut) {
      episode.last_turn({g->token_ids.begin() + std::max(reported, last_inserted_end), g->token_ids.end()});
    }
    std::vector<int32_t> ids = result.prompt_ids;
    ids.insert(ids.end(), g->token_ids.begin(), g->token_ids.end());
    std::vector<uint8_t> sampled(result.prompt_ids.size(), 0);
    sampled.resize(ids.size(), 1);
    for (const auto& run : g->inserted) {
      std::fill_n(sampled.begin() + static_cast<std::ptrdiff_t>(result.prompt_ids.size() + run.start), run.length, 0);
    }
    const bool length = g->finish_reason == FinishReason::kLength && (cut || n >= requests[o.request].params.max_new_tokens);
    episode.finish(length, ids, sampled);
    result.final_text = episode.final_text();
    result.summary = episode.summary();
    result.env_reward = episode.env_reward();
    result.truncated = episode.ended_by() == EpisodeEnd::kLength || episode.ended_by() == EpisodeEnd::kTurnLength;
    if (g->text.empty()) g->text = tokenizer.decode(g->token_ids, true);
    g->request = static_cast<int64_t>(k / static_cast<size_t>(G));
    g->sample = static_cast<int64_t>(k % static_cast<size_t>(G));
    result.sample = std::move(*g);
    out.push_back(std::move(result));
  }
  return out;
}

}  // namespace rlcpp
