// bench/dist: weight-sync throughput between ranks (trainer rank 0 to the others) for a
// Qwen2.5-0.5B-shaped set of weights, with buckets of 1, 16 and 100 MB, by broadcast and p2p; and
// the rollout-transfer rate (rank 1 sends rounds of rollout groups to rank 0, as a rollout worker
// does a trainer: encoded, sent, decoded).
//   mpirun --oversubscribe -np 2 build/bench/bench_dist [--dtype bfloat16] [--repeat 3]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "bench_util.h"
#include "comm/mpi.h"
#include "parallel/weight_sync.h"
#include "model/transformer.h"
#include "rl/rollout/rollout_channel.h"
#include "util/threads.h"

using namespace rlcpp;
using namespace rlcpp::bench;

int main(int argc, char** argv) {
  rlcpp::prepare_process(argv);  // OpenMP's wait policy (util/threads.h)
  std::string dtype = "bfloat16";
  int repeat = 3;
  int64_t layers = 24;
  CLI::App app{"bench/dist: weight-sync GB/s between MPI ranks"};
  app.add_option("--dtype", dtype, "weights dtype")->capture_default_str();
  app.add_option("--repeat", repeat, "syncs per setting (the best is reported)")->capture_default_str();
  app.add_option("--layers", layers, "decoder layers of the 0.5B shape")->capture_default_str();
  int64_t groups_per_round = 16, group_size = 8, prompt_tokens = 128, response_tokens = 512;
  app.add_option("--groups", groups_per_round, "rollout groups per round message")->capture_default_str();
  app.add_option("--response-tokens", response_tokens, "tokens per response")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto world = mpi_world();
  if (world->size() < 2) {
    std::fprintf(stderr, "run under mpirun -np 2 (or more)\n");
    return 2;
  }
  NamedTensors weights;
  if (world->rank() == 0) {
    ModelOptions options;
    options.dtype = dtypes().parse(dtype, "--dtype");
    Transformer model(qwen25_05b_config(layers), options);
    weights = model.named_weights();
  }
  uint64_t total = 0;
  for (const auto& [name, t] : weights) total += t.nbytes();
  if (world->rank() == 0) {
    std::printf("%zu tensors, %.1f MiB (%s), %d ranks\n", weights.size(), total / 1048576.0, dtype.c_str(), world->size());
    std::printf("%-10s %10s %8s %10s %10s\n", "mode", "bucket", "buckets", "seconds", "GB/s");
  }
  for (auto mode : {SyncMode::kBroadcast, SyncMode::kP2p}) {
    for (uint64_t mb : {1, 16, 100}) {
      WeightSync sync(world, mb << 20, mode);
      double best = 1e30;
      SyncStats stats;
      for (int r = 0; r < repeat; ++r) {
        world->barrier();
        stats = sync.sync(weights, r, [](const NamedTensors&) {});
        world->barrier();
        best = std::min(best, stats.seconds);
      }
      if (world->rank() == 0) {
        std::printf("%-10s %7llu MB %8lld %10.3f %10.2f\n", mode == SyncMode::kBroadcast ? "broadcast" : "p2p",
                    static_cast<unsigned long long>(mb), static_cast<long long>(stats.buckets), best,
                    static_cast<double>(stats.bytes) / best / 1e9);
      }
    }
  }
  // Rollout transfer: rounds of groups (G responses with their log-probs) from rank 1 to rank 0.
  std::vector<SampleGroup> round;
  for (int64_t g = 0; g < groups_per_round; ++g) {
    SampleGroup group;
    group.prompt = std::string(static_cast<size_t>(prompt_tokens * 4), 'p');
    group.gt_answer = "42";
    for (int64_t k = 0; k < group_size; ++k) {
      std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens), 17), response(static_cast<size_t>(response_tokens));
      std::vector<float> logprobs(static_cast<size_t>(response_tokens));
      for (int64_t t = 0; t < response_tokens; ++t) {
        response[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7919 + k) % 151936);
        logprobs[static_cast<size_t>(t)] = -0.001f * static_cast<float>(t % 997);
      }
      Sample sample = model_sample(prompt, response, 0.5, logprobs);
      sample.reward = 1.0;
      sample.correct = true;
      sample.response = std::string(static_cast<size_t>(response_tokens * 4), 'r');
      group.samples.push_back(std::move(sample));
    }
    round.push_back(std::move(group));
  }
  if (world->rank() <= 1) {
    const int rounds = 5;
    uint64_t bytes = 0;
    world->barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < rounds; ++r) {
      if (world->rank() == 1) {
        const auto message = encode_groups(round);
        bytes += message.size();
        world->send_bytes(message, 0, 99);
      } else {
        const auto message = world->recv_bytes(1, 99);
        bytes += message.size();
        if (decode_groups(message).size() != round.size()) std::abort();
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (world->rank() == 0) {
      const double samples = static_cast<double>(rounds * groups_per_round * group_size);
      std::printf("\nrollout transfer (encode, send, decode): %d rounds of %lld groups x %lld samples x %lld tokens, "
                  "%.1f MB each\n%.0f samples/s, %.0f response tokens/s, %.1f MB/s\n",
                  rounds, static_cast<long long>(groups_per_round), static_cast<long long>(group_size),
                  static_cast<long long>(response_tokens), static_cast<double>(bytes) / rounds / 1e6, samples / seconds,
                  samples * static_cast<double>(response_tokens) / seconds, static_cast<double>(bytes) / seconds / 1e6);
    }
  } else {
    world->barrier();
  }
  return 0;
}
