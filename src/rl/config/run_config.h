// The configuration of a training run, and the one table of settings it is read from.
//
// Every setting has a place in the YAML file (`group.key`; groups runtime, model, rollout,
// algorithm, train, logging), optional command-line flags with the reference system's names, and
// optional other names (ChatLearn's) accepted in the file. Sources are merged as raw values —
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
#include "engine/engine.h"
#include "openai/remote_rollout.h"
#include "engine/sampling.h"
#include "parallel/weight_sync.h"
#include "reward/reward.h"
#include "text/prompt_builder.h"
#include "train/trainer.h"
#include "util/json.h"

namespace rlcpp {

struct RunConfig {
  // runtime
  std::string dataset;                 // training JSONL
  std::string eval_dataset;            // {"name": "path.jsonl", ...}: held-out sets evaluated during training
  int64_t num_episodes = 1;            // passes over the dataset
  int64_t max_steps = 0;               // stop after this many steps (0: the episodes decide)
  uint64_t seed = 42;                  // data order, sampling and initialisation
  int64_t num_trainers = 0;            // data-parallel trainer ranks (0: 1)
  int64_t num_inferencers = 0;         // rollout-worker ranks; >= 1 is the distributed mode
  int64_t sync_bucket_mb = 100;        // weight-sync buckets (ChatLearn's coalesced_buffer_mb)
  SyncMode param_sync_comm_type = SyncMode::kBroadcast;  // how trainer rank 0 sends weights to the workers
  int64_t sync_frequency = 1;          // rollout rounds between weight syncs
  bool verify_sync = false;            // rollout workers send back a hash of the weights they applied
  RolloutBackendKind backend = RolloutBackendKind::kNative;  // where rollouts come from (-b)
  std::string rollout_url;             // -b openai|vllm|sglang: the servers, "http://HOST:PORT[,...]"
  std::string rollout_model;           // the servers' served name of the base model ("": their first listed)
  std::string rollout_weights_dir;     // where the policy is written for the servers to read ("": run_dir/rollout-weights)
  double rollout_timeout = 600;        // seconds a server has for one prompt's samples before it is retried elsewhere
  int64_t rollout_concurrency = 32;    // prompts in flight at one server
  int64_t tp = 1;                      // trainer tensor parallelism: ranks per data-parallel replica
  int64_t pp = 1;                      // trainer pipeline parallelism (refused above 1)
  int64_t zero = 0;                    // ZeRO stage (refused above 0 until it exists)
  int64_t ptp = 1;                     // rollout tensor parallelism: ranks per engine
  int64_t n_behind = 0;                // rounds rollout may run ahead of training (bounded staleness)
  int64_t max_relay_episode = 0;       // relay buffer: steps whose rollouts are trained on again (-1: all, 0: off)
  int64_t relay_episode_offset = 0;    // relayed rollouts join the steps from this step on
  std::string master_address;          // the reference's rendezvous (refused: mpirun provides it)
  int64_t master_port = 0;             // likewise
  std::string device = "cpu";          // cpu | cuda | cuda:N
  std::string dtype = "float32";       // weights and compute (a name of dtypes())
  std::string resume;                  // "" (fresh run unless -cp), "auto": the newest checkpoint of the run
  std::string checkpoint_path;         // a step-N directory or a run directory to resume from
  bool enable_resume_training = true;  // ChatLearn: resume when a checkpoint path is set
  int64_t resume_step = 0;             // resume from step-N of -cp's run (ChatLearn's load_data_checkpoint_iteration; 0: latest)
  int64_t consumed_samples = 0;        // a fresh run first skips this many prompts of the data order (ChatLearn)
  bool skip_bad_lines = false;         // malformed dataset lines are counted and skipped, not an error
  // model
  std::string model;                   // Hugging Face model directory
  LoraConfig lora;                     // LoRA adapters (rank 0: all weights are trained)
  std::optional<bool> enable_lora;     // ChatLearn's switch: true gives rank 8 unless set, false turns LoRA off
  double lora_scaling = 0;             // ChatLearn's scaling (alpha = scaling x rank); 0: unset
  std::string frozen_dtype;            // frozen weights (LoRA's base, the reference) stored in this dtype ("": dtype)
  // rollout
  int64_t num_generations = 8;         // G, samples per prompt
  std::string rollout_dtype;           // the engine's weights ("": dtype; see EngineConfig::weights_dtype)
  std::string kv_cache_dtype;          // the engine's KV cache ("": its compute dtype)
  EngineConfig engine;                 // the engine's KV-cache budget and scheduler (the dtypes: the two above)
  int64_t inference_batch_size = 0;    // prompts per rollout round per rollout worker (0: train_batch_size)
  int64_t inference_microbatch_size = 0;  // prompts per generate call (0: the whole round)
  SamplingParams sampling;             // temperature, top-k/p, max_new_tokens
  int64_t max_prompt_tokens = 0;       // the prompt length limit (0: the model's positions less one)
  PromptOverflow overflow = PromptOverflow::kTruncateLeft;  // what a prompt over the limit gets
  std::optional<std::string> system_prompt;  // unset: the reward type's default
  RewardType reward_type = RewardType::kBoxed;  // the built-in grader
  RewardScale reward_scale;            // what each outcome of the grader is worth
  std::string reward_cmd;              // external reward command (JSON lines), added to the built-in one
  double reward_cmd_weight = 1.0;      // the external reward's weight in the sum
  double reward_timeout = 30.0;        // seconds the external reward command has for each reply
  bool ranking = false;                // generate each round's prompts shortest first
  int64_t min_prompt_length = 0;       // prompts with fewer tokens are skipped
  // algorithm
  AlgoConfig algo = algo_preset("GRPO", "algorithm.algo");  // preset, then single overrides
  int64_t max_dynamic_rounds = 3;      // extra rounds to fill a step under dynamic batching
  bool require_full_batch = false;     // a step short of -tbs groups after those rounds is an error, not a warning
  // train
  int64_t train_batch_size = 4;        // prompts (groups) per step per trainer
  int64_t train_minibatch_size = 4;    // prompts per optimizer step
  int64_t train_microbatch_size = 8;   // samples per forward/backward
  int64_t num_training_epoch = 1;      // passes over each step's rollouts
  bool reuse_rollout_logprobs = true;  // an on-policy step takes the sampler's log-probs as the old ones (update_policy)
  bool gradient_checkpointing = false; // recompute each decoder layer's activations in backward
  OptimizerConfig optimizer;           // AdamW and the LR schedule
  int64_t max_nonfinite_steps = 3;     // stop after this many consecutive steps with a non-finite gradient
  // logging
  std::string project = "rlcpp";        // run name: the folder under save_dir
  std::string save_dir = "runs";       // where runs are written
  int64_t save_interval = 0;           // steps between checkpoints (0: only at the end)
  int64_t max_checkpoints = 0;         // keep only the newest N step directories (0: all)
  bool save_merged = false;            // LoRA: each checkpoint also holds the merged model under merged/
  int64_t eval_interval = -1;          // steps between evaluations (<= 0: at the end only)
  std::string eval_save_dir;           // per-sample JSONL under DIR/<project>/<set>/ ("": the run directory's eval/)
  int64_t eval_n = 1;                  // samples per eval prompt (pass@n)
  double eval_temperature = 0.6;       // the reference system's eval sampling
  bool eval_greedy = false;            // temperature 0 for evaluation
  int64_t eval_max_new_tokens = 0;     // 0: -mnt
  int64_t eval_limit = 0;              // first N prompts of each set (0: all)
  std::string rollout_save_dir;        // rollouts JSONL (prompts, responses, rewards), "" = off
  int64_t rollout_save_interval = 1;   // steps between rollout files
  bool debug = false;                  // debug-level log lines (ChatLearn's debug)
  int64_t log_interval = 1;            // console line every N steps (metrics.jsonl: every step)
  std::string profile_dir;             // Chrome-trace JSON per rank under DIR/<project>/ ("" = off)

  bool distributed() const { return num_inferencers >= 1; }
  bool remote_rollout() const { return backend != RolloutBackendKind::kNative; }
  int64_t trainers() const { return std::max<int64_t>(1, num_trainers); }
  int64_t inferencers() const { return std::max<int64_t>(1, num_inferencers); }
  int64_t replicas() const { return std::max<int64_t>(1, trainers() / tp); }  // data-parallel trainer replicas
  int64_t engines() const { return distributed() ? std::max<int64_t>(1, inferencers() / ptp) : 1; }
  int64_t round_prompts() const { return inference_batch_size > 0 ? inference_batch_size : train_batch_size; }
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
std::vector<std::pair<std::string, std::string>> eval_sets(const RunConfig& config);

// Settings that differ between a checkpoint's recorded configuration and this one and may not
// (resume_may_differ false), as "name: recorded -> now".
std::vector<std::string> incompatible_settings(const nlohmann::ordered_json& recorded, const RunConfig& config);

}  // namespace rlcpp
