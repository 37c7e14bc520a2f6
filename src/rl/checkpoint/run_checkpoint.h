// A run's checkpoints: save_dir/<project>/step-<n>/ holds a complete Hugging Face model directory
// (under LoRA: PEFT's adapter directory over the base model, and with --save-merged the merged
// model in merged/) plus trainer_state/ — state.json (step, policy version, data cursor, rollout buffer, ...),
// config.json (the resolved run configuration), optimizer.pt (AdamW moments and steps) and rng.pt
// (LibTorch's generator state). Each is written to a temporary directory and renamed, `latest` is
// updated last, and old ones are pruned to --max-checkpoints.
#pragma once

#include <torch/optim/optimizer.h>

#include <filesystem>
#include <functional>
#include <optional>

#include "model/transformer.h"
#include "comm/communicator.h"
#include "train/trainer.h"
#include "rl/config/run_config.h"

namespace rlcpp {

struct CheckpointContents {
  const Transformer* policy = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  nlohmann::json state;                  // trainer_state/state.json
  nlohmann::ordered_json config;         // trainer_state/config.json
  std::filesystem::path tokenizer_from;  // tokenizer and generation files are copied from here
  std::string base_model;                // LoRA: the adapter's base_model_name_or_path
  bool save_merged = false;              // LoRA: also the merged model in merged/
  // ZeRO: writes the optimizer's shards into trainer_state/ in place of optimizer.pt.
  std::function<void(const std::filesystem::path& state_dir)> write_optimizer;
  // Pipeline parallelism: the whole model's weights, gathered from its stages, written in place of
  // the policy's (which holds one stage; its config is the model's).
  const NamedTensors* weights = nullptr;
  // With those of a LoRA policy and save_merged: the merged model's, gathered, for merged/.
  const NamedTensors* merged = nullptr;
  // Other parts of the step (PPO's critic/), written into its temporary directory before the rename.
  std::function<void(const std::filesystem::path& step_dir)> write_extra;
};

// Writes `policy` as a model directory at `dir`: Hugging Face weights, or under LoRA PEFT's adapter
// (over `base_model`), with the merged model in dir/merged when `save_merged`; the tokenizer and
// generation files of `tokenizer_from` are copied beside each.
// With `weights`, those are written as the policy's, and `merged` as merged/ (pipeline
// parallelism: see CheckpointContents).
void save_policy_dir(const std::filesystem::path& dir, const Transformer& policy, const std::filesystem::path& tokenizer_from,
                     const std::string& base_model, bool save_merged, const NamedTensors* weights = nullptr,
                     const NamedTensors* merged = nullptr);

// -a PPO: the critic's part of a step directory, `dir` (step-N/critic): its model as a Hugging Face
// sequence-classification directory (with the tokenizer files of `tokenizer_from`) and its AdamW
// state in dir/trainer_state/: optimizer.pt, or under ZeRO the shards `write_shards` writes there
// (load_checkpoint_optimizer(dir, ...) reads either back).
void save_critic_dir(const std::filesystem::path& dir, const Transformer& critic, const std::filesystem::path& tokenizer_from,
                     torch::optim::Optimizer& optimizer,
                     const std::function<void(const std::filesystem::path& state_dir)>& write_shards = {},
                     const NamedTensors* weights = nullptr);

// Writes run_dir/step-<step>, updates `latest`, prunes to `max_checkpoints` (0: keep all).
std::filesystem::path save_run_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                          const CheckpointContents& contents, int64_t max_checkpoints);

// The checkpoint of a run of `config` at `step` (the policy, its optimizer and the run's `state`,
// with the resolved configuration and the tokenizer files of config.model.path); logs and returns it.
std::filesystem::path save_run_checkpoint(const RunConfig& config, const std::filesystem::path& run_dir, int64_t step,
                                          const Transformer& policy, torch::optim::Optimizer& optimizer,
                                          nlohmann::json state,
                                          std::function<void(const std::filesystem::path& state_dir)> write_optimizer = {},
                                          const NamedTensors* weights = nullptr,
                                          std::function<void(const std::filesystem::path& step_dir)> write_extra = {},
                                          const NamedTensors* merged = nullptr);

