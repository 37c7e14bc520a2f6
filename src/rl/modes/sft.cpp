#include "rl/modes/sft.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/utils.h>

#include <chrono>
#include <fstream>

#include "comm/mpi.h"
#include "io/prompt_dataset.h"
#include "rl/checkpoint/run_checkpoint.h"
#include "rl/run/run_state.h"
#include "rl/step/step_record.h"
#include "text/chat_example.h"
#include "text/prompt_builder.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#include "util/trace.h"

namespace rlcpp {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

void refuse_several_processes(const std::string& command) {
  if (launched_by_mpi() && mpi_world()->size() > 1) {
    throw_user_error("rlcpp {} runs in one process (data, tensor and pipeline parallelism are not offered for it yet): "
                     "start it without mpirun, or with -np 1", command);
  }
}

SupervisedRun::SupervisedRun(const RunConfig& c, const RunPlan& plan, std::shared_ptr<Transformer> model, int64_t n_examples,
                             TrainerConfig trainer_config)
    : trainer(model, nullptr,
              [&] {
                trainer_config.loss.kl_coef = 0;
                trainer_config.optimizer = c.train.optimizer;
                if (trainer_config.optimizer.total_steps == 0) trainer_config.optimizer.total_steps = plan.total_steps;
                trainer_config.train_microbatch_size = c.train.train_microbatch_size;
                return trainer_config;
              }()),
      cursor(n_examples, c.runtime.seed, /*shuffle=*/true),
      log(plan.run_dir, c, plan.resume_from ? std::optional(plan.first_step() - 1) : std::nullopt),
      c_(c),
      plan_(plan),
      model_(std::move(model)) {
  if (plan.resume_from) {
    load_checkpoint_optimizer(*plan.resume_from, trainer);
    trainer.restore_steps(plan.saved.optimizer_steps);
    cursor.restore(plan.saved.data_cursor);
    spdlog::info("resuming from {} (step {})", plan.resume_from->string(), plan.saved.step);
  }
  write_file_atomic(plan.run_dir / "config.yaml", run_config_yaml(c));
}

std::vector<int64_t> SupervisedRun::next_batch() {
  std::vector<int64_t> batch;
  for (int64_t k = 0; k < c_.train.train_batch_size; ++k) batch.push_back(cursor.next());
  return batch;
}

fs::path SupervisedRun::save(int64_t step) {
  trace::write();
  CheckpointState state;
  state.step = step;
  state.policy_version = trainer.n_steps();
  state.data_cursor = cursor.state();
  state.optimizer_steps = trainer.n_steps();
  return save_run_checkpoint(c_, plan_.run_dir, step, *model_, trainer.optimizer(), to_json(state));
}

fs::path run_sft(const RunConfig& c) {
  const auto run_start = Clock::now();
  refuse_several_processes("sft");
  RunPlan plan = plan_run(c);
  const fs::path& run_dir = plan.run_dir;
  const auto& resume_from = plan.resume_from;
  auto tokenizer = Tokenizer::from_dir(c.model.path);
  torch::manual_seed(c.runtime.seed);  // LoRA dropout; a resume restores the generator's state
  auto policy = load_policy(c, resume_from);
  const int64_t max_positions = policy->config().max_position_embeddings;

  DatasetOptions dataset_options;
  dataset_options.kind = DatasetKind::kChats;
  dataset_options.skip_bad_lines = c.runtime.skip_bad_lines;
  const PromptDataset dataset = load_prompt_dataset(c.runtime.dataset, dataset_options);
  const ChatTemplate chat_template(*tokenizer);
  // As in RL training: chats without a system message get -s, or the reward type's default, so a
  // model fine-tuned here sees the prompts `rlcpp train` and `rlcpp eval` will give it.
  const std::string system_prompt = c.rollout.system_prompt ? *c.rollout.system_prompt : default_system_prompt(c.reward.type);
  std::vector<SftSample> examples;
  int64_t n_long = 0, n_learned = 0;
  for (const auto& record : dataset.records) {
    auto example = build_chat_example(*tokenizer, chat_template, record.messages, system_prompt,
                                      fmt::format("{}:{}", c.runtime.dataset, record.line));
    if (max_positions > 0 && static_cast<int64_t>(example.ids.size()) > max_positions) {
      ++n_long;
      continue;
    }
    n_learned += example.n_learned;
    examples.push_back({std::move(example.ids), std::move(example.loss_mask)});
  }
  if (examples.empty()) throw_user_error("{}: every chat is longer than the model's {} positions", c.runtime.dataset, max_positions);
  if (n_long > 0) spdlog::warn("{}: {} chats longer than {} positions left out", c.runtime.dataset, n_long, max_positions);

  const int64_t n = static_cast<int64_t>(examples.size());
  const int64_t total_steps = plan.total_steps = run_total_steps(c, n, c.train.train_batch_size);
  SupervisedRun run(c, plan, policy, n);
  const int64_t first_step = plan.first_step();
  spdlog::info("SFT of {} on {} ({} chats, {} learned tokens): steps {}..{} of {} chats", c.model.path, c.runtime.dataset, n, n_learned,
               first_step, total_steps, c.train.train_batch_size);
  start_profile(c.logging, 0, "rlcpp sft");
  for (int64_t step = first_step; step <= total_steps; ++step) {
    trace::Span step_span("step");
    const auto step_start = Clock::now();
    std::vector<SftSample> batch;
    for (const int64_t k : run.next_batch()) batch.push_back(examples[static_cast<size_t>(k)]);
    auto m = run.trainer.sft_step(batch).values;
    const double seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
    nlohmann::ordered_json line;
    line["step"] = step;
    line["episode"] = run.cursor.epoch();
    line["loss"] = m["loss"];
    line["tokens"] = m["n_tokens"];
    line["grad_norm"] = m["grad_norm"];
    line["lr"] = m["lr"];
    line["optimizer_steps"] = run.trainer.n_steps();
    line["time"] = {{"train", seconds}, {"total", seconds}};
    run.log.write(line, total_steps,
                  fmt::format("step {}/{} epoch {} loss {:.4f} gnorm {:.3f} lr {:.2e} | {:.2f}s", step, total_steps,
                              run.cursor.epoch(), m["loss"], m["grad_norm"], m["lr"], seconds));
    if (checkpoint_due(c.logging, step, total_steps)) run.save(step);
  }
  spdlog::info("done in {:.1f} s; run directory {}",
               std::chrono::duration<double>(Clock::now() - run_start).count(), run_dir.string());
  return run_dir;
}

}  // namespace rlcpp
