// Moving bytes and tensors between processes. `Communicator` is the interface the rest of rlcpp
// uses; MpiCommunicator implements it over MPI (CPU tensors; a device tensor goes through host
// memory), and an NCCL implementation can sit behind the same interface for GPU tensors.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rlcpp {

// Bytes put into communication operations, by kind (each collective counted by its own buffer's
// size on this rank; point-to-point by what it sends): the volume a step's metrics line reports.
struct CommunicationBytes {
  uint64_t all_reduce = 0, reduce = 0, reduce_scatter = 0, all_gather = 0, broadcast = 0, send = 0;
  uint64_t total() const { return all_reduce + reduce + reduce_scatter + all_gather + broadcast + send; }
};

// A non-blocking send or receive under way (Communicator::isend, irecv): wait() returns once it is
// done, a receive's tensor then holding the values. One not waited for is waited for when it is
// destroyed, so its buffers never go away under it.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void barrier() = 0;
  // In place, over every rank of this communicator: sum (e.g. gradients, token counts).
  virtual void all_reduce_sum(torch::Tensor& tensor) = 0;
  // In place: `tensor` summed over the ranks, the sum on `root` only (the others' is left as it was).
  virtual void reduce_sum(torch::Tensor& tensor, int root) = 0;
  // `input` [size() * n] summed over the ranks; this rank keeps part rank() of the sum in `output` [n].
  virtual void reduce_scatter_sum(const torch::Tensor& input, torch::Tensor& output) = 0;
  // Every rank's `input` [n], in rank order, into `output` [size() * n] on every rank.
  virtual void all_gather(const torch::Tensor& input, torch::Tensor& output) = 0;
  // In place: `tensor` on every rank takes root's values (shapes and dtypes must already agree).
  virtual void broadcast(torch::Tensor& tensor, int root) = 0;
  // Bytes of any length from root to all (the length travels first).
  virtual void broadcast_bytes(std::string& bytes, int root) = 0;
  virtual void send_bytes(const std::string& bytes, int dest, int tag) = 0;
  virtual std::string recv_bytes(int source, int tag) = 0;
  // Whether a message from `source` with `tag` is waiting to be received (never blocks).
  virtual bool probe(int source, int tag) = 0;
  // A tensor's values to `dest`, which receives them into a tensor of the same shape and dtype.
  virtual void send(const torch::Tensor& tensor, int dest, int tag) = 0;
  virtual void recv(torch::Tensor& tensor, int source, int tag) = 0;
  // The same without waiting (pipeline stages overlap the transfer with compute): the send keeps
  // its own copy of the values; the receive writes into `tensor` by the time wait() returns.
  virtual std::unique_ptr<CommRequest> isend(const torch::Tensor& tensor, int dest, int tag) = 0;
  virtual std::unique_ptr<CommRequest> irecv(torch::Tensor& tensor, int source, int tag) = 0;
  // Ranks with the same color form a new communicator, ordered by `key` (then by rank).
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;
  // What this rank has moved through this communicator and every one split from it (transitively)
  // since it was made: the world's counts are the process's.
  virtual CommunicationBytes bytes() const = 0;
  // Ends the whole job (every process, every host) with `code`: for errors, so no rank is left
  // waiting in a receive.
  [[noreturn]] virtual void abort(int code) = 0;
};

// Every rank's bytes, in rank order, on every rank (a broadcast from each in turn).
inline std::vector<std::string> all_gather_bytes(Communicator& comm, const std::string& mine) {
  std::vector<std::string> out(static_cast<size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) {
    out[static_cast<size_t>(r)] = r == comm.rank() ? mine : std::string();
    comm.broadcast_bytes(out[static_cast<size_t>(r)], r);
  }
  return out;
}

}  // namespace rlcpp
