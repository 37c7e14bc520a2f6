// bench/pp: the trainer's step under pipeline parallelism on a Qwen2.5-0.5B-shaped random model
// (24 layers by default, fp32, full-parameter AdamW), every MPI rank one stage: step time, peak
// RSS per rank, the bytes each stage sends per step, and the measured bubble (the stages' mean
// share of the step's passes spent waiting) against 1F1B's (p-1)/(m+p-1).
//   mpirun --oversubscribe -np P build/bench/bench_pp [--layers 24] [--micro-batches 8] [--tokens 64] [--steps 2]
//     [--balance work|time]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "bench_util.h"
#include "comm/mpi.h"
#include "train/pipeline.h"
#include "train/trainer.h"
#include "util/threads.h"

using namespace rlcpp;
using namespace rlcpp::bench;

int main(int argc, char** argv) {
  rlcpp::prepare_process(argv);  // OpenMP's wait policy (util/threads.h)
  int64_t layers = 24, micros = 8, tokens = 64, steps = 2;
  std::string balance_name = "work";
  CLI::App app{"bench/pp: the trainer's step over pipeline stages (one per MPI rank)"};
  app.add_option("--layers", layers, "decoder layers of the 0.5B shape")->capture_default_str();
  app.add_option("--micro-batches", micros, "micro-batches per step (one sample each)")->capture_default_str();
  app.add_option("--tokens", tokens, "tokens per sample (a quarter prompt, the rest response)")->capture_default_str();
  app.add_option("--steps", steps, "timed steps (after one untimed)")->capture_default_str();
  app.add_option("--balance", balance_name, "what the stages are balanced by: work | time (measured by rank 0)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const StageBalance balance = stage_balances().parse(balance_name, "--balance");
  auto world = mpi_world();
  const int p = world->size(), rank = world->rank();
  const auto config = qwen25_05b_config(layers);
  ModelOptions options;
  if (balance == StageBalance::kTime) {  // rank 0 times a layer, the embedding and the head; all split alike
    auto costs = torch::zeros({3}, torch::kFloat64);
    if (rank == 0) {
      const StageCosts c = measure_stage_costs(config, options, LoraConfig{}, 1, tokens);
      costs = torch::tensor({c.layer, c.embedding, c.head}, torch::kFloat64);
      std::printf("measured: a layer %.1f ms, the embedding %.1f ms, the head %.1f ms (%.2f layers; by work %.2f)\n",
                  1e3 * c.layer, 1e3 * c.embedding, 1e3 * c.head, c.head / c.layer,
                  work_stage_costs(config).head / work_stage_costs(config).layer);
    }
    world->broadcast(costs, 0);
    options.stage = pipeline_stage(config, rank, p, {costs[0].item<double>(), costs[1].item<double>(), costs[2].item<double>()});
  } else {
    options.stage = pipeline_stage(config, rank, p);
  }
  auto held = torch::zeros({p}, torch::kFloat64);  // each stage's layer count, for the summary line
  held[rank] = static_cast<double>(options.stage.layer_end - options.stage.layer_begin);
  world->all_reduce_sum(held);
  auto model = std::make_shared<Transformer>(config, options);
  model->init_weights(0.02, 1 + static_cast<uint64_t>(rank));
  TrainerConfig trainer_config;
  trainer_config.train_microbatch_size = 1;
  trainer_config.optimizer.lr = 1e-6;
  Trainer trainer(model, nullptr, trainer_config);
  if (p > 1) trainer.enable_pipeline(world);

  auto generator = at::detail::createCPUGenerator(5);
  PolicyMiniBatch mb;
  for (int64_t k = 0; k < micros; ++k) {
    auto ids = at::randint(1, config.vocab_size, {tokens}, generator, torch::TensorOptions().dtype(torch::kInt64));
    std::vector<int32_t> all(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + tokens);
    const auto prompt = static_cast<std::ptrdiff_t>(tokens / 4);
    mb.samples.push_back(model_sample({all.begin(), all.begin() + prompt}, {all.begin() + prompt, all.end()},
                                      k % 2 == 0 ? 1.0 : -1.0));
    mb.old_logprobs.emplace_back(static_cast<size_t>(tokens - prompt), -12.0f);
  }
  trainer.step(mb);  // untimed: the optimizer's state and the allocator's pools
  world->barrier();
  const auto bytes_before = world->bytes().total();
  double bubble = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) bubble += trainer.step(mb).values["pp_bubble"];
  world->barrier();
  const double step_seconds = seconds_since(start) / static_cast<double>(steps);
  const double sent_mb = static_cast<double>(world->bytes().total() - bytes_before) / steps / 1e6;
  // Per rank: peak RSS (MiB), MB sent per step.
  auto figures = torch::zeros({p, 2}, torch::kFloat64);
  figures[rank][0] = mib(proc_status_kib("VmHWM"));
  figures[rank][1] = sent_mb;
  world->all_reduce_sum(figures);
  if (rank == 0) {
    std::printf("pp %d (%s: layers per stage", p, stage_balances().name(balance).c_str());
    for (int r = 0; r < p; ++r) std::printf(" %.0f", held[r].item<double>());
    std::printf("): %lld layers, %lld micro-batches of %lld tokens: step %.2f s, peak RSS per rank (MiB)",
                static_cast<long long>(layers), static_cast<long long>(micros), static_cast<long long>(tokens),
                step_seconds);
    for (int r = 0; r < p; ++r) std::printf(" %.0f", figures[r][0].item<double>());
    std::printf(", MB sent per step per rank");
    for (int r = 0; r < p; ++r) std::printf(" %.1f", figures[r][1].item<double>());
    std::printf(", bubble %.3f (1F1B formula %.3f)\n", p > 1 ? bubble / steps : 0.0,
                one_forward_one_backward_bubble(p, micros));
  }
  return 0;
}
