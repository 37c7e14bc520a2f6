// What a process knows of its launcher without MPI itself (comm/mpi.h), and the world of one
// process (comm/self_world.h): compiled with and without MPI.
#include <cstdlib>

#include "comm/mpi.h"
#include "comm/self_world.h"
#include "util/error.h"

namespace rlcpp {

namespace {

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void barrier() override {}
  void all_reduce_sum(torch::Tensor&) override {}
  void reduce_sum(torch::Tensor&, int) override {}
  void reduce_scatter_sum(const torch::Tensor& input, torch::Tensor& output) override { output.copy_(input.view_as(output)); }
  void all_gather(const torch::Tensor& input, torch::Tensor& output) override { output.copy_(input.view_as(output)); }
  void broadcast(torch::Tensor&, int) override {}
  void broadcast_bytes(std::string&, int) override {}
  void send_bytes(const std::string&, int dest, int) override { alone("send to", dest); }
  std::string recv_bytes(int source, int) override { alone("receive from", source); }
  bool probe(int, int) override { return false; }  // nobody else can send
  void send(const torch::Tensor&, int dest, int) override { alone("send to", dest); }
  void recv(torch::Tensor&, int source, int) override { alone("receive from", source); }
  std::unique_ptr<CommRequest> isend(const torch::Tensor&, int dest, int) override { alone("send to", dest); }
  std::unique_ptr<CommRequest> irecv(torch::Tensor&, int source, int) override { alone("receive from", source); }
  std::shared_ptr<Communicator> split(int, int) override { return std::make_shared<SelfCommunicator>(); }
  CommunicationBytes bytes() const override { return {}; }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }

 private:
  [[noreturn]] static void alone(const char* what, int rank) {
    throw InternalError(fmt::format("{} rank {} in a world of one process", what, rank));
  }
};

}  // namespace

std::shared_ptr<Communicator> self_world() { return std::make_shared<SelfCommunicator>(); }

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"}) {
    if (const char* value = std::getenv(name); value != nullptr) return std::atoi(value);
  }
  return 0;
}

void require_mpi(const std::string& what) {
  if (built_with_mpi()) return;
  throw_user_error("{}: this needs several processes in one MPI job, and this rlcpp was built without MPI (CMake found "
                   "none). Install Open MPI (libopenmpi-dev; `bash scripts/deps.sh` does) and build again, or run one "
                   "process", what);
}

}  // namespace rlcpp
