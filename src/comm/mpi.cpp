#include "comm/mpi.h"

// The C API only (OpenMPI and MPICH would otherwise pull in their deprecated C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <unistd.h>
#include <optional>
#include <mutex>

#include "comm/self_world.h"
#include "util/error.h"
#include "util/trace.h"

namespace rlcpp {

namespace {

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw InternalError(std::string("MPI ") + what + ": " + std::string(text, static_cast<size_t>(length)));
}

MPI_Datatype mpi_type(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat32: return MPI_FLOAT;
    case torch::kFloat64: return MPI_DOUBLE;
    case torch::kInt64: return MPI_INT64_T;
    case torch::kInt32: return MPI_INT32_T;
    case torch::kUInt8: return MPI_UINT8_T;
    case torch::kBool: return MPI_C_BOOL;
    default: return MPI_DATATYPE_NULL;
  }
}

// One communicator's byte counts, which also count into the communicator it was split from (and
// so on up to the world).
enum Kind { kAllReduce, kReduce, kReduceScatter, kAllGather, kBroadcast, kSend, kKinds };
struct Counters {
  std::array<std::atomic<uint64_t>, kKinds> bytes{};
  std::shared_ptr<Counters> parent;
  void add(Kind kind, uint64_t n) {
    for (Counters* c = this; c != nullptr; c = c->parent.get()) c->bytes[kind] += n;
  }
  CommunicationBytes snapshot() const {
    return {bytes[kAllReduce].load(), bytes[kReduce].load(), bytes[kReduceScatter].load(),
            bytes[kAllGather].load(), bytes[kBroadcast].load(), bytes[kSend].load()};
  }
};

// The blocking operation this process is in (MPI is funneled: one thread calls it), watched by
// a thread of its own under --comm-timeout.
struct Watchdog {
  std::atomic<int64_t> since_ns{0};  // when the operation began (steady clock); 0: none
  std::atomic<const char*> what{""};
  std::atomic<int> peer{-1};         // the world rank waited on, or -1: every rank of a group of
  std::atomic<int> group{0};         // this many
  std::atomic<double> timeout{0};
  std::once_flag started;
};
Watchdog& watchdog() {
  static auto* w = new Watchdog;  // never destroyed: it watches MPI_Finalize at exit too
  return *w;
}
thread_local int watch_depth = 0;

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Marks a blocking operation for the watchdog while it lasts (the outermost one, when nested).
class Waiting {
 public:
  Waiting(const char* what, int peer, int group) {
    if (watch_depth++ > 0) return;
    auto& w = watchdog();
    w.what = what;
    w.peer = peer;
    w.group = group;
    w.since_ns = steady_ns();
  }
  ~Waiting() {
    if (--watch_depth == 0) watchdog().since_ns = 0;
  }
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;
};

void watch(int world_rank) {
  auto& w = watchdog();
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const int64_t since = w.since_ns.load();
    const double limit = w.timeout.load();
    if (since == 0 || limit <= 0) continue;
    const double waited = static_cast<double>(steady_ns() - since) * 1e-9;
    if (waited < limit) continue;
    const int peer = w.peer.load();
    const std::string whom = peer >= 0 ? fmt::format("rank {}", peer)
                                       : fmt::format("the other ranks of its group of {}", w.group.load());
    std::fprintf(stderr,
                 "Error: rank %d waited %.0f s in MPI %s for %s (--comm-timeout %.0f): that rank is stopped, hung, lost "
                 "or far slower; ending the job (resume it with --resume auto once the cause is fixed)\n",
                 world_rank, waited, w.what.load(), whom.c_str(), limit);
    std::fflush(stderr);
    std::_Exit(3);
  }
}

// A contiguous host tensor for MPI; `out` is copied back into the original when it is not one.
struct HostView {
  torch::Tensor original, host;
  explicit HostView(torch::Tensor& t) : original(t), host(t.device().is_cpu() && t.is_contiguous() ? t : t.contiguous().cpu()) {}
  void write_back() {
    if (!host.is_same(original)) original.copy_(host);
  }
};

