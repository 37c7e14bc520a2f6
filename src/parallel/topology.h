// Who does what in a distributed run: ranks [0, T) train, ranks [T, T+I) generate.
// Trainers form T / (tp * pp) data-parallel replicas of `train_tp` x `train_pp` consecutive ranks
// each: pipeline stage s of a replica is its ranks [s * tp, (s + 1) * tp), a tensor-parallel group
// (Megatron's layout, so a stage's ranks share a host under --map-by slot); rollout ranks form
// I / ptp engines of `rollout_tp` consecutive ranks each; ranks [T+I, T+I+R), with --reward-ranks,
// hold the reward model and score the engines' responses.
// Sub-communicators: the trainers (plans, metrics, announcements), the rollout ranks, each rank's
// tensor-parallel group (its stage's or its engine's ranks), its pipeline group (its replica's
// ranks of its tensor-parallel rank, one per stage, rank s being stage s), its replica's ranks, the
// data-parallel group (trainers of the same stage and tensor-parallel rank, one per replica:
// gradients, token counts, ZeRO's shards), and the sync group (trainer rank 0 and every rollout
// rank, rank 0 in it being the trainer) for weights.
// The colocated mode under mpirun is one replica of every rank (tensor-parallel, pipeline stages),
// which also generates.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace rlcpp {

enum class Role { kTrainer, kRollout, kReward };

struct Topology {
  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> role_group;  // the ranks of this rank's role
  std::shared_ptr<Communicator> sync_group;  // trainer 0 + rollout ranks; null on trainers > 0
  std::shared_ptr<Communicator> tp_group;    // this rank's tensor-parallel group (of one without TP)
  std::shared_ptr<Communicator> dp_group;    // trainers of this stage and tensor-parallel rank; null on rollout ranks
  std::shared_ptr<Communicator> pp_group;    // this replica's stages (of one without pipeline parallelism); trainers
  std::shared_ptr<Communicator> replica_group;  // this replica's ranks; trainers
  int num_trainers = 1, num_inferencers = 0;  // ranks
  int num_reward = 0;  // reward ranks [T+I, T+I+R): the reward model's (--reward-ranks), in no group but the world
  int train_tp = 1, rollout_tp = 1, train_pp = 1;
  Role role = Role::kTrainer;
  int role_rank = 0;  // rank within the role

  // Splits `world` by role and into groups. A world size other than T + I + R (R: `num_reward`),
  // reward ranks without rollout ranks, or a T or I that the tensor-parallel sizes do not divide, is
  // a UserError naming the flags and the numbers.
  static Topology create(std::shared_ptr<Communicator> world, int num_trainers, int num_inferencers, int train_tp = 1,
                         int rollout_tp = 1, int train_pp = 1, int num_reward = 0);
  // The colocated mode: every rank of `world` in one replica of `pp` stages (world size / pp
  // tensor-parallel ranks each) that trains and generates.
  static Topology colocated(std::shared_ptr<Communicator> world, int pp = 1);

  int tp_rank() const { return tp_group->rank(); }
  bool tp_leader() const { return tp_rank() == 0; }
  // A trainer's pipeline stage, and whether it is its replica's first rank (the one that takes
  // the replica's rollouts and hands them to the others).
  int stage() const { return pp_group != nullptr ? pp_group->rank() : 0; }
  bool replica_first() const { return replica_group == nullptr || replica_group->rank() == 0; }
  // Data-parallel replicas and engines, and this rank's index among its role's.
  int replica_size() const { return train_tp * train_pp; }
  int num_replicas() const { return num_trainers / replica_size(); }
  int num_engines() const { return num_inferencers / rollout_tp; }
  int replica() const { return role_rank / (role == Role::kTrainer ? replica_size() : rollout_tp); }
  // World ranks of replica r's and engine e's first rank.
  int replica_leader(int r) const { return r * replica_size(); }
  int engine_leader(int e) const { return num_trainers + e * rollout_tp; }
  // World rank of the reward rank that scores engine e's responses.
  int reward_rank_of(int e) const { return num_trainers + num_inferencers + e % num_reward; }

  // "[rank r/trainer k]", "[rank r/rollout k]" or "[rank r/reward k]", the prefix of this rank's messages.
  std::string describe() const;
};

}  // namespace rlcpp
