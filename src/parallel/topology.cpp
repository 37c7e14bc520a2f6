#include "parallel/topology.h"

#include <fmt/format.h>

#include "util/error.h"

namespace rlcpp {

Topology Topology::create(std::shared_ptr<Communicator> world, int num_trainers, int num_inferencers) {
  if (num_trainers < 1 || num_inferencers < 0) {
    throw_user_error("-t {} -i {}: need at least one trainer and no negative count of rollout workers", num_trainers,
                     num_inferencers);
  }
  if (world->size() != num_trainers + num_inferencers) {
    throw_user_error("-t {} -i {} asks for {} processes, but {} were started; run `mpirun -np {} rlcpp train -t {} -i {} ...`",
                     num_trainers, num_inferencers, num_trainers + num_inferencers, world->size(),
                     num_trainers + num_inferencers, num_trainers, num_inferencers);
  }
  Topology t;
  t.world = std::move(world);
  t.num_trainers = num_trainers;
  t.num_inferencers = num_inferencers;
  const int rank = t.world->rank();
  t.role = rank < num_trainers ? Role::kTrainer : Role::kRollout;
  t.role_rank = t.role == Role::kTrainer ? rank : rank - num_trainers;
  t.role_group = t.world->split(t.role == Role::kTrainer ? 0 : 1, rank);
  // Every rank takes part in the split; trainers other than 0 land in a group of their own.
  const bool in_sync = rank == 0 || t.role == Role::kRollout;
  auto sync = t.world->split(in_sync ? 0 : 1, rank);
  if (in_sync) t.sync_group = std::move(sync);
  return t;
}

std::string Topology::describe() const {
  return fmt::format("[rank {}/{} {}]", world->rank(), role == Role::kTrainer ? "trainer" : "rollout", role_rank);
}

}  // namespace rlcpp