// MPI requests of one transfer (a piece per kChunk bytes) and the host buffer they use.
class MpiRequest final : public CommRequest {
 public:
  MpiRequest(torch::Tensor buffer, std::optional<HostView> into) : buffer_(std::move(buffer)), into_(std::move(into)) {}
  ~MpiRequest() override {
    if (done_) return;
    // Destroyed without a wait (an error unwinding): the buffers must outlive the transfer.
    MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
  }
  void wait() override {
    if (done_) return;
    done_ = true;
    const Waiting waiting("Waitall", -1, 0);
    check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "Waitall");
    if (into_) into_->write_back();
  }
  std::vector<MPI_Request> requests_;

 private:
  torch::Tensor buffer_;  // the values sent, or the host tensor received into
  std::optional<HostView> into_;
  bool done_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::shared_ptr<Counters> parent) : comm_(comm), counters_(std::make_shared<Counters>()) {
    counters_->parent = std::move(parent);
    check(MPI_Comm_rank(comm_, &rank_), "Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "Comm_size");
    // The world rank of each of this communicator's, for the watchdog's message.
    MPI_Group group, world;
    check(MPI_Comm_group(comm_, &group), "Comm_group");
    check(MPI_Comm_group(MPI_COMM_WORLD, &world), "Comm_group");
    std::vector<int> mine(static_cast<size_t>(size_));
    for (int k = 0; k < size_; ++k) mine[static_cast<size_t>(k)] = k;
    world_ranks_.resize(mine.size());
    check(MPI_Group_translate_ranks(group, size_, mine.data(), world, world_ranks_.data()), "Group_translate_ranks");
    MPI_Group_free(&group);
    MPI_Group_free(&world);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override {
    const Waiting waiting("Barrier", -1, size_);
    check(MPI_Barrier(comm_), "Barrier");
  }

  void all_reduce_sum(torch::Tensor& tensor) override {
    if (tensor.scalar_type() == torch::kBFloat16 || tensor.scalar_type() == torch::kFloat16) {
      auto wide = tensor.to(torch::kFloat32);  // summed in fp32, then rounded once
      all_reduce_sum(wide);
      tensor.copy_(wide);
      return;
    }
    HostView view(tensor);
    const auto type = mpi_type(view.host.scalar_type());
    RLCPP_CHECK(type != MPI_DATATYPE_NULL, "all_reduce of {}", c10::toString(view.host.scalar_type()));
    counters_->add(kAllReduce, view.host.nbytes());
    const auto waiting = collective("Allreduce");
    check(MPI_Allreduce(MPI_IN_PLACE, view.host.data_ptr(), static_cast<int>(view.host.numel()), type, MPI_SUM, comm_),
          "Allreduce");
    view.write_back();
  }

  void reduce_sum(torch::Tensor& tensor, int root) override {
    if (tensor.scalar_type() == torch::kBFloat16 || tensor.scalar_type() == torch::kFloat16) {
      auto wide = tensor.to(torch::kFloat32);  // summed in fp32, then rounded once
      reduce_sum(wide, root);
      if (rank_ == root) tensor.copy_(wide);
      return;
    }
    HostView view(tensor);
    const auto type = mpi_type(view.host.scalar_type());
    RLCPP_CHECK(type != MPI_DATATYPE_NULL && view.host.numel() < (int64_t{1} << 31), "reduce of {} {}",
                view.host.numel(), c10::toString(view.host.scalar_type()));
    void* data = view.host.data_ptr();
    counters_->add(kReduce, view.host.nbytes());
    const auto waiting = collective("Reduce");
    check(MPI_Reduce(rank_ == root ? MPI_IN_PLACE : data, data, static_cast<int>(view.host.numel()), type, MPI_SUM, root,
                     comm_),
          "Reduce");
    if (rank_ == root) view.write_back();
  }

  void reduce_scatter_sum(const torch::Tensor& input, torch::Tensor& output) override {
    const int64_t n = output.numel();
    RLCPP_CHECK(input.numel() == n * size_ && input.scalar_type() == output.scalar_type() && n < (int64_t{1} << 31),
                "reduce_scatter of {} elements into {} on {} ranks", input.numel(), n, size_);
    const auto send = input.device().is_cpu() && input.is_contiguous() ? input : input.contiguous().cpu();
    HostView view(output);
    const auto type = mpi_type(send.scalar_type());
    RLCPP_CHECK(type != MPI_DATATYPE_NULL, "reduce_scatter of {}", c10::toString(send.scalar_type()));
    counters_->add(kReduceScatter, send.nbytes());
    const auto waiting = collective("Reduce_scatter");
    check(MPI_Reduce_scatter_block(send.data_ptr(), view.host.data_ptr(), static_cast<int>(n), type, MPI_SUM, comm_),
          "Reduce_scatter_block");
    view.write_back();
  }

  void all_gather(const torch::Tensor& input, torch::Tensor& output) override {
    const int64_t n = input.numel();
    RLCPP_CHECK(output.numel() == n * size_ && input.scalar_type() == output.scalar_type() &&
                    input.nbytes() < (size_t{1} << 31),
                "all_gather of {} elements into {} on {} ranks", n, output.numel(), size_);
    const auto send = input.device().is_cpu() && input.is_contiguous() ? input : input.contiguous().cpu();
    HostView view(output);
    counters_->add(kAllGather, send.nbytes());
    const auto waiting = collective("Allgather");
    check(MPI_Allgather(send.data_ptr(), static_cast<int>(send.nbytes()), MPI_BYTE, view.host.data_ptr(),
                        static_cast<int>(send.nbytes()), MPI_BYTE, comm_),
          "Allgather");
    view.write_back();
  }

  void broadcast(torch::Tensor& tensor, int root) override {
    HostView view(tensor);
    broadcast_raw(view.host.data_ptr(), view.host.nbytes(), root);
    view.write_back();
  }

  void broadcast_bytes(std::string& bytes, int root) override {
    uint64_t length = bytes.size();
    const auto waiting = collective("Bcast");
    check(MPI_Bcast(&length, 1, MPI_UINT64_T, root, comm_), "Bcast");
    bytes.resize(length);
    broadcast_raw(bytes.data(), length, root);
  }

  void send_bytes(const std::string& bytes, int dest, int tag) override {
    trace::Span span("send");
    uint64_t length = bytes.size();
    counters_->add(kSend, length);
    const auto waiting = with("Send", dest);
    check(MPI_Send(&length, 1, MPI_UINT64_T, dest, tag, comm_), "Send");
    for (uint64_t offset = 0; offset < length; offset += kChunk) {
      const int n = static_cast<int>(std::min<uint64_t>(kChunk, length - offset));
      const auto waiting = with("Send", dest);
      check(MPI_Send(bytes.data() + offset, n, MPI_BYTE, dest, tag, comm_), "Send");
    }
  }

  std::string recv_bytes(int source, int tag) override {
    trace::Span span("recv");
    uint64_t length = 0;
    const auto waiting = with("Recv", source);
    await_message(source, tag);
    check(MPI_Recv(&length, 1, MPI_UINT64_T, source, tag, comm_, MPI_STATUS_IGNORE), "Recv");
    std::string bytes(length, '\0');
    for (uint64_t offset = 0; offset < length; offset += kChunk) {
      const int n = static_cast<int>(std::min<uint64_t>(kChunk, length - offset));
      const auto waiting = with("Recv", source);
      check(MPI_Recv(bytes.data() + offset, n, MPI_BYTE, source, tag, comm_, MPI_STATUS_IGNORE), "Recv");
    }
    return bytes;
  }

  // Until a message from `source` with `tag` has arrived, probing with pauses that grow to 1 ms
  // rather than spinning in MPI_Recv: the long waits of a run (a rollout worker's for its next
  // round, the trainer's for rollouts) then leave the core to the ranks that work, where roles share
  // cores (OpenMPI's blocking receive polls at full speed, even oversubscribed). A message is taken
  // at most 1 ms late.
  void await_message(int source, int tag) {
    int flag = 0;
    for (int64_t pause_us = 20;; pause_us = std::min<int64_t>(pause_us * 2, 1000)) {
      check(MPI_Iprobe(source, tag, comm_, &flag, MPI_STATUS_IGNORE), "Iprobe");
      if (flag != 0) return;
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
    }
  }

  bool probe(int source, int tag) override {
    int flag = 0;
    check(MPI_Iprobe(source, tag, comm_, &flag, MPI_STATUS_IGNORE), "Iprobe");
    return flag != 0;
  }

  void send(const torch::Tensor& tensor, int dest, int tag) override {
    const auto host = tensor.device().is_cpu() && tensor.is_contiguous() ? tensor : tensor.contiguous().cpu();
    const auto* p = static_cast<const char*>(host.data_ptr());
    counters_->add(kSend, host.nbytes());
    for (uint64_t offset = 0; offset < host.nbytes(); offset += kChunk) {
      const int n = static_cast<int>(std::min<uint64_t>(kChunk, host.nbytes() - offset));
      const auto waiting = with("Send", dest);
      check(MPI_Send(p + offset, n, MPI_BYTE, dest, tag, comm_), "Send");
    }
  }

  void recv(torch::Tensor& tensor, int source, int tag) override {
    HostView view(tensor);
    auto* p = static_cast<char*>(view.host.data_ptr());
    for (uint64_t offset = 0; offset < view.host.nbytes(); offset += kChunk) {
      const int n = static_cast<int>(std::min<uint64_t>(kChunk, view.host.nbytes() - offset));
      const auto waiting = with("Recv", source);
      check(MPI_Recv(p + offset, n, MPI_BYTE, source, tag, comm_, MPI_STATUS_IGNORE), "Recv");
    }
    view.write_back();
  }

  std::unique_ptr<CommRequest> isend(const torch::Tensor& tensor, int dest, int tag) override {
    // A copy of its own unless already a contiguous host tensor the caller no longer changes.
    const auto host = tensor.device().is_cpu() && tensor.is_contiguous() ? tensor.clone() : tensor.contiguous().cpu();
    auto request = std::make_unique<MpiRequest>(host, std::nullopt);
    const auto* p = static_cast<const char*>(host.data_ptr());
    counters_->add(kSend, host.nbytes());
    for (uint64_t offset = 0; offset < host.nbytes(); offset += kChunk) {
      const int n = static_cast<int>(std::min<uint64_t>(kChunk, host.nbytes() - offset));
      request->requests_.emplace_back();
      check(MPI_Isend(p + offset, n, MPI_BYTE, dest, tag, comm_, &request->requests_.back()), "Isend");
    }
    return request;
  }

  std::unique_ptr<CommRequest> irecv(torch::Tensor& tensor, int source, int tag) override {
    HostView view(tensor);
    const torch::Tensor host = view.host;
    auto* p = static_cast<char*>(host.data_ptr());
    const uint64_t nbytes = host.nbytes();
    auto request = std::make_unique<MpiRequest>(host, std::move(view));
    for (uint64_t offset = 0; offset < nbytes; offset += kChunk) {
      const int n = static_cast<int>(std::min<uint64_t>(kChunk, nbytes - offset));
      request->requests_.emplace_back();
      check(MPI_Irecv(p + offset, n, MPI_BYTE, source, tag, comm_, &request->requests_.back()), "Irecv");
    }
    return request;
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    MPI_Comm out;
    check(MPI_Comm_split(comm_, color, key, &out), "Comm_split");
    return std::make_shared<MpiCommunicator>(out, counters_);
  }
  CommunicationBytes bytes() const override { return counters_->snapshot(); }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(comm_, code);
    std::_Exit(code);
  }

 private:
  static constexpr uint64_t kChunk = 1ULL << 30;  // MPI counts are int: move big buffers in 1 GiB pieces

  void broadcast_raw(void* data, uint64_t bytes, int root) {
    auto* p = static_cast<char*>(data);
    counters_->add(kBroadcast, bytes);
    for (uint64_t offset = 0; offset < bytes; offset += kChunk) {
      const int n = static_cast<int>(std::min<uint64_t>(kChunk, bytes - offset));
      const auto waiting = collective("Bcast");
      check(MPI_Bcast(p + offset, n, MPI_BYTE, root, comm_), "Bcast");
    }
  }

  // Watching a collective over this communicator, or a transfer with its rank `peer`.
  Waiting collective(const char* what) const { return Waiting(what, -1, size_); }
  Waiting with(const char* what, int peer) const { return Waiting(what, world_ranks_.at(static_cast<size_t>(peer)), 0); }

  MPI_Comm comm_;
  std::shared_ptr<Counters> counters_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;
};

}  // namespace

