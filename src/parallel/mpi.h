// MPI as rlcpp's process launcher and CPU transport: the runtime (initialised only when the
// process was started by mpirun/srun, so a plain `rlcpp train` never touches MPI) and the
// Communicator over MPI communicators.
#pragma once

#include <cstdint>
#include <memory>

#include "parallel/communicator.h"

namespace rlcpp {

// True when this process was started by an MPI launcher (mpirun, mpiexec, srun --mpi=pmix).
bool launched_by_mpi();

// This process's index among the ranks on its machine (OpenMPI, Slurm, MPICH), or 0.
int local_rank();

// Bytes this process has put into MPI operations since it started (each collective counted by its
// own buffer's size on this rank; point-to-point by what it sends), by kind: the communication
// volume a step's metrics line reports.
struct CommunicationBytes {
  uint64_t all_reduce = 0, reduce = 0, reduce_scatter = 0, all_gather = 0, broadcast = 0, send = 0;
  uint64_t total() const { return all_reduce + reduce + reduce_scatter + all_gather + broadcast + send; }
};
CommunicationBytes communication_bytes();

// Initialises MPI once (thread level: funneled) and finalises it at exit. The world communicator;
// under no launcher, a world of one process that needs no MPI at all.
std::shared_ptr<Communicator> mpi_world();

}  // namespace rlcpp
