// The NCCL communicator of comm/nccl.h, built as the plugin librlcpp_nccl.so: linked with NCCL and
// LibTorch's CUDA part, which rlcpp itself is not. Its one entry point is rlcpp_nccl_create.
//
// Collectives and transfers of CUDA tensors go through NCCL on the device's current stream; host
// tensors, bytes and barriers through the bootstrap communicator (MPI's) of the same ranks. Blocking
// operations (send, recv) wait for their stream; isend/irecv return a request that waits on an event.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>
#include <torch/cuda.h>
#include <torch/types.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "comm/communicator.h"

namespace rlcpp {

namespace {

void check(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return;
  throw std::runtime_error(fmt::format("NCCL {}: {} ({})", what, ncclGetErrorString(result), ncclGetLastError(nullptr)));
}

ncclDataType_t nccl_type(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat32: return ncclFloat32;
    case torch::kFloat64: return ncclFloat64;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kFloat16: return ncclFloat16;
    case torch::kInt32: return ncclInt32;
    case torch::kInt64: return ncclInt64;
    case torch::kInt8: return ncclInt8;
    case torch::kUInt8: return ncclUint8;
    default: throw std::runtime_error(fmt::format("NCCL has no type for {} tensors", c10::toString(type)));
  }
}

// What this communicator and those split from it moved through NCCL (the bootstrap counts its own).
struct Counters {
  std::atomic<uint64_t> all_reduce{0}, reduce{0}, reduce_scatter{0}, all_gather{0}, broadcast{0}, send{0};
};

class NcclRequest final : public CommRequest {
 public:
  NcclRequest(torch::Tensor keep, cudaStream_t stream) : keep_(std::move(keep)) {
    cudaEventCreateWithFlags(&event_, cudaEventDisableTiming);
    cudaEventRecord(event_, stream);
  }
  ~NcclRequest() override {
    wait();
    cudaEventDestroy(event_);
  }
  void wait() override {
    if (done_) return;
    cudaEventSynchronize(event_);
    done_ = true;
  }

