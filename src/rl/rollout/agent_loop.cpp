#include "rl/rollout/agent_loop.h"

#include <algorithm>
#include <future>
#include <map>
#include <memory>
#include <optional>

#include "util/error.h"

namespace rlcpp {

namespace {

// One generate_turns request of a call: its samples' pieces and episodes, and where a continued
// trajectory stands (its response tokens before this request, its current turn's tokens so far).
struct TurnRequest {
  std::vector<size_t> members;  // pieces, in sample order
  int64_t offset = 0;
  std::vector<int32_t> turn_prefix;
  int64_t first_limit = 0;
};

// The backend's view of the episodes: turn ends become episode turns, on threads of their own
// when a tool or an environment may take a while. Turns are counted in the whole trajectory's
// response tokens, a continued request's earlier ones included.
class EpisodeTurns : public TurnHandler {
 public:
  EpisodeTurns(const Agent& agent, const std::vector<TurnRequest>& requests, std::vector<Episode*> episodes,
               std::vector<int64_t>& reported, std::vector<int64_t>& turn_limits, int64_t budget)
      : agent_(agent), requests_(requests), episodes_(std::move(episodes)), reported_(reported),
        turn_limits_(turn_limits), budget_(budget) {
    const auto names = agent_.tools().names();
    slow_ = agent_.environment() != nullptr || std::find(names.begin(), names.end(), "python") != names.end();
  }

  int64_t first_turn_limit(int64_t request) const override { return requests_.at(static_cast<size_t>(request)).first_limit; }
  int64_t resume_lag() const override { return agent_.options().resume_lag; }

  std::shared_future<TurnOutcome> turn_ended(const TurnEnd& end) override {
    const TurnRequest& request = requests_.at(static_cast<size_t>(end.request));
    const size_t k = request.members.at(static_cast<size_t>(end.sample));
    const int64_t response = request.offset + end.response_tokens;
    std::vector<int32_t> ids = end.turn_ids;
    // The continued turn's first end carries the tokens it had before the cut.
    if (end.response_tokens == static_cast<int64_t>(end.turn_ids.size())) ids.insert(ids.begin(), request.turn_prefix.begin(), request.turn_prefix.end());
    reported_[k] = response;
    Episode* episode = episodes_[k];
    int64_t* limit = &turn_limits_[k];
    auto run = [episode, ids = std::move(ids), stopped = end.reason == FinishReason::kStop, response, budget = budget_, limit] {
      const EpisodeNext next = episode->turn(ids, stopped, response, budget);
      *limit = next.turn_limit;  // read once the backend returns (every answer awaited by then)
      return TurnOutcome{next.go_on, next.inserted, next.turn_limit};
    };
    if (!slow_) return ready_outcome(run());
    return std::async(std::launch::async, std::move(run)).share();
  }

