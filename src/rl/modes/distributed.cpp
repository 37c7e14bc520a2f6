#include "rl/modes/distributed.h"
#include "rl/modes/reward_rank.h"

#include <fmt/format.h>
#include <torch/cuda.h>

#include "comm/mpi.h"
#include "rl/modes/step_loop.h"
#include "rl/modes/worker_source.h"
#include "rl/step/step_record.h"

namespace rlcpp {

std::filesystem::path run_distributed(const RunConfig& given, const Topology& topology) {
  RunConfig config = given;
  start_profile(config.logging, topology.world->rank(), topology.describe());
  if (config.runtime.device == "cuda") {  // one device per rank: the rank's index on its machine
    const int devices = static_cast<int>(torch::cuda::device_count());
    if (devices > 0) config.runtime.device = fmt::format("cuda:{}", local_rank() % devices);
  }
  if (topology.role == Role::kTrainer) return run_trainer_rank(config, topology);
  if (topology.role == Role::kReward) run_reward_rank(config, topology);
  else run_rollout_worker(config, topology);
  return std::filesystem::path(config.logging.save_dir) / config.logging.project;
}

std::filesystem::path run_trainer_rank(const RunConfig& config, const Topology& topology) {
  return run_step_loop(config, &topology,
                       [&](RunState& run) { return std::make_unique<WorkerSource>(config, topology, run); });
}

}  // namespace rlcpp
