// Rollouts: one prompt's group of G graded samples with advantages (SampleGroup, train/sample.h),
// and the generator of rollout rounds —
// prompts from the dataset cursor, the engine's samples in calls of inference_microbatch_size,
// rewards with DAPO's over-length shaping, advantages over the round and the group filter. The
// colocated loop, trainer rank 0 (picking prompts) and the rollout workers (generating them) use
// the same generator.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "env/episode.h"
#include "io/prompt_dataset.h"
#include "reward/reward_function.h"
#include "rl/config/run_config.h"
#include "text/prompt_builder.h"
#include "train/sample.h"

namespace rlcpp {

// Up to `n` groups from the front of `buffer` (a step's batch; the rest wait for later steps).
std::vector<SampleGroup> take_groups(std::deque<SampleGroup>& buffer, int64_t n);

// Rollout figures of the groups a step looked at (trained on, or filtered out).
struct RolloutStats {
  int64_t samples = 0, correct = 0, truncated = 0, max_len = 0;
  double reward_sum = 0, len_sum = 0;
  std::map<std::string, int64_t> reasons;  // samples per grader reason (code rewards: "passed", "timeout", ...)
  // Multi-turn: trajectories, their turns (sum, max), tool calls and errors, inserted tokens,
  // trajectories per way they ended and per token-exactness outcome.
  int64_t episodes = 0, turns_sum = 0, turns_max = 0, tool_calls = 0, tool_errors = 0, inserted_tokens = 0;
  std::map<std::string, int64_t> ended_by, tito;
  void add(const SampleGroup& g) {
    for (const auto& s : g.samples) {
      if (s.episode.is_object()) {
        ++episodes;
        const int64_t turns = s.episode.value("n_turns", int64_t{0});
        turns_sum += turns;
        turns_max = std::max(turns_max, turns);
        tool_calls += s.episode.value("tool_calls", int64_t{0});
        tool_errors += s.episode.value("tool_errors", int64_t{0});
        inserted_tokens += s.episode.value("inserted_tokens", int64_t{0});
        ++ended_by[s.episode.value("ended_by", std::string("answer"))];
        ++tito[s.episode.value("tito", std::string("unchecked"))];
      }
      const int64_t len = static_cast<int64_t>(s.response_ids.size());
      ++samples;
      correct += s.correct;
      truncated += s.truncated;
      reward_sum += s.reward;
      len_sum += static_cast<double>(len);
      max_len = std::max(max_len, len);
      if (!s.reward_reason.empty()) ++reasons[s.reward_reason];
    }
  }
  double mean(double sum) const { return samples > 0 ? sum / static_cast<double>(samples) : 0.0; }
};


// A prompt chosen for a rollout round: everything the generator needs, so a rollout worker can
// generate it without the dataset (in the distributed mode trainer rank 0 picks the prompts).
struct PromptPick {
  std::vector<int32_t> ids;
  std::string text, gt_answer;
  int64_t line = 0;
  uint64_t seed = 0;  // of the group's sampling
  int64_t id = 0;     // the group's (SampleGroup::id): the dataset cursor's position when picked
  nlohmann::json metadata = nlohmann::json::object();  // the record's other fields (a code task's tests)
  nlohmann::json messages = nlohmann::json::array();   // rendered into `text` (multi-turn episodes continue them)
  bool truncated = false;                              // ids are a cut of text's tokens
};

nlohmann::json to_json(const PromptPick& pick);

// Partial rollouts: how a round takes the policy versions sent while it generates (every version
// sent to a worker is taken in order, by the round or after it).
struct WeightSwitches {
  bool during_round = false;  // the round may take versions (else they wait for its end)
  bool asap = false;          // at the first engine step after they arrive
  // Versions taken before the round starts (waited for): --max-staleness with --stale-policy drop
  // lets no token be sampled by an older one.
  int64_t start_after = 0;
  std::vector<int64_t> at;    // then (unless asap): one version before each of these engine steps of the round (from 0), ascending
  // The checkpoints among those versions: once the round has taken the n-th (counting from 1,
  // those before it starts included), it is cut there and its progress goes to trainer 0.
  std::vector<int64_t> cuts;
  int64_t versions() const { return start_after + static_cast<int64_t>(at.size()); }
};

nlohmann::json to_json(const WeightSwitches& switches);
WeightSwitches switches_from_json(const nlohmann::json& json);

// `options` with the reward's check of every record (RewardFunction::check_record): a code task's
// malformed tests stop the load naming the line (or, with skip_bad_lines, the line is skipped).
// `reward` must outlive the load.
DatasetOptions checked_by(const RewardFunction& reward, DatasetOptions options = {});
PromptPick pick_from_json(const nlohmann::json& json);

// A round's generation so far: each sample as far as it got. A checkpoint cuts the round a rollout
// worker generates ahead (partial rollouts) at the checkpoint's version; the worker sends this to
// trainer 0, which saves it, and the round goes on from it (in the run and in a resumed one alike):
// its unfinished samples as requests continuing their own sequences (a multi-turn trajectory with
// its episode's state, the agent loop's run_episode_pieces).
struct RoundProgress {
  struct Piece {
    PiecedSample sample;
    bool done = false;
    nlohmann::json episode;  // multi-turn: the episode's state, or once done its result (null: single-turn)
  };
  int64_t calls_started = 0;   // the round's generate calls (-imbs prompts each) begun
  std::vector<Piece> samples;  // pick-major, -g per pick (empty: nothing begun)
};

nlohmann::json to_json(const RoundProgress& progress);
// A malformed record is an InternalError naming `where`.
RoundProgress round_progress_from_json(const nlohmann::json& json, const std::string& where);

// --stream-prompts: the next round's prompts, sent with a round, and their samples so far.
struct StreamedPrompts {
  std::vector<PromptPick> picks;
  RoundProgress progress;
};

struct RolloutRound {
  std::vector<SampleGroup> kept, discarded;  // by the group filter (all kept without one)
  double generate_seconds = 0, reward_seconds = 0;
  int64_t restarted = 0;  // --group-order completion: groups held over --max-staleness, begun anew
};

// A round ahead as a checkpoint cut it at the checkpoint's version (partial rollouts,
// --checkpoint-round cut): saved in flight by trainer 0, and gone on from in the run and in a
// resumed one alike, by the generator that cut it (a rollout worker's engine, or the servers).
struct RoundInFlight {
  // Where it was generated: "engine" (`step` counts the round's engine steps) or "servers"
  // (`step` counts response positions, ChunkedRollout's).
  std::string source = "engine";
  std::vector<PromptPick> picks;
  WeightSwitches switches;
  int64_t taken = 0;     // versions taken since the round started
  int64_t step = 0;      // where its switch schedule stands
  int64_t call_end = 0;  // servers: the response position the current generate call ends at
  int64_t version = 0;   // the version the generator holds at the cut
  // Its samples so far while it generates; the graded round once generated; neither before it starts.
  std::optional<RoundProgress> progress;
  std::optional<RolloutRound> graded;
  std::optional<StreamedPrompts> streamed;  // --stream-prompts: the next round's, as far as they got
  // (--group-order completion: its picks and progress are the worker's pool; once graded, streamed
  // holds what is left of it)
  int64_t restarted = 0;  // --group-order completion: held groups it began anew (RolloutRound::restarted)
};

nlohmann::json to_json(const RoundInFlight& round);
// A malformed record is an InternalError naming `where`.
RoundInFlight round_in_flight_from_json(const nlohmann::json& json, const std::string& where);

// How a run turns dataset records into prompt ids: its system prompt, length limit and overflow
// policy (the rollout generator and the memory preflight read prompts the same way).
PromptOptions run_prompt_options(const RunConfig& c, const ModelConfig& model_config);
// The engine settings of a run: KV cache budget and dtype, and the rollout weights' dtype.
EngineConfig run_engine_config(const RunConfig& c);

class RolloutGenerator {
 public:
  struct Rolled;  // one sample before grading
  // `backend`, `dataset`, `cursor` and `reward` must outlive the generator. A generator that only
  // picks prompts (trainer rank 0) has no backend and no reward; one that only generates (a
  // rollout worker) has no dataset and no cursor.
  RolloutGenerator(const RunConfig& config, const ModelConfig& model_config, const Tokenizer& tokenizer, RolloutBackend* backend,
                   const PromptDataset* dataset, DatasetCursor* cursor, const RewardFunction* reward);
  ~RolloutGenerator();

