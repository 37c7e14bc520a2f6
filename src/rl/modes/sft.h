// Supervised fine-tuning on chat JSONL (`messages` with assistant turns; loss on assistant tokens
// only), with the run machinery of RL training: the same settings table, metrics.jsonl,
// checkpoints (HF directory + trainer_state/) and exact resume.
#pragma once

#include <filesystem>
#include <memory>

#include "io/prompt_dataset.h"
#include "rl/config/run_config.h"
#include "rl/run/run_state.h"
#include "rl/step/step_record.h"
#include "train/trainer.h"

namespace rlcpp {

// The one-process trainings refuse to run as several copies under mpirun (they would write one run
// directory over each other); `command` names the command in the error.
void refuse_several_processes(const std::string& command);

// What the one-process trainings (`rlcpp sft`, `rlcpp train-rm`) share around their steps: the
// trainer over `model` (no KL; the LR schedule over the plan's total steps unless set; its
// optimizer and step count restored on resume), the shuffled cursor over `n_examples` (restored),
// the run's config.yaml and its metrics log.
class SupervisedRun {
 public:
  SupervisedRun(const RunConfig& c, const RunPlan& plan, std::shared_ptr<Transformer> model, int64_t n_examples,
                TrainerConfig trainer_config = {});
  // The next -tbs examples' indices in the data order.
  std::vector<int64_t> next_batch();
  // Writes checkpoint step-`step` (the model, the optimizer, the cursor); returns its directory.
  std::filesystem::path save(int64_t step);

  Trainer trainer;
  DatasetCursor cursor;
  RunLog log;

 private:
  const RunConfig& c_;
  const RunPlan& plan_;
  std::shared_ptr<Transformer> model_;
};

// Runs SFT: train_batch_size chats per optimizer step, train_microbatch_size per forward/backward,
// num_episodes passes (or max_steps). Returns the run directory.
std::filesystem::path run_sft(const RunConfig& config);

}  // namespace rlcpp