 private:
  torch::Tensor keep_;  // the buffer stays alive until the transfer is done
  cudaEvent_t event_{};
  bool done_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Communicator> host, ncclComm_t comm, int device, std::shared_ptr<Counters> counters)
      : host_(std::move(host)), comm_(comm), device_(device), counters_(std::move(counters)) {}
  ~NcclCommunicator() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  void barrier() override {
    stream_sync();
    host_->barrier();
  }
  void all_reduce_sum(torch::Tensor& t) override {
    if (!on_device(t)) return host_->all_reduce_sum(t);
    check(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.scalar_type()), ncclSum,
                        comm_, stream()), "AllReduce");
    counters_->all_reduce += t.nbytes();
  }
  void reduce_sum(torch::Tensor& t, int root) override {
    if (!on_device(t)) return host_->reduce_sum(t, root);
    check(ncclReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.scalar_type()), ncclSum,
                     root, comm_, stream()), "Reduce");
    counters_->reduce += t.nbytes();
  }
  void reduce_scatter_sum(const torch::Tensor& input, torch::Tensor& output) override {
    if (!on_device(input) || !on_device(output)) return host_->reduce_scatter_sum(input, output);
    check(ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                            nccl_type(input.scalar_type()), ncclSum, comm_, stream()), "ReduceScatter");
    counters_->reduce_scatter += input.nbytes();
  }
  void all_gather(const torch::Tensor& input, torch::Tensor& output) override {
    if (!on_device(input) || !on_device(output)) return host_->all_gather(input, output);
    check(ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()),
                        nccl_type(input.scalar_type()), comm_, stream()), "AllGather");
    counters_->all_gather += input.nbytes();
  }
  void broadcast(torch::Tensor& t, int root) override {
    if (!on_device(t)) return host_->broadcast(t, root);
    check(ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.scalar_type()), root,
                        comm_, stream()), "Broadcast");
    counters_->broadcast += t.nbytes();
  }
  void broadcast_bytes(std::string& bytes, int root) override { host_->broadcast_bytes(bytes, root); }
  void send_bytes(const std::string& bytes, int dest, int tag) override { host_->send_bytes(bytes, dest, tag); }
  std::string recv_bytes(int source, int tag) override { return host_->recv_bytes(source, tag); }
  bool probe(int source, int tag) override { return host_->probe(source, tag); }
  void send(const torch::Tensor& t, int dest, int tag) override {
    if (!on_device(t)) return host_->send(t, dest, tag);
    queue_send(t, dest);
    stream_sync();
  }
  void recv(torch::Tensor& t, int source, int tag) override {
    if (!on_device(t)) return host_->recv(t, source, tag);
    queue_recv(t, source);
    stream_sync();
  }
  std::unique_ptr<CommRequest> isend(const torch::Tensor& t, int dest, int tag) override {
    if (!on_device(t)) return host_->isend(t, dest, tag);
    auto copy = t.clone();  // the send keeps its own copy of the values
    queue_send(copy, dest);
    return std::make_unique<NcclRequest>(std::move(copy), stream());
  }
  std::unique_ptr<CommRequest> irecv(torch::Tensor& t, int source, int tag) override {
    if (!on_device(t)) return host_->irecv(t, source, tag);
    queue_recv(t, source);
    return std::make_unique<NcclRequest>(t, stream());
  }
  std::shared_ptr<Communicator> split(int color, int key) override {
    auto host = host_->split(color, key);
    ncclComm_t child = nullptr;
    check(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, nullptr), "CommSplit");
    return std::make_shared<NcclCommunicator>(std::move(host), child, device_, counters_);
  }
  CommunicationBytes bytes() const override {
    CommunicationBytes b = host_->bytes();
    b.all_reduce += counters_->all_reduce;
    b.reduce += counters_->reduce;
    b.reduce_scatter += counters_->reduce_scatter;
    b.all_gather += counters_->all_gather;
    b.broadcast += counters_->broadcast;
    b.send += counters_->send;
    return b;
  }
  [[noreturn]] void abort(int code) override {
    ncclCommAbort(comm_);
    comm_ = nullptr;
    host_->abort(code);
    std::_Exit(code);  // (abort does not return)
  }

 private:
  bool on_device(const torch::Tensor& t) const {
    if (!t.is_cuda()) return false;
    if (!t.is_contiguous()) throw std::runtime_error(fmt::format("NCCL: a non-contiguous tensor {}", c10::str(t.sizes())));
    if (t.get_device() != device_) {
      throw std::runtime_error(fmt::format("NCCL: a tensor on cuda:{} given to the communicator of cuda:{}", t.get_device(), device_));
    }
    return true;
  }
  cudaStream_t stream() const { return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)).stream(); }
  void stream_sync() const { cudaStreamSynchronize(stream()); }
  void queue_send(const torch::Tensor& t, int dest) {
    check(ncclSend(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.scalar_type()), dest, comm_, stream()), "Send");
    counters_->send += t.nbytes();
  }
  void queue_recv(torch::Tensor& t, int source) {
    check(ncclRecv(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.scalar_type()), source, comm_, stream()), "Recv");
  }

  std::shared_ptr<Communicator> host_;
  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  std::shared_ptr<Counters> counters_;
};

}  // namespace

}  // namespace rlcpp

// comm/nccl_loader.cpp's view of this plugin: 0 and the communicator in `out`, or 1 and why not.
extern "C" __attribute__((visibility("default"))) int rlcpp_nccl_create(
    const std::shared_ptr<rlcpp::Communicator>* bootstrap, int device_index,
    std::shared_ptr<rlcpp::Communicator>* out, std::string* error) {
  try {
    const int64_t devices = static_cast<int64_t>(torch::cuda::device_count());
    if (devices == 0) throw std::runtime_error("no CUDA device on this machine (LibTorch sees none)");
    if (device_index < 0 || device_index >= devices) {
      throw std::runtime_error(fmt::format("CUDA device {} asked for; this machine has {}", device_index, devices));
    }
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));
    auto& host = *bootstrap;
    ncclUniqueId id;
    std::string bytes(sizeof(id.internal), '\0');
    if (host->rank() == 0) {
      rlcpp::check(ncclGetUniqueId(&id), "GetUniqueId");
      std::memcpy(bytes.data(), id.internal, bytes.size());
    }
    host->broadcast_bytes(bytes, 0);
    std::memcpy(id.internal, bytes.data(), bytes.size());
    ncclComm_t comm = nullptr;
    rlcpp::check(ncclCommInitRank(&comm, host->size(), id, host->rank()), "CommInitRank");
    *out = std::make_shared<rlcpp::NcclCommunicator>(host, comm, device_index, std::make_shared<rlcpp::Counters>());
    return 0;
  } catch (const std::exception& e) {
    *error = e.what();
    return 1;
  }
}