 private:
  const Agent& agent_;
  const std::vector<TurnRequest>& requests_;
  std::vector<Episode*> episodes_;  // per piece
  std::vector<int64_t>& reported_;  // per piece: response tokens when its last turn was reported
  std::vector<int64_t>& turn_limits_;  // per piece: the limit of its current turn
  int64_t budget_;
  bool slow_ = false;
};

// Where an unfinished trajectory's current turn starts: after its last inserted run.
int64_t turn_start(const GeneratedSample& g) {
  return g.inserted.empty() ? 0 : g.inserted.back().start + g.inserted.back().length;
}

}  // namespace

EpisodeResult episode_result(RoundProgress::Piece& piece) {
  RLCPP_CHECK(piece.done && piece.episode.contains("summary"), "taking the result of an episode that has not ended");
  const nlohmann::json& e = piece.episode;
  EpisodeResult result;
  result.sample = std::move(piece.sample.out);
  result.prompt_ids = e.at("prompt_ids").get<std::vector<int32_t>>();
  result.final_text = e.at("final_text").get<std::string>();
  result.summary = e.at("summary");
  result.env_reward = e.at("env_reward").get<double>();
  result.truncated = e.at("truncated").get<bool>();
  return result;
}

void run_episode_pieces(RolloutBackend& backend, const Agent& agent, const std::vector<EpisodePrompt>& prompts,
                        const SamplingParams& sampling, int64_t G, const std::vector<RoundProgress::Piece*>& pieces,
                        const std::function<void()>& on_cut, const EarlyStop& until) {
  const Tokenizer& tokenizer = agent.tokenizer();
  const auto n = static_cast<size_t>(G);
  RLCPP_CHECK(pieces.size() == prompts.size() * n, "{} episode pieces for {} prompts of {} samples", pieces.size(),
              prompts.size(), G);
  RLCPP_CHECK(until.group_of.empty() || until.group_of.size() == prompts.size(), "an early stop naming groups of {} prompts for {}",
              until.group_of.size(), prompts.size());
  std::vector<std::unique_ptr<Episode>> episodes(pieces.size());
  std::vector<std::vector<int32_t>> prompt_ids(pieces.size());
  std::vector<int64_t> reported(pieces.size(), 0), turn_limits(pieces.size(), agent.options().max_tokens_per_turn);
  std::vector<bool> fresh(prompts.size(), true);  // prompts none of whose episodes has begun
  const std::string where = "a round's episodes in flight";
  for (size_t k = 0; k < pieces.size(); ++k) {
    RoundProgress::Piece& piece = *pieces[k];
    piece.sample.out.request = static_cast<int64_t>(k / n);  // (a continuation's seed takes the sample)
    piece.sample.out.sample = static_cast<int64_t>(k % n);
    const bool begun = piece.done || piece.episode.is_object();
    if (k % n == 0) fresh[k / n] = !begun;
    RLCPP_CHECK(fresh[k / n] == !begun, "prompt {} of a round has some episodes begun and some not", k / n);
    if (piece.done) continue;
    const EpisodePrompt& p = prompts[k / n];
    episodes[k] = std::make_unique<Episode>(agent, p.id * G + static_cast<int64_t>(k % n), p.messages, p.record);
    if (!piece.episode.is_object()) continue;
    episodes[k]->restore(piece.episode.at("state"), where);
    prompt_ids[k] = piece.episode.at("prompt_ids").get<std::vector<int32_t>>();
    reported[k] = piece.episode.at("reported").get<int64_t>();
    turn_limits[k] = piece.episode.at("turn_limit").get<int64_t>();
  }
  auto complete = [&](size_t p) {
    return std::all_of(pieces.begin() + static_cast<std::ptrdiff_t>(p * n), pieces.begin() + static_cast<std::ptrdiff_t>((p + 1) * n),
                       [](const RoundProgress::Piece* piece) { return piece->done; });
  };
  // With `until`: the groups still to end before the episodes stop (0: none).
  auto groups_wanted = [&]() -> int64_t {
    std::map<int64_t, bool> ended;  // the named groups, whether each has every episode ended
    for (size_t p = 0; p < prompts.size(); ++p) {
      const int64_t g = until.group_of[p];
      if (g < 0) continue;
      auto [it, added] = ended.try_emplace(g, true);
      it->second = it->second && complete(p);
    }
    const auto done = std::count_if(ended.begin(), ended.end(), [](const auto& e) { return e.second; });
    return std::max<int64_t>(0, std::min<int64_t>(until.groups, static_cast<int64_t>(ended.size())) - done);
  };
  if (!until.group_of.empty() && groups_wanted() == 0) return;
  std::vector<TurnRequest> turns;
  std::vector<GenerationRequest> requests;
  auto add_request = [&](const std::vector<int32_t>& ids, int64_t samples, uint64_t seed, size_t first) {
    GenerationRequest request;
    request.prompt_ids = ids;
    request.params = sampling;
    request.n = samples;
    request.seed = seed;
    requests.push_back(std::move(request));
    TurnRequest turn;
    for (int64_t s = 0; s < samples; ++s) turn.members.push_back(first + static_cast<size_t>(s));
    turn.first_limit = agent.options().max_tokens_per_turn;
    turns.push_back(std::move(turn));
  };
  // The fresh episodes' starts: an environment's first observation, on its workers at once.
  std::vector<std::optional<std::string>> observations(pieces.size());
  if (agent.environment() != nullptr) {
    std::vector<std::future<std::optional<std::string>>> starts(pieces.size());
    for (size_t k = 0; k < pieces.size(); ++k) {
      if (fresh[k / n]) starts[k] = std::async(std::launch::async, [e = episodes[k].get()] { return e->start(); });
    }
    for (size_t k = 0; k < pieces.size(); ++k) {
      if (fresh[k / n]) observations[k] = starts[k].get();
    }
  }
  // A fresh prompt's episodes: one request (its G samples share the prefill), or one per sample
  // where the environment's first messages differ within the group.
  auto begin_prompt = [&](size_t p) {
    const size_t first = p * n;
    bool same = true;
    for (size_t s = 1; s < n; ++s) same = same && observations[first + s] == observations[first];
    for (size_t s = 0; s < (same ? 1 : n); ++s) {
      const size_t k = first + s;
      std::vector<int32_t> ids = prompts[p].ids;
      std::string text = prompts[p].text;
      bool truncated = prompts[p].truncated;
      if (observations[k]) {  // the prompt with the environment's first message
        text = agent.chat().render(episodes[k]->prompt_messages(), true, agent.template_variables());
        ids = tokenizer.encode(text);
        truncated = false;
      }
      for (size_t j = 0; j < (same ? n : 1); ++j) {
        episodes[k + j]->set_prompt_text(truncated ? "" : text);
        prompt_ids[k + j] = ids;
      }
      if (same) add_request(ids, G, prompts[p].seed, first);
      else add_request(ids, 1, sample_seed(prompts[p].seed, static_cast<int64_t>(s)), k);
    }
  };
  // A begun prompt's unfinished episodes go on: all anew where none holds a token, else each from
  // its own sequence and turn.
  auto go_on = [&](size_t p) {
    const size_t first = p * n;
    bool untouched = true;
    for (size_t s = 0; s < n; ++s) {
      const RoundProgress::Piece& piece = *pieces[first + s];
      untouched = untouched && !piece.done && piece.sample.out.token_ids.empty() && prompt_ids[first + s] == prompt_ids[first];
    }
    if (untouched && agent.environment() == nullptr) {
      add_request(prompt_ids[first], G, prompts[p].seed, first);
      return;
    }
    for (size_t s = 0; s < n; ++s) {
      const size_t k = first + s;
      const RoundProgress::Piece& piece = *pieces[k];
      if (piece.done) continue;
      const GeneratedSample& g = piece.sample.out;
      GenerationRequest original;
      original.prompt_ids = prompt_ids[k];
      original.params = sampling;
      original.seed = prompts[p].seed;
      requests.push_back(piece.sample.continuation(original, sampling.max_new_tokens));
      TurnRequest turn;
      turn.members = {k};
      turn.offset = static_cast<int64_t>(g.token_ids.size());
      turn.turn_prefix.assign(g.token_ids.begin() + turn_start(g), g.token_ids.end());
      const auto so_far = static_cast<int64_t>(turn.turn_prefix.size());
      turn.first_limit = turn_limits[k] > 0 ? std::max<int64_t>(1, turn_limits[k] - so_far) : 0;
      turns.push_back(std::move(turn));
    }
  };
  // A piece whose trajectory ended: its episode's end (the token-exactness check) and its result.
  auto finish = [&](size_t k) {
    RoundProgress::Piece& piece = *pieces[k];
    GeneratedSample& g = piece.sample.out;
    Episode& episode = *episodes[k];
    // A last turn the response budget cut was never reported: it is the episode's last turn.
    const auto tokens = static_cast<int64_t>(g.token_ids.size());
    const int64_t from = std::max(reported[k], turn_start(g));
    const bool cut = tokens > from;
    if (cut) episode.last_turn({g.token_ids.begin() + from, g.token_ids.end()});
    std::vector<int32_t> ids = prompt_ids[k];
    ids.insert(ids.end(), g.token_ids.begin(), g.token_ids.end());
    std::vector<uint8_t> sampled(prompt_ids[k].size(), 0);
    sampled.resize(ids.size(), 1);
    for (const auto& run : g.inserted) {
      std::fill_n(sampled.begin() + static_cast<std::ptrdiff_t>(prompt_ids[k].size() + run.start), run.length, 0);
    }
    episode.finish(g.finish_reason == FinishReason::kLength && (cut || tokens >= sampling.max_new_tokens), ids, sampled);
    // The text of the whole trajectory (pieces decoded apart may split a character).
    if (g.text.empty() || piece.sample.pieces > 1) g.text = tokenizer.decode(g.token_ids, true);
    piece.episode = {{"prompt_ids", prompt_ids[k]}, {"final_text", episode.final_text()}, {"summary", episode.summary()},
                     {"env_reward", episode.env_reward()},
                     {"truncated", episode.ended_by() == EpisodeEnd::kLength || episode.ended_by() == EpisodeEnd::kTurnLength}};
  };
  const bool stops_early = !until.group_of.empty();
  for (bool first = true;; first = false) {
    for (size_t p = 0; p < prompts.size(); ++p) {
      if (complete(p)) continue;
      if (first && fresh[p]) begin_prompt(p);
      else go_on(p);
    }
    if (requests.empty()) break;
    EarlyStop stop;  // `until` over the call's requests
    if (stops_early) {
      for (const auto& turn : turns) stop.group_of.push_back(until.group_of[turn.members.front() / n]);
      stop.groups = groups_wanted();
    }
    std::vector<Episode*> by_piece;
    for (auto& e : episodes) by_piece.push_back(e.get());
    EpisodeTurns handler(agent, turns, by_piece, reported, turn_limits, sampling.max_new_tokens);
    auto generated = backend.generate_turns(requests, handler, stop);
    const bool cut = backend.cut();
    std::vector<bool> seen(pieces.size(), false);
    for (auto& g : generated) {
      const size_t k = turns.at(static_cast<size_t>(g.request)).members.at(static_cast<size_t>(g.sample));
      RoundProgress::Piece& piece = *pieces[k];
      RLCPP_CHECK(!piece.done && !seen[k], "the backend gave request {} sample {} twice", g.request, g.sample);
      seen[k] = true;
      // Unfinished: cut at a checkpoint, or ended with the groups `until` asked for.
      piece.done = !((cut || stops_early) && g.finish_reason == FinishReason::kAbort);
      piece.sample.append(std::move(g));
      if (piece.done) finish(k);
    }
    for (const auto& turn : turns) {
      for (size_t k : turn.members) RLCPP_CHECK(seen[k], "the backend gave no trajectory for piece {}", k);
    }
    requests.clear();
    turns.clear();
    for (size_t k = 0; k < pieces.size(); ++k) {  // the episodes in flight, as far as they got
      RoundProgress::Piece& piece = *pieces[k];
      if (piece.done) continue;
      piece.episode = {{"state", episodes[k]->state()}, {"prompt_ids", prompt_ids[k]}, {"reported", reported[k]},
                       {"turn_limit", turn_limits[k]}};
    }
    if (!cut) {
      RLCPP_CHECK(!stops_early || groups_wanted() == 0, "the backend ended a multi-turn call before the {} groups "
                  "asked for had every episode ended", stop.groups);
      break;
    }
    if (on_cut) on_cut();
    if (stops_early && groups_wanted() == 0) break;
  }
}

std::vector<EpisodeResult> run_episodes(RolloutBackend& backend, const Agent& agent,
                                        const std::vector<EpisodePrompt>& prompts, const SamplingParams& sampling,
                                        int64_t G) {
  std::vector<RoundProgress::Piece> pieces(prompts.size() * static_cast<size_t>(G));
  std::vector<RoundProgress::Piece*> pointers;
  for (auto& piece : pieces) pointers.push_back(&piece);
  run_episode_pieces(backend, agent, prompts, sampling, G, pointers, nullptr);
  std::vector<EpisodeResult> out;
  for (auto& piece : pieces) out.push_back(episode_result(piece));
  return out;
}

}  // namespace rlcpp
