// The agent loop: a round's prompts as multi-turn episodes on any rollout backend. Each prompt's G
// episodes start (an external environment may add a first user message), the backend generates
// their turns (the engine continues each sequence from its KV blocks; servers get the whole
// sequence so far each turn), and after every turn the episode's tool calls or environment step
// run on a thread of their own while the engine decodes the others. The results carry the
// trajectory's tokens with its inserted runs, and the episode's summary.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/rollout_backend.h"
#include "env/episode.h"
#include "rl/rollout/rollout.h"

namespace rlcpp {

struct EpisodePrompt {
  nlohmann::ordered_json messages;  // rendered into `ids`
  std::string text;                 // their rendering (with the generation prompt)
  std::vector<int32_t> ids;
  bool truncated = false;           // ids are a cut of text's tokens (no token-exactness check)
  nlohmann::json record = nlohmann::json::object();  // the dataset line, for an environment's start
  int64_t id = 0;                   // the group's: episode ids are id * G + sample
  uint64_t seed = 0;
};

struct EpisodeResult {
  GeneratedSample sample;      // token_ids: every response token; inserted: the runs not sampled
  std::vector<int32_t> prompt_ids;  // the episode's own prompt (an environment's first message may extend it)
  std::string final_text;      // the last assistant turn's text (what the -rt reward grades)
  nlohmann::json summary;      // Episode::summary()
  double env_reward = 0;
  bool truncated = false;      // the response budget or a turn limit ended it
};

// Every prompt's G episodes on `backend`, ordered by (prompt, sample).
std::vector<EpisodeResult> run_episodes(RolloutBackend& backend, const Agent& agent,
                                        const std::vector<EpisodePrompt>& prompts, const SamplingParams& sampling,
                                        int64_t G);

// The same episodes from where `pieces` (G per prompt, in prompt order) say they got: fresh where
// none of a prompt's holds anything, else each unfinished one going on from its tokens and its
// episode's state. A generate_turns call the backend cut (a checkpoint among a round's switches)
// leaves every piece as far as it got, calls `on_cut` and goes on. `until` (its group_of over
// prompts) ends the episodes early, once that many of its groups have every episode ended
// (--stream-prompts, --group-order completion); none named: every episode ends. A piece that
// ended is done, its `episode` holding its result (episode_result); an unfinished one's holds its
// episode's state (the tokens of its prompt, the turn limit it runs under, the response tokens it
// reported).
void run_episode_pieces(RolloutBackend& backend, const Agent& agent, const std::vector<EpisodePrompt>& prompts,
                        const SamplingParams& sampling, int64_t G, const std::vector<RoundProgress::Piece*>& pieces,
                        const std::function<void()>& on_cut, const EarlyStop& until = {});
// A done piece's episode result (its sample moved out).
EpisodeResult episode_result(RoundProgress::Piece& piece);

}  // namespace rlcpp
