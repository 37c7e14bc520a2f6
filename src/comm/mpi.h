// MPI as rlcpp's process launcher and CPU transport: the runtime (initialised only when the
// process was started by mpirun/srun, so a plain `rlcpp train` never touches MPI) and the
// Communicator over MPI communicators. MPI is optional: built without it (CMake found none,
// comm/mpi_absent.cpp), every run is one process and a launcher's start is refused by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace rlcpp {

// Whether this rlcpp was built with MPI. Without it, modes that need several processes are refused
// by name (require_mpi).
bool built_with_mpi();

// Throws a UserError when built without MPI: `what` (the flags asking for several processes) needs
// an MPI job, and how to get one.
void require_mpi(const std::string& what);

// True when this process was started by an MPI launcher (mpirun, mpiexec, srun --mpi=pmix).
bool launched_by_mpi();

// This process's index among the ranks on its machine (OpenMPI, Slurm, MPICH), or 0.
int local_rank();

// Bytes this process has put into MPI operations since it started: mpi_world()->bytes().
CommunicationBytes communication_bytes();

// --comm-timeout: a blocking MPI operation of this process (a collective, a send, a receive, a
// wait) that waits longer than `seconds` ends the process with exit code 3 and a line on stderr
// naming the operation and the rank(s) it waited on, so that a stopped, hung or lost rank ends the
// job (mpirun then stops the others) instead of leaving every other rank waiting for ever, as
// NCCL's watchdog does for torch.distributed. 0: wait for ever. Call after mpi_world().
void set_comm_timeout(double seconds);

// Initialises MPI once (thread level: funneled) and finalises it at exit. The world communicator;
// under no launcher, a world of one process that needs no MPI at all.
std::shared_ptr<Communicator> mpi_world();

}  // namespace rlcpp
