// bench/dist: weight-sync throughput between ranks (trainer rank 0 to the others) for a
// Qwen2.5-0.5B-shaped set of weights, with buckets of 1, 16 and 100 MB, by broadcast and p2p.
//   mpirun --oversubscribe -np 2 build/bench/bench_dist [--dtype bfloat16] [--repeat 3]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "bench_util.h"
#include "dist/mpi.h"
#include "dist/weight_sync.h"
#include "model/transformer.h"

using namespace rlcpp;
using namespace rlcpp::bench;

int main(int argc, char** argv) {
  std::string dtype = "bfloat16";
  int repeat = 3;
  int64_t layers = 24;
  CLI::App app{"bench/dist: weight-sync GB/s between MPI ranks"};
  app.add_option("--dtype", dtype, "weights dtype")->capture_default_str();
  app.add_option("--repeat", repeat, "syncs per setting (the best is reported)")->capture_default_str();
  app.add_option("--layers", layers, "decoder layers of the 0.5B shape")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto world = mpi_world();
  if (world->size() < 2) {
    std::fprintf(stderr, "run under mpirun -np 2 (or more)\n");
    return 2;
  }
  NamedTensors weights;
  if (world->rank() == 0) {
    ModelOptions options;
    options.dtype = parse_dtype(dtype, "--dtype");
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
  return 0;
}
