// The one RL step loop, for every mode: rounds of rollouts from a RolloutSource (the built-in
// engine, rollout servers, or the MPI rollout workers) fill each trainer's buffer, the trainers
// agree how many steps the buffers hold, and each step trains on -tbs groups per replica
// (update_policy). A StalenessPolicy decides when a round goes ahead of training (-nb) and when the
// weights are published (--sync-frequency). The rank that picks prompts (the leader: the only
// process, or trainer rank 0) also logs, evaluates and writes checkpoints (Leader). Every trainer
// rank runs the loop; a replica's ranks hold the same buffers and take the same steps.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>

#include "parallel/topology.h"
#include "rl/config/run_config.h"
#include "rl/rollout/rollout_source.h"
#include "rl/run/run_state.h"

namespace rlcpp {

// Makes the run's rollout source once the run is loaded (the sources need its policy).
using SourceFactory = std::function<std::unique_ptr<RolloutSource>(RunState& run)>;

// Trains the run `config` describes (fresh or resumed) on this rank, with rollouts from the source
// `make_source` gives; returns the run directory. `topology`: under mpirun, else null.
std::filesystem::path run_step_loop(const RunConfig& config, const Topology* topology, const SourceFactory& make_source);

}  // namespace rlcpp
