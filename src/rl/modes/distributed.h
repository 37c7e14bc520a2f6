// The distributed RL run: `mpirun -np T+I rlcpp train -t T -i I ...`. Ranks [0, T) are trainers,
// data-parallel (gradients summed in buckets, token counts agreed per mini-batch); ranks [T, T+I)
// are rollout workers; with --reward-ranks R, ranks [T+I, T+I+R) hold the reward model and score
// the workers' responses (rl/modes/reward_rank.h). Trainer rank 0 leads: it owns the dataset cursor and picks each round's
// prompts (-ibs per worker), gathers the round's manifests and assigns the groups over the
// trainers (RolloutChannel), sends new weights to the workers in buckets (WeightSync), writes
// metrics and checkpoints. Workers hold no state of their own beyond the weights: a run resumes
// from trainer rank 0's checkpoint with any -i.
//
// Staleness: with -nb 0 the next round is sent after the trainers have trained on this one and
// the new weights are in, so rollouts are on-policy (up to the steps a round holds). With -nb N >= 1
// the next round is sent, with the weights as they are, before training on this one, so generation
// overlaps training and samples are one round (sync_frequency rounds, <= N) behind.
#pragma once

#include <filesystem>

#include "parallel/topology.h"
#include "rl/config/run_config.h"

namespace rlcpp {

// Runs this rank's part; returns the run directory.
std::filesystem::path run_distributed(const RunConfig& config, const Topology& topology);

// The two roles (trainer_rank.cpp, rollout_worker.cpp); run_distributed picks one.
std::filesystem::path run_trainer_rank(const RunConfig& config, const Topology& topology);
void run_rollout_worker(const RunConfig& config, const Topology& topology);

}  // namespace rlcpp
