#include "util/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace rlcpp {

namespace {

// Set on workers, and on a caller for the duration of its call: a nested call then runs serially.
thread_local bool in_pool = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long a worker spins for the next call before it sleeps: longer than the gaps between the
// matmuls of a decode step, short enough that an oversubscribed host (MPI ranks) loses little.
constexpr auto kSpin = std::chrono::microseconds(50);

// Spins until done() or kSpin passed; returns done().
template <class Done>
bool spin_until(Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 0; i + 1 < std::max(threads, 1); ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("RLCPP_KERNEL_THREADS"); env != nullptr && std::atoi(env) > 0) return std::atoi(env);
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

void ThreadPool::worker_loop(int index) {
  in_pool = true;
  uint64_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    {
      std::lock_guard<std::mutex> lock(wake_mutex_);
      if (stop_) return;
    }
    const auto [begin, end] = ranges_[static_cast<size_t>(index) + 1];
    if (begin < end) (*fn_)(begin, end);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t align, int64_t min_per_thread) {
  if (n <= 0) return;
  align = std::max<int64_t>(align, 1);
  const int64_t units = (n + align - 1) / align;
  const int64_t per_thread_units = (std::max<int64_t>(min_per_thread, 1) + align - 1) / align;
  const int64_t parts = std::min<int64_t>(size(), std::max<int64_t>(1, units / per_thread_units));
  if (parts <= 1 || in_pool || !busy_.try_lock()) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> hold(busy_, std::adopt_lock);
  in_pool = true;
  ranges_.assign(static_cast<size_t>(size()), {0, 0});
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t b = units * p / parts * align, e = std::min(n, units * (p + 1) / parts * align);
    ranges_[static_cast<size_t>(p)] = {b, e};
  }
  fn_ = &fn;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  fn(ranges_[0].first, ranges_[0].second);
  while (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) std::this_thread::yield();
  in_pool = false;
}

}  // namespace rlcpp
