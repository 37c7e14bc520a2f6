// Sandboxed runs in parallel: one Sandbox per worker, each its own slot (so its own user when
// rlcpp is root), the runs of a batch taken in order by whichever worker is free. Grading a round
// of G × prompts programs then takes about (runs / workers) × one run, not runs × one run.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sandbox/sandbox.h"

namespace rlcpp {

class SandboxPool {
 public:
  // `n_workers` <= 0: one per core. `root`: where the runs' directories are made (Sandbox).
  explicit SandboxPool(int n_workers = 0, const std::string& root = "");
  ~SandboxPool();

  // The results in the order of `runs`; each carries its own figures (wall, CPU, peak memory, exit).
  std::vector<SandboxResult> run_all(const std::vector<SandboxRun>& runs);
  int n_workers() const { return static_cast<int>(slots_.size()); }
  // One run on whichever slot is free, waiting for one; safe from any number of threads (a tool
  // call's run). Not to be mixed with a run_all in progress.
  SandboxResult run(const SandboxRun& run);

 private:
  std::vector<std::unique_ptr<Sandbox>> slots_;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<bool> busy_;
};

}  // namespace rlcpp
