// Who does what in a distributed run: ranks [0, T) train data-parallel, ranks [T, T+I) generate.
// Sub-communicators: the trainers (gradients, token counts), the rollout workers, and the sync
// group (trainer rank 0 and every rollout worker, rank 0 in it being the trainer) for weights.
#pragma once

#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace rlcpp {

enum class Role { kTrainer, kRollout };

struct Topology {
  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> role_group;  // the ranks of this rank's role
  std::shared_ptr<Communicator> sync_group;  // trainer 0 + rollout workers; null on trainers > 0
  int num_trainers = 1, num_inferencers = 0;
  Role role = Role::kTrainer;
  int role_rank = 0;  // rank within the role

  // Splits `world` by role. A world size other than T + I is a UserError naming -t, -i and the
  // number of processes mpirun started.
  static Topology create(std::shared_ptr<Communicator> world, int num_trainers, int num_inferencers);

  // "[rank r/trainer k]" or "[rank r/rollout k]", the prefix of this rank's messages.
  std::string describe() const;
};

}  // namespace rlcpp
