#include "parallel/topology.h"

#include <fmt/format.h>

#include "util/error.h"

namespace rlcpp {

Topology Topology::create(std::shared_ptr<Communicator> world, int num_trainers, int num_inferencers, int train_tp,
                          int rollout_tp, int train_pp, int num_reward) {
  if (num_trainers < 1 || num_inferencers < 0) {
    throw_user_error("-t {} -i {}: need at least one trainer and no negative count of rollout workers", num_trainers,
                     num_inferencers);
  }
  if (num_reward < 0 || (num_reward > 0 && num_inferencers == 0)) {
    throw_user_error("--reward-ranks {}: reward ranks serve rollout workers (-i)", num_reward);
  }
  if (const int n = num_trainers + num_inferencers + num_reward; world->size() != n) {
    const std::string reward = num_reward > 0 ? fmt::format(" --reward-ranks {}", num_reward) : "";
    throw_user_error("-t {} -i {}{} asks for {} processes, but {} were started; run `mpirun -np {} rlcpp train -t {} -i {}{} ...`",
                     num_trainers, num_inferencers, reward, n, world->size(), n, num_trainers, num_inferencers, reward);
  }
  if (train_tp < 1 || num_trainers % train_tp != 0) {
    throw_user_error("--train-tp {}: the {} trainer ranks (-t) form replicas of that many ranks; give a -t that is a "
                     "multiple of it", train_tp, num_trainers);
  }
  if (train_pp < 1 || num_trainers % (train_tp * train_pp) != 0) {
    throw_user_error("--pp {} with --train-tp {}: the {} trainer ranks (-t) form replicas of {} x {} = {} ranks; give a "
                     "-t that is a multiple of {}", train_pp, train_tp, num_trainers, train_pp, train_tp,
                     train_pp * train_tp, train_pp * train_tp);
  }
  if (rollout_tp < 1 || (num_inferencers > 0 && num_inferencers % rollout_tp != 0)) {
    throw_user_error("--rollout-tp {}: the {} rollout ranks (-i) form engines of that many ranks; give an -i that is a "
                     "multiple of it", rollout_tp, num_inferencers);
  }
  Topology t;
  t.world = std::move(world);
  t.num_trainers = num_trainers;
  t.num_inferencers = num_inferencers;
  t.train_tp = train_tp;
  t.rollout_tp = rollout_tp;
  t.train_pp = train_pp;
  t.num_reward = num_reward;
  const int rank = t.world->rank();
  t.role = rank < num_trainers ? Role::kTrainer : rank < num_trainers + num_inferencers ? Role::kRollout : Role::kReward;
  t.role_rank = t.role == Role::kTrainer ? rank : t.role == Role::kRollout ? rank - num_trainers : rank - num_trainers - num_inferencers;
  t.role_group = t.world->split(static_cast<int>(t.role), rank);
  // Every rank takes part in each split; ranks outside a group land in one of their own.
  const bool in_sync = rank == 0 || t.role == Role::kRollout;
  auto sync = t.world->split(in_sync ? 0 : 1, rank);
  if (in_sync) t.sync_group = std::move(sync);
  const bool trainer = t.role == Role::kTrainer;
  const int tp = trainer ? train_tp : rollout_tp;
  // Colors: tensor-parallel groups (a replica's stages, engines) by their first rank; pipeline
  // groups by replica and tensor-parallel rank; data-parallel groups by the rank within a replica;
  // ranks outside a kind of group (rollout ranks) each in one of their own, past every trainer color.
  const int in_replica = t.role_rank % t.replica_size();
  t.tp_group = t.world->split(trainer                    ? t.role_rank / tp
                              : t.role == Role::kRollout ? num_trainers + t.role_rank / tp
                                                         : num_trainers + num_inferencers + t.role_rank,
                              rank);
  auto pp = t.world->split(trainer ? (t.role_rank / t.replica_size()) * train_tp + in_replica % train_tp : num_trainers + rank, rank);
  auto replica = t.world->split(trainer ? t.role_rank / t.replica_size() : num_trainers + rank, rank);
  auto dp = t.world->split(trainer ? in_replica : num_trainers + rank, rank);
  if (trainer) {
    t.pp_group = std::move(pp);
    t.replica_group = std::move(replica);
    t.dp_group = std::move(dp);
  }
  return t;
}

Topology Topology::colocated(std::shared_ptr<Communicator> world, int pp) {
  RLCPP_CHECK(pp >= 1 && world->size() % pp == 0, "{} colocated processes in {} pipeline stages", world->size(), pp);
  const int tp = world->size() / pp;
  Topology t = create(world, world->size(), 0, tp, tp, pp);  // one replica of every rank, no rollout ranks
  t.sync_group.reset();  // the engine generates on the trainers' own weights
  return t;
}

std::string Topology::describe() const {
  const char* name = role == Role::kTrainer ? "trainer" : role == Role::kRollout ? "rollout" : "reward";
  return fmt::format("[rank {}/{} {}]", world->rank(), name, role_rank);
}

}  // namespace rlcpp
