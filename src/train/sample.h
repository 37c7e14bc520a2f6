// The one sample record of RL: what a rollout produced and the trainer trains on, the same in every
// producer (the engine, remote servers, rollout workers over MPI, checkpoints) and consumer (the
// trainer, metrics, rollout files, the report). A response is a run of segments: tokens the policy
// sampled (trained, each segment with the policy version that sampled it, so a rollout continued
// across a weight update keeps both versions) and tokens inserted by a tool or an environment
// (never trained). The per-token loss mask and versions are read off the segments; advantages are
// one for every token (outcome rewards) or one per token (per-token credit, GAE).
// A group is one prompt's samples with what they share; it owns them, and its version and figures
// are read off them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rlcpp {

enum class SegmentKind : uint8_t {
  kModel,     // sampled by the policy: trained on
  kInserted,  // inserted into the response (a tool's output, an environment's turn): context, never trained
  kStale,     // sampled by a policy further back than --max-staleness allows (--stale-policy finish): context
};

struct Segment {
  SegmentKind kind = SegmentKind::kModel;
  int64_t length = 0;          // tokens
  int64_t policy_version = 0;  // the weights' version when the tokens were sampled (inserted: when inserted)
  bool operator==(const Segment&) const = default;
};

struct Sample {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> response_ids;    // every token after the prompt, model and inserted, in order
  std::vector<Segment> segments;        // cover response_ids in order
  std::vector<float> rollout_logprobs;  // per response token: the sampler's (0 on inserted tokens); empty: not kept
  std::vector<double> advantages;       // one (every token's) or one per response token
  std::string response;                 // the response's text
  double reward = 0;
  std::map<std::string, double> reward_parts;  // named components of the reward
  std::string reward_reason;                   // the grader's reason, where it gives one (code: "timeout", ...)
  bool correct = false;                 // the grader's verdict
  bool truncated = false;               // stopped at the length limit
  int64_t group_id = 0;                 // the group it belongs to (SampleGroup::id)
  // Multi-turn: the episode's summary (env/episode.h: "turns" [{role, content, n_tokens, trained}],
  // n_turns, tool_calls, tool_errors, inserted_tokens, ended_by, tito); null for a single turn.
  nlohmann::json episode;

  // Appends tokens as a new segment (joined to the last one when it is of the same kind and
  // version). `logprobs`: one per token for model tokens, or empty.
  void append(SegmentKind kind, const std::vector<int32_t>& ids, const std::vector<float>& logprobs, int64_t version);

  // Per response token: 1 where the loss counts (model tokens), 0 on inserted ones.
  std::vector<uint8_t> loss_mask() const;
  // Per response token: the version of the policy that sampled (or inserted) it.
  std::vector<int64_t> token_versions() const;
  int64_t trained_tokens() const;       // model tokens
  int64_t policy_version() const;       // the oldest model token's (the first segment's without any; no token: 0)
  // Model tokens sampled before version `oldest` become kStale (kept as context, no longer
  // trained); returns how many.
  int64_t mark_stale(int64_t oldest);
  bool single_version() const;          // every model token from one version
  // Token t's advantage.
  double advantage(size_t t) const { return advantages.size() == 1 ? advantages[0] : advantages.at(t); }
  bool uniform_advantage() const { return advantages.size() == 1; }
  void set_advantage(double a) { advantages.assign(1, a); }
};

// One prompt's samples, graded, with what they share.
struct SampleGroup {
  std::vector<Sample> samples;
  int64_t id = 0;                   // unique in a run (the dataset cursor's position when it was picked)
  std::string prompt, gt_answer;    // the prompt's text and the record's ground truth
  int64_t line = 0;                 // of the record in the dataset
  int64_t trained_step = 0;         // the step that first trained on it (kept by the relay buffer)

  // Its oldest sample's: of those with model tokens if any has some, else of those with any token (none: 0).
  int64_t policy_version() const;
  int64_t response_tokens() const;  // over its samples (its weight when groups are balanced over trainers)
};

// A sample of model tokens only (one segment): what a single-turn rollout gives.
Sample model_sample(std::vector<int32_t> prompt_ids, std::vector<int32_t> response_ids, double advantage,
                    std::vector<float> rollout_logprobs = {}, int64_t policy_version = 0, bool truncated = false);

// Checks a sample's parts agree (segments cover the response, log-probs and advantages sized to it);
// an InternalError naming `what` otherwise.
void check_sample(const Sample& sample, const std::string& what);

// The one serialised form of samples and groups: checkpoints, messages between ranks (as
// MessagePack) and rollout files. Every double and float survives exactly. Groups written before
// samples had segments (a scalar "advantage", the version on the group) read back as one segment.
nlohmann::json to_json(const Sample& sample);
nlohmann::json to_json(const SampleGroup& group);
SampleGroup group_from_json(const nlohmann::json& json);

}  // namespace rlcpp
