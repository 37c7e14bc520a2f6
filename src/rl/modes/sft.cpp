#include "rl/modes/sft.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/utils.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

#include "comm/gradient_sync.h"
#include "comm/mpi.h"
#include "io/prompt_dataset.h"
#include "rl/checkpoint/run_checkpoint.h"
#include "rl/run/run_state.h"
#include "rl/step/step_record.h"
#include "text/chat_example.h"
#include "text/prompt_builder.h"
#include "text/tokenizer.h"
#include "train/zero.h"
#include "util/error.h"
#include "util/file.h"
#include "util/trace.h"

namespace rlcpp {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::shared_ptr<Topology> supervised_topology(const RunConfig& c, const std::string& command) {
  const bool several = launched_by_mpi() && mpi_world()->size() > 1;
  if (c.parallel.zero < 0 || c.parallel.zero > 3) {
    throw_user_error("rlcpp {} -zero {}: ZeRO stage 1 shards the AdamW moments over the processes, 2 also the "
                     "gradients, 3 also the parameters; give 0 to 3", command, c.parallel.zero);
  }
  if (c.parallel.zero > 0 && !several) {
    throw_user_error("rlcpp {} -zero {}: ZeRO shards over the processes of mpirun (mpirun -np N rlcpp {} ...); one "
                     "process has nothing to shard: leave -zero at 0", command, c.parallel.zero, command);
  }
  if (c.parallel.tp > 1 && !several) {
    throw_user_error("rlcpp {} --train-tp {}: tensor parallelism splits the model over the processes of mpirun "
                     "(mpirun -np {} rlcpp {} --train-tp {} ...)", command, c.parallel.tp, c.parallel.tp, command, c.parallel.tp);
  }
  if (c.parallel.pp > 1 && !several) {
    throw_user_error("rlcpp {} --pp {}: pipeline parallelism splits the model's layers over the processes of mpirun "
                     "(mpirun -np {} rlcpp {} --pp {} ...)", command, c.parallel.pp, c.parallel.pp, command, c.parallel.pp);
  }
  if (c.parallel.pp > 1 && c.parallel.zero > 1) {
    throw_user_error("rlcpp {} --pp {} with -zero {}: pipeline stages take ZeRO stage 1 only; use -zero 1, or 0", command,
                     c.parallel.pp, c.parallel.zero);
  }
  if (!several) return nullptr;
  auto world = mpi_world();
  const auto tp = static_cast<int>(c.parallel.tp), pp = static_cast<int>(c.parallel.pp);
  if (world->size() % (tp * pp) != 0) {
    throw_user_error("rlcpp {} --train-tp {} --pp {} under mpirun with {} processes: the processes form replicas of "
                     "--train-tp x --pp = {} ranks; give a process count that {} divides", command, tp, pp, world->size(),
                     tp * pp, tp * pp);
  }
  const int replicas = world->size() / (tp * pp);
  if (c.train.train_batch_size < replicas) {
    throw_user_error("rlcpp {} under mpirun with {} replicas{}: -tbs {} gives some of them no example; each step's -tbs "
                     "examples are dealt over the replicas, so give -tbs >= {}", command, replicas,
                     tp * pp > 1 ? fmt::format(" of {} ranks", tp * pp) : "", c.train.train_batch_size, replicas);
  }
  set_comm_timeout(c.parallel.comm_timeout);
  return std::make_shared<Topology>(Topology::create(world, world->size(), 0, tp, 1, pp));
}

PipelineStage supervised_stage(const RunConfig& c, const ModelConfig& model_config, const Topology* topology) {
  if (topology == nullptr || topology->train_pp == 1) return {};
  return run_pipeline_stage(c, model_config, *topology);
}

void run_or_end_job(const std::function<void()>& fn) {
  if (!launched_by_mpi() || mpi_world()->size() == 1) return fn();
  try {
    fn();
  } catch (const std::exception& e) {
    auto world = mpi_world();
    const bool user = dynamic_cast<const UserError*>(&e) != nullptr;
    std::cerr << fmt::format("[rank {}] {}: {}\n", world->rank(), user ? "error" : "internal error", e.what()) << std::flush;
    std::this_thread::sleep_for(std::chrono::seconds(2));  // the launcher forwards the line before the job ends
    world->abort(user ? 2 : 3);
  }
}

SupervisedRun::SupervisedRun(const RunConfig& c, const RunPlan& plan, std::shared_ptr<Transformer> model, int64_t n_examples,
                             TrainerConfig trainer_config, std::shared_ptr<Topology> topology)
    : cursor(n_examples, c.runtime.seed, /*shuffle=*/true), c_(c), topology_(std::move(topology)) {
  trainer_config.loss.kl_coef = 0;
  trainer_config.optimizer = c.train.optimizer;
  if (trainer_config.optimizer.total_steps == 0) trainer_config.optimizer.total_steps = plan.total_steps;
  trainer_config.train_microbatch_size = c.train.train_microbatch_size;
  trainer_config.max_tokens_per_micro_batch = c.train.max_tokens_per_micro_batch;
  trainer_config.padding_free = c.train.padding_free;
  run_.plan = plan;
  run_.policy = std::move(model);
  run_.trainer = std::make_unique<Trainer>(run_.policy, nullptr, trainer_config);
  run_.topology = topology_.get();
  if (topology_ != nullptr && topology_->train_pp > 1) trainer().enable_pipeline(topology_->pp_group);
  Communicator* group = replicas();
  if (group != nullptr && c.parallel.zero > 0) {  // the optimizer (and gradients) sharded over the replicas
    trainer().enable_zero(*group, static_cast<int>(c.parallel.zero), kGradientBucketBytes);
  } else if (group != nullptr && group->size() > 1) {
    trainer().set_gradient_reducer([group](const std::vector<torch::Tensor>& params) {
      all_reduce_gradients(*group, params, kGradientBucketBytes);
    });
  }
  if (plan.resume_from) {
    // Saved whole or in the shards of any number of processes and ZeRO stage: found by name.
    GatheredParameters whole(trainer().zero());  // ZeRO-3: the optimizer's parameters have their shapes
    load_checkpoint_optimizer(*plan.resume_from, trainer(),
                              optimizer_part(c, topology_.get(), *run_.policy, trainer().zero()));
    trainer().restore_steps(plan.saved.optimizer_steps);
    cursor.restore(plan.saved.data_cursor);
    if (leader()) spdlog::info("resuming from {} (step {})", plan.resume_from->string(), plan.saved.step);
  }
  if (leader()) {
    log_.emplace(plan.run_dir, c, plan.resume_from ? std::optional(plan.first_step() - 1) : std::nullopt);
    write_file_atomic(plan.run_dir / "config.yaml", run_config_yaml(c));
    if (group != nullptr) {
      const int ranks = topology_->train_tp * topology_->train_pp;
      spdlog::info("data parallelism: {} replicas{}, each step's {} examples dealt over them{}", group->size(),
                   ranks > 1 ? fmt::format(" of {} ranks (--train-tp {} x --pp {})", ranks, topology_->train_tp,
                                           topology_->train_pp)
                             : "",
                   c.train.train_batch_size,
                   c.parallel.zero > 0 ? fmt::format("; ZeRO stage {}: AdamW moments{} sharded", c.parallel.zero,
                                                     c.parallel.zero == 3   ? ", gradients and parameters"
                                                     : c.parallel.zero == 2 ? " and gradients"
                                                                            : "")
                                       : "");
    }
  }
}

std::vector<int64_t> SupervisedRun::next_batch() {
  std::vector<int64_t> batch;
  Communicator* group = replicas();
  for (int64_t k = 0; k < c_.train.train_batch_size; ++k) {
    const int64_t index = cursor.next();  // every process walks the whole order, keeping its replica's share
    if (group == nullptr || k % group->size() == group->rank()) batch.push_back(index);
  }
  return batch;
}

std::vector<double> SupervisedRun::sum(std::vector<double> values) const {
  Communicator* group = replicas();
  if (group == nullptr || group->size() == 1 || values.empty()) return values;
  auto t = torch::tensor(values, torch::kFloat64);
  group->all_reduce_sum(t);
  std::copy(t.data_ptr<double>(), t.data_ptr<double>() + t.numel(), values.begin());
  return values;
}

void SupervisedRun::write(const nlohmann::ordered_json& line, int64_t total_steps, const std::string& console) {
  if (log_) log_->write(line, total_steps, console);
}

fs::path SupervisedRun::save(int64_t step) {
  if (leader()) trace::write();
  // ZeRO-3: the parameters whole on each tensor-parallel rank's first replica for the model directory.
  GatheredParameters whole(trainer().zero(), true, /*root=*/0);
  CheckpointState state;
  state.step = step;
  state.policy_version = trainer().n_steps();
  state.data_cursor = cursor.state();
  state.optimizer_steps = trainer().n_steps();
  state.num_trainers = topology_ != nullptr ? topology_->num_trainers : 1;
  return save_run(c_, run_, state);
}

fs::path run_sft(const RunConfig& c) {
  const auto run_start = Clock::now();
  const auto topology = supervised_topology(c, "sft");
  RunPlan plan = shared_plan(c, topology ? topology->world.get() : nullptr);
  const fs::path& run_dir = plan.run_dir;
  const auto& resume_from = plan.resume_from;
  auto tokenizer = Tokenizer::from_dir(c.model.path);
  torch::manual_seed(c.runtime.seed);  // LoRA dropout; a resume restores the generator's state
  auto policy = load_policy(c, resume_from, topology ? topology->tp_group : nullptr,
                            supervised_stage(c, ModelConfig::load(c.model.path), topology.get()));
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
  check_steps_left(plan);
  SupervisedRun run(c, plan, policy, n, {}, topology);
  const int64_t first_step = plan.first_step();
  if (run.leader()) {
    spdlog::info("SFT of {} on {} ({} chats, {} learned tokens): steps {}..{} of {} chats", c.model.path, c.runtime.dataset, n,
                 n_learned, first_step, total_steps, c.train.train_batch_size);
  }
  start_profile(c.logging, topology != nullptr ? topology->world->rank() : 0, "rlcpp sft");
  for (int64_t step = first_step; step <= total_steps; ++step) {
    trace::Span step_span("step");
    const auto step_start = Clock::now();
    std::vector<SftSample> batch;
    double tokens = 0;
    for (const int64_t k : run.next_batch()) {
      batch.push_back(examples[static_cast<size_t>(k)]);
      for (size_t t = 1; t < batch.back().loss_mask.size(); ++t) tokens += batch.back().loss_mask[t];
    }
    const double global_tokens = run.sum({tokens})[0];  // each process's loss is its share of the step's
    auto m = run.trainer().sft_step(batch, global_tokens).values;
    const auto shares = run.sum({m["loss"], m["n_tokens"]});
    m["loss"] = shares[0];
    m["n_tokens"] = shares[1];
    const double seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
    nlohmann::ordered_json line;
    line["step"] = step;
    line["episode"] = run.cursor.epoch();
    line["loss"] = m["loss"];
    line["tokens"] = m["n_tokens"];
    line["grad_norm"] = m["grad_norm"];
    line["lr"] = m["lr"];
    line["optimizer_steps"] = run.trainer().n_steps();
    line["time"] = {{"train", seconds}, {"total", seconds}};
    run.write(line, total_steps,
                  fmt::format("step {}/{} epoch {} loss {:.4f} gnorm {:.3f} lr {:.2e} | {:.2f}s", step, total_steps,
                              run.cursor.epoch(), m["loss"], m["grad_norm"], m["lr"], seconds));
    if (checkpoint_due(c.logging, step, total_steps)) run.save(step);
  }
  run.finish();
  if (run.leader()) {
    spdlog::info("done in {:.1f} s; run directory {}", std::chrono::duration<double>(Clock::now() - run_start).count(),
                 run_dir.string());
  }
  return run_dir;
}

}  // namespace rlcpp