  // One round of `n_prompts` prompts (those left out by the prompt-length limits are replaced).
  RolloutRound generate(int64_t n_prompts) { return generate(pick(n_prompts)); }
  // The two halves: the next `n_prompts` prompts of the dataset cursor within the prompt-length
  // limits, and a round over given prompts with the backend's current weights (pick on one thread;
  // generate may run on another meanwhile).
  std::vector<PromptPick> pick(int64_t n_prompts);
  RolloutRound generate(const std::vector<PromptPick>& picks) { return generate(picks, RoundProgress{}); }
  // A round going on from `progress` (a round cut at a checkpoint, or streamed the round before).
  RolloutRound generate(const std::vector<PromptPick>& picks, RoundProgress progress);

  // --group-order completion: a round over `pool` (in id order, its samples as far as they got),
  // in one generate call that ends once `n` of its groups are complete (going on after a cut). The
  // round is the first n complete groups, in the pool's order; the others stay in `pool`.
  RolloutRound generate_pool(StreamedPrompts& pool, int64_t n);

  int64_t skipped_long() const { return skipped_long_; }
  int64_t skipped_short() const { return skipped_short_; }
  void restore_skipped(int64_t long_prompts, int64_t short_prompts) {
    skipped_long_ = long_prompts;
    skipped_short_ = short_prompts;
  }
  const SamplingParams& sampling() const { return sampling_; }
  // Called again and again on the generating thread while a round's rewards are computed on
  // another (a rollout worker receives weights meanwhile); null: none.
  void set_grading_hook(std::function<void()> hook) { grading_hook_ = std::move(hook); }
  // Called on the generating thread when the backend cut a call (RolloutBackend::cut), with the
  // round's progress then; null: none.
  void set_cut_hook(std::function<void(const RoundProgress&)> hook) { cut_hook_ = std::move(hook); }
  // Multi-turn (--tools, --env-cmd): what the episodes share; null for single-turn rollouts.
  const Agent* agent() const { return agent_.get(); }

