#include "sandbox/sandbox_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "util/error.h"

namespace rlcpp {

namespace {

// Slots are unique across the pools of one process: two pools never share a user.
std::atomic<int> next_slot{0};

}  // namespace

SandboxPool::SandboxPool(int n_workers, const std::string& root) {
  if (n_workers <= 0) n_workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int k = 0; k < n_workers; ++k) {
    const int slot = next_slot.fetch_add(1);
    if (slot >= kMaxSandboxSlots) {
      throw_user_error("--sandbox-workers: at most {} sandbox workers in one process ({} asked)", kMaxSandboxSlots,
                       n_workers);
    }
    slots_.push_back(std::make_unique<Sandbox>(slot, root));
  }
  busy_.assign(slots_.size(), false);
}

SandboxResult SandboxPool::run(const SandboxRun& run) {
  sandbox_isolation();
  size_t slot = 0;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    freed_.wait(lock, [&] { return std::find(busy_.begin(), busy_.end(), false) != busy_.end(); });
    slot = static_cast<size_t>(std::find(busy_.begin(), busy_.end(), false) - busy_.begin());
    busy_[slot] = true;
  }
  struct Release {
    SandboxPool& pool;
    size_t slot;
    ~Release() {
      {
        std::lock_guard<std::mutex> lock(pool.mutex_);
        pool.busy_[slot] = false;
      }
      pool.freed_.notify_one();
    }
  } release{*this, slot};
  return slots_[slot]->run(run);
}

SandboxPool::~SandboxPool() = default;

std::vector<SandboxResult> SandboxPool::run_all(const std::vector<SandboxRun>& runs) {
  std::vector<SandboxResult> results(runs.size());
  if (runs.empty()) return results;
  sandbox_isolation();  // probed (and its warnings said) once, before the workers start
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&](Sandbox& sandbox) {
    for (size_t k; (k = next.fetch_add(1)) < runs.size();) {
      try {
        results[k] = sandbox.run(runs[k]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next = runs.size();  // a broken setup: the others stop taking runs
      }
    }
  };
  const size_t n_threads = std::min(slots_.size(), runs.size());
  std::vector<std::thread> threads;
  for (size_t t = 1; t < n_threads; ++t) threads.emplace_back(work, std::ref(*slots_[t]));
  work(*slots_[0]);
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  return results;
}

}  // namespace rlcpp