// The checkpoint a run continues from, or nothing for a fresh run: --resume auto takes run_dir's
// `latest` (nothing when there is none yet); -cp takes a step directory or a run directory's latest.
std::optional<std::filesystem::path> find_resume_checkpoint(const RunConfig& config, const std::filesystem::path& run_dir);

// Reads step_dir/trainer_state/state.json, refusing a checkpoint whose recorded configuration is
// incompatible with `config` (the differing settings are named).
nlohmann::json read_checkpoint_state(const std::filesystem::path& step_dir, const RunConfig& config);

// Which part of the model a trainer's flat AdamW state is of: its tensor-parallel rank of `tp_size`,
// its pipeline stage of `stages`, and `layout`, the trained tensors in the order of the flat state
// (whole-model names, alike under every --pp; elements of this rank's part). The layout is what
// lets a checkpoint written at one --pp (or ZeRO sharding, or trainer count) resume at another:
// each tensor's moments are found by name in whichever stage's shards hold them.
struct OptimizerPart {
  int tp_rank = 0, tp_size = 1;
  int stage = 0, stages = 1;
  std::vector<std::pair<std::string, int64_t>> layout;
};

// Restores the trainer's optimizer and the RNG state saved next to state.json. The optimizer state
// may be one whole optimizer.pt (one-process runs) or the shards of any number of trainers, of any
// ZeRO stage and --pp; it is re-sharded to this trainer's range (ZeRO) or assembled whole
// (unsharded) for `part`. Shards of another --train-tp are refused, naming it. Without a layout in
// `part` (one-process runs: SFT) the shards must be of the same trained tensors in the same order.
void load_checkpoint_optimizer(const std::filesystem::path& step_dir, Trainer& trainer, const OptimizerPart& part = {});

// Sharded optimizer state (distributed runs): trainer_state/optimizer-shard-<r>-of-<n>-<k>.safetensors,
// piece k of one trainer's range of the flat AdamW state of its part (exp_avg, exp_avg_sq; begin,
// end, total, step, tp_rank, tp_size, stage, stages and the part's layout as JSON in its metadata).
// Trainer 0 writes them all, receiving the others' one at a time (send_optimizer_shard), over a
// group of the senders in which it is rank 0.
// A trainer's range [begin, end) of its part's flat state, read a piece at a time through `range`.
struct OptimizerShard {
  int64_t begin = 0, end = 0;
  OptimizerPart part;  // the part the state is of
  std::function<FlatAdamWState(int64_t a, int64_t b)> range;  // the state of [a, b) within [begin, end)
};
// The shard of a state held whole (ZeRO's): pieces are views of it.
OptimizerShard optimizer_shard(const FlatAdamWState& held, OptimizerPart part);
std::vector<std::filesystem::path> optimizer_shard_files(const std::filesystem::path& state_dir);
void send_optimizer_shard(Communicator& senders, const OptimizerShard& mine);
void write_optimizer_shards(const std::filesystem::path& state_dir, Communicator& senders, const OptimizerShard& mine);
// The range [begin, end) of `part`'s flat state (`total` elements) from a checkpoint's shards:
// tensor by tensor by name when `part` has a layout (from shards of any --pp), else as saved.
// Shards of another tensor-parallel size are a UserError naming --train-tp.
FlatAdamWState read_optimizer_shards(const std::filesystem::path& state_dir, int64_t begin, int64_t end, int64_t total,
                                     const OptimizerPart& part = {});

// run_dir/metrics.jsonl made ready for a run continuing after `resumed_step` (rewound), or for a
// fresh one: refused when the directory already holds a run, unless --resume auto found no
// checkpoint there (then the old lines are set aside as in a rewind to step 0).
std::filesystem::path prepare_metrics_file(const std::filesystem::path& run_dir, const RunConfig& config,
                                           std::optional<int64_t> resumed_step);

// Keeps metrics.jsonl lines of steps <= `step`; later lines (from a run that went past its last
// checkpoint) move to metrics.discarded.jsonl, so nothing written is lost.
void rewind_metrics(const std::filesystem::path& metrics_path, int64_t step);

}  // namespace rlcpp