  // --stream-prompts: the next round's prompts, decoded in the slots this round's sequences leave
  // free while they run (Engine::generate_until, generate_turns' early stop), their samples or
  // episodes so far carried from round to round (the next round goes on from them). Set before a
  // round, taken after it; none: nothing streamed.
  void set_streamed(std::optional<StreamedPrompts> next) { streamed_ = std::move(next); }
  const std::optional<StreamedPrompts>& streamed() const { return streamed_; }
  std::optional<StreamedPrompts> take_streamed() { return std::exchange(streamed_, std::nullopt); }

 private:
  GenerationRequest request_of(const PromptPick& pick) const;
  // A round of `picks` graded: rewards, advantages over the round, the group filter. `by_request`:
  // each pick's samples (taken).
  RolloutRound graded_round(const std::vector<PromptPick>& picks, std::vector<std::vector<Rolled>>& by_request,
                            double generate_seconds);
  // The single-turn samples of a round, in calls of -imbs prompts, from `progress` on.
  void generate_samples(const std::vector<GenerationRequest>& requests, const std::vector<size_t>& order,
                        RoundProgress& progress);
  // The same for multi-turn episodes (the agent loop's run_episode_pieces).
  void generate_episodes(const std::vector<PromptPick>& picks, const std::vector<size_t>& order, RoundProgress& progress);
  // A sample once it ended, single-turn or an episode (taken from `piece`).
  Rolled rolled_of(const GenerationRequest& request, RoundProgress::Piece& piece) const;

  const RunConfig& c_;
  RolloutBackend* backend_;
  const PromptDataset* dataset_;
  DatasetCursor* cursor_;
  const RewardFunction* reward_;
  std::unique_ptr<SandboxPool> tool_sandbox_;  // runs the python tool's code
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<PromptBuilder> prompts_;
  SamplingParams sampling_;
  std::function<void()> grading_hook_;
  std::function<void(const RoundProgress&)> cut_hook_;
  std::optional<StreamedPrompts> streamed_;
  const Tokenizer& tokenizer_;
  int64_t skipped_long_ = 0, skipped_short_ = 0;
};

}  // namespace rlcpp
