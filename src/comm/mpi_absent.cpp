// comm/mpi.h for a build without MPI (CMake compiles this file instead of comm/mpi.cpp when it
// finds no MPI): every run is one process; a process started by a launcher is refused by name.
#include "comm/mpi.h"
#include "comm/self_world.h"
#include "util/error.h"

namespace rlcpp {

bool built_with_mpi() { return false; }

CommunicationBytes communication_bytes() { return {}; }

void set_comm_timeout(double) {}  // one process: no peer to wait on

std::shared_ptr<Communicator> mpi_world() {
  if (launched_by_mpi()) require_mpi("this process was started by an MPI launcher (mpirun, mpiexec or srun)");
  static const std::shared_ptr<Communicator> world = self_world();
  return world;
}

}  // namespace rlcpp