CommunicationBytes communication_bytes() { return mpi_world()->bytes(); }

bool built_with_mpi() { return true; }

// Which processes this one can see by pid: its machine's boot (gethostid is the same on cloned
// images and on Debian's 127.0.1.1 hostnames) and its pid namespace (a container's).
static long pid_space() {
  std::string id;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char text[64] = {};
    if (std::fgets(text, sizeof(text), f) != nullptr) id = text;
    std::fclose(f);
  }
  char ns[128] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  if (n > 0) id.append(ns, static_cast<size_t>(n));
  return id.empty() ? -1 : static_cast<long>(std::hash<std::string>{}(id));
}

// A rank stopped (or hung) after the others have finalized leaves mpirun waiting for it for ever,
// with no rank left in MPI to notice. So rank 0, once finalized, waits for the ranks on its machine
// (the ranks whose pids it can see) to exit, up to --comm-timeout, and past it exits 3 naming them
// (mpirun then ends them).
static void wait_for_peers_to_exit(const std::vector<long>& peers) {
  const double limit = watchdog().timeout.load();
  if (limit <= 0) return;
  const auto gone = [](long pid) {  // exited, or a zombie its parent has not reaped yet
    if (::kill(static_cast<pid_t>(pid), 0) != 0) return true;
    std::FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
    if (f == nullptr) return true;
    char state = '?';
    const int read = std::fscanf(f, "%*d (%*[^)]) %c", &state);
    std::fclose(f);
    return read == 1 && (state == 'Z' || state == 'X');
  };
  const int64_t start = steady_ns();
  const long host = pid_space();
  if (host == -1) return;
  while (true) {
    std::string left;
    for (size_t r = 1; r < peers.size() / 2; ++r) {
      const long pid = peers[2 * r], peer_host = peers[2 * r + 1];
      if (peer_host == host && pid != ::getpid() && !gone(pid)) left += fmt::format("{}rank {} (pid {})", left.empty() ? "" : ", ", r, pid);
    }
    if (left.empty()) return;
    const double waited = static_cast<double>(steady_ns() - start) * 1e-9;
    if (waited >= limit) {
      std::fprintf(stderr, "Error: the job has finished, but %s did not exit in %.0f s (--comm-timeout %.0f): stopped or "
                   "hung; ending the job\n", left.c_str(), waited, limit);
      std::fflush(stderr);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void set_comm_timeout(double seconds) {
  auto& w = watchdog();
  w.timeout = seconds;
  if (seconds <= 0 || !launched_by_mpi()) return;
  const int rank = mpi_world()->rank();
  std::call_once(w.started, [rank] { std::thread(watch, rank).detach(); });
}

std::shared_ptr<Communicator> mpi_world() {
  static std::once_flag once;
  static std::shared_ptr<Communicator> world;
  std::call_once(once, [] {
    if (!launched_by_mpi()) {
      world = self_world();
      return;
    }
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "Init_thread");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (finalized) return;
      int size = 0, rank = 0;
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      std::vector<long> peers(static_cast<size_t>(size) * 2);  // each rank's pid and host
      {
        const Waiting waiting("Finalize", -1, size);  // every rank takes part: a stopped one holds the others
        const long mine[2] = {static_cast<long>(::getpid()), pid_space()};
        MPI_Allgather(mine, 2, MPI_LONG, peers.data(), 2, MPI_LONG, MPI_COMM_WORLD);
        MPI_Finalize();
      }
      if (rank == 0) wait_for_peers_to_exit(peers);
    });
    world = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, nullptr);
  });
  return world;
}

}  // namespace rlcpp
