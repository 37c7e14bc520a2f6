// The configuration of a training run, and the one table of settings it is read from.
//
// Every setting has a place in the YAML file (`group.key`; the groups are RunConfig's members:
// runtime, parallel, staleness, model, rollout, remote, reward, algorithm, train, eval, logging),
// optional command-line flags with the reference system's names, and optional other names
// (ChatLearn's) accepted in the file. A key is unique across groups, so a file or a checkpoint's
// configuration written before a setting moved group is still read by its key. Sources are merged as raw values —
// defaults, then the file, then flags — and applied to a RunConfig in table order, so an
// algorithm preset is always applied before the single settings that override it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "algo/presets.h"
#include "env/episode.h"
#include "openai/remote_rollout.h"
#include "reward/reward_function.h"
#include "rl/config/run_options.h"
#include "train/trainer.h"
#include "util/json.h"

namespace rlcpp {

// A run's configuration: each layer's own options, one member per YAML group. Components take
// the group they need (a trainer its TrainOptions, the relay buffer its StalenessOptions); what
// combines groups (the batch relations, the plan of a run) takes the whole.
struct RunConfig {
  RuntimeOptions runtime;    // data, steps, seed, device and dtype, resume
  ParallelOptions parallel;  // processes, tensor parallelism, ZeRO, weight sync
  StalenessOptions staleness;  // rounds ahead, sync cadence, the relay buffer
  PolicyOptions model;       // the model trained: its directory, LoRA, frozen weights' dtype
  RolloutOptions rollout;    // the engine, sampling, prompts and round sizes
  RemoteOptions remote;      // rollouts from OpenAI-compatible servers (-b)
  RewardOptions reward;      // the grader and an external reward command
  EpisodeOptions episode;    // multi-turn rollouts: tools, an external environment, turn limits
  AlgoConfig algo = algo_preset("GRPO", "algorithm.algo");  // the algorithm group: preset, then single overrides
  TrainOptions train;        // batches, epochs, optimizer
  EvalOptions eval;          // held-out sets evaluated during training
  LoggingOptions logging;    // run directory, checkpoints, rollout files, console, profiles

  // Prompts per rollout round per rollout worker (-ibs, or -tbs).
  int64_t round_prompts() const {
    return rollout.inference_batch_size > 0 ? rollout.inference_batch_size : train.train_batch_size;
  }
  // Steps one round feeds: every engine's -ibs prompts over the replicas' -tbs groups a step.
  int64_t steps_per_round() const {
    return std::max<int64_t>(1, parallel.engines() * round_prompts() / (parallel.replicas() * train.train_batch_size));
  }
  // The most versions the schedule lets a sample be trained after the policy that sampled it: the
  // last step of its round (s - 1), and under -nb a round ahead of s steps more for each round
  // between weight syncs. Groups kept over from other rounds (dynamic batching) may be older.
  int64_t schedule_staleness() const {
    const int64_t s = steps_per_round();
    const bool ahead = staleness.n_behind >= 1 && (parallel.distributed() || remote.enabled());
    return ahead ? (std::max<int64_t>(1, staleness.sync_frequency) + 1) * s - 1 : s - 1;
  }
  // The least --max-staleness a run may ask for: the schedule's staleness, or with partial rollouts
  // that of a round not generated ahead (s - 1): the round ahead then starts at the versions the
  // bound allows (--stale-policy drop) or trains only its tokens from them (finish).
  int64_t staleness_floor() const { return staleness.partial_rollout ? steps_per_round() - 1 : schedule_staleness(); }
  // -a PPO: the directory the critic starts from: --critic-model, else the reward model (--reward-model),
  // else the policy's base (-m) with a fresh value head.
  const std::string& critic_model() const {
    if (!train.critic.model.empty()) return train.critic.model;
    return reward.model.path.empty() ? model.path : reward.model.path;
  }
};

// Raw values by setting name ("train.learning_rate"), each with where it came from for errors.
struct RawSettings {
  Json values = Json::object();
  std::map<std::string, std::string> source;
  void set(const std::string& name, Json value, std::string where);
  // A flag overrides the file: sets `name` and drops file values given in another unit of it.
  void set_override(const std::string& name, Json value, std::string where);
};

struct Setting {
  std::string name;                  // group.key
  std::string flags;                 // CLI11 names ("-m,--model"; multi-letter short names as --xx)
  std::vector<std::string> aliases;  // other names accepted in the file (ChatLearn's), dotted if nested
  std::string help;
  std::function<void(RunConfig&, const Json&, const std::string& where, const RawSettings&)> apply;
  std::function<Json(const RunConfig&)> get;
  bool resume_may_differ = false;    // may change when a run is resumed (logging, limits, placement)
  std::string converts_to;           // another unit of this setting (ChatLearn's samples for prompts): not
                                     // printed, and a flag for that setting replaces it
};

const std::vector<Setting>& run_settings();
// The YAML groups, in the table's order (RunConfig's members).
std::vector<std::string> run_groups();
// The setting named `name` (group.key), or nullptr.
const Setting* find_setting(const std::string& name);

// Reads a YAML run file into `raw`: groups of settings by name or by an accepted other name.
// Unknown names and ChatLearn features that do not exist here are UserErrors naming the key.
void read_run_file(const std::filesystem::path& path, RawSettings& raw);

// Applies `raw` over the defaults and checks the result (batch relations, files, flags of features
// that do not exist yet); every failure names the settings and values involved. Without
// `check_files` the model and dataset paths are not looked at (for --print-config).
RunConfig resolve_run_config(const RawSettings& raw, bool check_files = true);

// The resolved configuration, grouped, every setting present: what --print-config prints (as YAML
// that --config reads back) and what a checkpoint records.
nlohmann::ordered_json run_config_json(const RunConfig& config);
std::string run_config_yaml(const RunConfig& config);

// The eval sets of -ed, in the order given: (name, JSONL path). A malformed map is a UserError.
std::vector<std::pair<std::string, std::string>> eval_sets(const EvalOptions& eval);

// Settings that differ between a checkpoint's recorded configuration and this one and may not
// (resume_may_differ false), as "name: recorded -> now".
std::vector<std::string> incompatible_settings(const nlohmann::ordered_json& recorded, const RunConfig& config);

}  // namespace rlcpp
