// The state of a training run, typed, in one place for every driver (colocated, the distributed
// trainers, SFT): what a checkpoint's trainer_state/state.json holds (CheckpointState), whether the
// run is fresh or resumed and how long it is (RunPlan), and the objects a trainer works with —
// policy, frozen reference, trainer with its optimizer, prompt dataset and cursor (RunState).
// load_run restores all of them from the checkpoint the plan names; save_run writes them. A new
// piece of run state is read and checkpointed here and nowhere else.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/prompt_dataset.h"
#include "comm/communicator.h"
#include "parallel/topology.h"
#include "rl/rollout/rollout.h"
#include "rl/config/run_config.h"
#include "text/tokenizer.h"
#include "train/trainer.h"

namespace rlcpp {

// Groups the trainers held, in trainer order: the first per_trainer[0] are trainer 0's, and so on.
// A resume under the same -t gives each trainer its own back; under another -t (or without
// per_trainer) they are dealt anew.
struct TrainerGroups {
  std::vector<SampleGroup> groups;
  std::vector<int64_t> per_trainer;
};

// Where a distributed run stood in its rounds at a checkpoint, so that a resumed run continues
// exactly as the uninterrupted one would. Defaults: at a round's end with nothing collected ahead.
struct RoundState {
  int64_t end_step = 0;                    // the last step of the round in training (> step: resume finishes it first)
  std::optional<TrainerGroups> collected;  // -nb >= 1: the round the workers were generating, collected at the checkpoint
  // Partial rollouts (--checkpoint-round cut): that round as each rollout engine cut it at the
  // checkpoint's version, to go on from (its prompts are also in_flight_prompts).
  std::vector<nlohmann::json> in_flight;
  int64_t rounds_ahead = 0;                // rounds sent ahead of training (the --sync-frequency cadence)
  // --group-order completion: each rollout engine's prompts sent and not yet delivered (a worker
  // holds them from round to round; a resumed run sends them again).
  std::vector<std::vector<PromptPick>> pool;
  // Figures of collected rounds not yet on a metrics line (they go on the next step's):
  int64_t generated_groups = 0, kept_groups = 0;
  std::vector<SampleGroup> discarded;
};

// trainer_state/state.json of a checkpoint (the optimizer and RNG states sit beside it).
struct CheckpointState {
  int64_t step = 0;                           // the last step the checkpoint includes
  int64_t policy_version = 0;                 // optimizer updates applied to the policy so far
  int64_t optimizer_steps = 0;                // the LR schedule's position
  int64_t critic_optimizer_steps = 0;         // -a PPO: the critic's schedule position (its model and optimizer in critic/)
  nlohmann::json data_cursor;                 // DatasetCursor::state() (null: not saved)
  TrainerGroups rollout_buffer;               // kept groups not yet trained on, of every trainer
  TrainerGroups relay_buffer;                 // groups the relay buffers hold, of every trainer (trained_step set)
  std::vector<PromptPick> in_flight_prompts;  // distributed: a round sent and not collected (re-sent on resume)
  std::vector<PromptPick> next_prompts;       // --stream-prompts: the round after it, sent to be streamed
  RoundState round;                           // distributed
  int64_t skipped_long_prompts = 0;           // left out over -mpt so far
  int64_t skipped_short_prompts = 0;          // left out under min_prompt_length so far
  int64_t num_trainers = 1, num_inferencers = 0;  // the layout that wrote it (for the log; resume may differ)
};

nlohmann::json to_json(const CheckpointState& state);
// A state.json's contents; a missing or mistyped field is a UserError naming `where` and the field.
CheckpointState checkpoint_state_from_json(const nlohmann::json& json, const std::string& where);

// Steps of a run: --max-steps, or -e episodes of whole batches of `items_per_step` over `n_items`.
int64_t run_total_steps(const RunConfig& config, int64_t n_items, int64_t items_per_step);

// Fresh or resumed, and how long: decided once (by the only trainer, or trainer rank 0) and shared.
struct RunPlan {
  std::filesystem::path run_dir;                     // save_dir/project
  std::optional<std::filesystem::path> resume_from;  // the step-N directory continued from
  CheckpointState saved;                             // what resume_from holds (defaults when fresh)
  int64_t total_steps = 0;
  int64_t first_step() const { return resume_from ? saved.step + 1 : 1; }
};

// A resumed run with no step left to train (its checkpoint at or past total_steps) is a UserError
// naming the checkpoint and how to train on, not a run that ends at once and exits 0.
void check_steps_left(const RunPlan& plan);

// The run directory (created), and the checkpoint a run continues from (checked for settings that
// may not change on resume). total_steps is left for the caller, which knows its dataset.
RunPlan plan_run(const RunConfig& config);
// plan_run on rank 0 of `group`, sent to its other ranks (each receives rank 0's plan); plan_run
// alone without a group.
RunPlan shared_plan(const RunConfig& config, Communicator* group);

// What a trainer works with. The dataset and cursor exist only where prompts are picked (the
// colocated run, trainer rank 0).
struct RunState {
  RunPlan plan;
  std::shared_ptr<Tokenizer> tokenizer;    // with the dataset
  std::shared_ptr<Transformer> policy;     // the checkpoint's weights when resumed
  std::shared_ptr<Transformer> reference;  // the base model, frozen; only when -kl != 0
  std::unique_ptr<Trainer> trainer;        // optimizer and LR schedule restored
  std::shared_ptr<Transformer> critic;     // -a PPO: the value model (a one-label sequence classifier)
  std::unique_ptr<Trainer> critic_trainer; // -a PPO: its optimizer and schedule
  PromptDataset dataset;
  std::unique_ptr<DatasetCursor> cursor;   // at the checkpoint's position (or after consumed_samples)
  int64_t policy_version = 0;
  const Topology* topology = nullptr;      // under mpirun (distributed, or colocated with TP or PP), else null
};

// The policy of a run of `config`: from `checkpoint` (a step-N directory) when given, else the base
// model; under LoRA the base (config.model.path, frozen, in --frozen-dtype) with the checkpoint's adapter
// or fresh adapters. The same call gives rollout workers a model of the trainer's shape. With
// `tp_group` of more than one rank, this rank's tensor-parallel part of it.
// With a pipeline `stage`, that stage of it.
std::shared_ptr<Transformer> load_policy(const RunConfig& config, const std::optional<std::filesystem::path>& checkpoint,
                                         std::shared_ptr<Communicator> tp_group = nullptr, const PipelineStage& stage = {});
// -a PPO: the critic of a run, from `checkpoint`'s critic/ when given, else from --critic-model (a
// reward model as it is, a causal LM with a fresh value head); nullptr for other algorithms. Its
// layers are split over `tp_group` as the policy's are (the value head whole on every rank), and
// into the policy's pipeline `stage` (the value head on the last).
std::shared_ptr<Transformer> load_critic(const RunConfig& config, const std::optional<std::filesystem::path>& checkpoint,
                                         std::shared_ptr<Communicator> tp_group = nullptr, const PipelineStage& stage = {});
// The frozen reference model of a run with a KL term (in --frozen-dtype); nullptr under LoRA (the
// reference is the policy's base with the adapters off) or without KL.
std::shared_ptr<Transformer> load_reference(const RunConfig& config, std::shared_ptr<Communicator> tp_group = nullptr,
                                            const PipelineStage& stage = {});

// Pipeline parallelism within the first trainer replica: trainer 0 (its first rank) takes the
// other stages' weights one tensor at a time, each whole (gathered over its stage's tensor-parallel
// group), stage after stage, so no rank holds more than its stage and one tensor of another.
// The layout of stages 1.. on trainer 0: each tensor's name, whole shape and dtype (a meta tensor)
// and the rank of the first replica's group that sends it, in the whole model's order.
struct StageLayout {
  NamedTensors tensors;
  std::vector<int> from;
};
// This stage's weights under the whole model's names, each weight once (a tied embedding's copy on
// the last stage is the first stage's): under LoRA its trained tensors, or with `merged` its
// weights with the adapters merged in.
NamedTensors stage_weights(const Transformer& policy, bool merged = false);
StageLayout receive_stage_layout(const Topology& topology);                 // on trainer 0
torch::Tensor receive_stage_weight(const Topology& topology, const StageLayout& layout, size_t k);  // k in order
// On every rank of the first replica's stages after the first: the layout, then each weight.
void send_stage_weights(const Topology& topology, const Transformer& policy, bool merged = false);
// Every rank of the first replica calls it: `model`'s stages, whole, on trainer 0 in the whole
// model's order (the others get none). The same order of calls on every rank is what matches them.
NamedTensors gather_stages(const Topology& topology, const Transformer& model, bool merged = false);

struct OptimizerPart;  // rl/checkpoint/run_checkpoint.h

// This trainer's part of `policy` as its optimizer state is laid out in a checkpoint
// (rl/checkpoint/run_checkpoint.h): its tensors by name and size (under ZeRO-3 the whole sizes),
// with its tensor-parallel rank and pipeline stage (`topology` null: one process, or data
// parallelism alone).
OptimizerPart optimizer_part(const RunConfig& config, const Topology* topology, const Transformer& policy, ZeroOptimizer* zero);

// This trainer's pipeline stage of a model of `config` (the policy's, or a reward model's): balanced
// by work per token, or by the costs trainer 0 measures (--pp-balance time; a causal LM's) and
// sends every trainer, so all split the model alike. Every trainer calls it.
PipelineStage run_pipeline_stage(const RunConfig& config, const ModelConfig& model_config, const Topology& topology);

// The engine of a trainer's own policy (the colocated mode's, or the first replica's for
// evaluation): run_engine_config, run by every rank of the replica together under pipeline
// parallelism (EngineConfig::group, pipeline).
EngineConfig policy_engine_config(const RunConfig& config, const RunState& run);

// Loads an RL run. Without a topology (or on trainer rank 0 of it) the plan is made here, with the
// dataset; the other trainers receive the plan from rank 0 and load no dataset. Every replica
// counts replicas × -tbs prompts per step. Each trainer holds its tensor-parallel part of the
// models; ZeRO shards over the data-parallel group.
RunState load_run(const RunConfig& config, const Topology* topology = nullptr);

// Writes the run's checkpoint step-<state.step> from `run`'s policy and optimizer; returns it. Every
// trainer calls it (a collective under tensor parallelism or ZeRO: the parts and optimizer shards
// go to trainer rank 0, which writes; the others get an empty path).
std::filesystem::path save_run(const RunConfig& config, const RunState& run, const CheckpointState& state);

}  // namespace rlcpp
