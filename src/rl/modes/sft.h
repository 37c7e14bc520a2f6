// Supervised fine-tuning on chat JSONL (`messages` with assistant turns; loss on assistant tokens
// only), with the run machinery of RL training: the same settings table, metrics.jsonl,
// checkpoints (HF directory + trainer_state/) and exact resume.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

#include "comm/communicator.h"
#include "parallel/topology.h"
#include "io/prompt_dataset.h"
#include "rl/checkpoint/run_checkpoint.h"
#include "rl/config/run_config.h"
#include "rl/run/run_state.h"
#include "rl/step/step_record.h"
#include "train/trainer.h"

namespace rlcpp {

// The processes of `rlcpp sft` and `rlcpp train-rm` under mpirun (nullptr in one process): every
// one a trainer, in data-parallel replicas of --train-tp x --pp consecutive ranks that split the
// model (Topology: its dp_group holds one rank per replica, its tp_group a stage's ranks, its
// pp_group the stages). Each replica takes its share of every step's -tbs examples; fewer examples
// a step than replicas, or a process count --train-tp x --pp does not divide, is a UserError
// naming the flags.
std::shared_ptr<Topology> supervised_topology(const RunConfig& config, const std::string& command);
// This rank's pipeline stage of a model of `model_config` under --pp (run_pipeline_stage; the whole
// model without a topology or --pp). Every rank calls it.
PipelineStage supervised_stage(const RunConfig& config, const ModelConfig& model_config, const Topology* topology);
// Runs `fn`; under mpirun with several processes, an error on any of them is printed and ends the
// whole job (exit 2 for a UserError), so no process is left waiting in a collective.
void run_or_end_job(const std::function<void()>& fn);

// What the supervised trainings (`rlcpp sft`, `rlcpp train-rm`) share around their steps: the
// trainer over `model` (no KL; the LR schedule over the plan's total steps unless set; its
// optimizer and step count restored on resume), the shuffled cursor over `n_examples` (restored),
// the run's config.yaml and its metrics log. With a `topology` (mpirun), each replica takes its
// share of each step's examples and the trainer's gradients are summed over the replicas (-zero
// 1 shards the AdamW moments over them, 2 the gradients too, 3 the parameters too: they are then
// whole only inside a GatheredParameters scope, train/zero.h); under --train-tp a replica's ranks
// hold parts of the model (`model` is this rank's). Rank 0 alone writes the log and the
// checkpoints, as `rlcpp train` does (save_run).
class SupervisedRun {
 public:
  SupervisedRun(const RunConfig& c, const RunPlan& plan, std::shared_ptr<Transformer> model, int64_t n_examples,
                TrainerConfig trainer_config = {}, std::shared_ptr<Topology> topology = nullptr);
  // This replica's share of the next -tbs examples' indices in the data order (all of them alone).
  std::vector<int64_t> next_batch();
  // The sum of `values` over the replicas (themselves alone): global counts and metric shares.
  std::vector<double> sum(std::vector<double> values) const;
  bool leader() const { return topology_ == nullptr || topology_->world->rank() == 0; }
  // The first replica's ranks (every rank without data parallelism): together they hold the whole
  // model, so a pass that only rank 0 needs (held-out figures, calibration) runs on them.
  bool first_replica() const { return topology_ == nullptr || topology_->replica() == 0; }
  // A metrics line (rank 0 alone writes it).
  void write(const nlohmann::ordered_json& line, int64_t total_steps, const std::string& console);
  // Writes checkpoint step-`step` (the model, the optimizer, the cursor) on rank 0 and returns its
  // directory; the other ranks return an empty path. Every process calls it (under ZeRO or tensor
  // parallelism each sends rank 0 its part).
  std::filesystem::path save(int64_t step);
  // The run did what was asked: metrics.jsonl's status line says so (one ended by an error says that).
  void finish() {
    if (log_) log_->finish();
  }

  Trainer& trainer() { return *run_.trainer; }
  DatasetCursor cursor;

 private:
  Communicator* replicas() const { return topology_ != nullptr ? topology_->dp_group.get() : nullptr; }

  const RunConfig& c_;
  std::shared_ptr<Topology> topology_;
  RunState run_;  // the plan, the model and its trainer, as save_run takes them
  std::optional<RunLog> log_;  // on rank 0
};

// Runs SFT: train_batch_size chats per optimizer step, train_microbatch_size per forward/backward,
// num_episodes passes (or max_steps). Returns the run directory.
std::filesystem::path run_sft(const RunConfig& config);

}  // namespace rlcpp
