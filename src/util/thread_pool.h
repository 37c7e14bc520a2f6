// A fixed pool of worker threads for the CPU kernels (kernels/). parallel_for splits [0, n) into one
// contiguous range per thread, the caller taking the first, and returns when every range is done.
// Workers spin briefly between calls (decode issues a matmul every few tens of microseconds) and
// then sleep, so an idle pool costs nothing. A call from inside a worker, or while another thread
// holds the pool, runs serially on the caller: nesting and concurrent users are safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rlcpp {

class ThreadPool {
 public:
  using RangeFn = std::function<void(int64_t begin, int64_t end)>;

  explicit ThreadPool(int threads);  // threads >= 1, the caller included
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end) over [0, n) in at most size() ranges whose bounds are multiples of `align`
  // (except n itself); ranges shorter than `min_per_thread` are not split further.
  void parallel_for(int64_t n, const RangeFn& fn, int64_t align = 1, int64_t min_per_thread = 1);

  // The process-wide pool: $RLCPP_KERNEL_THREADS threads, else one per hardware thread.
  static ThreadPool& global();

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex busy_;  // held by the caller of a parallel_for for its duration
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
  // The current call: worker i runs ranges_[i + 1].
  const RangeFn* fn_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> ranges_;
};

}  // namespace rlcpp
