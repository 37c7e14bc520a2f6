// The engine on a thread of its own: jobs submitted from any thread join one GenerationLoop as
// they come (continuous batching) and stream their tokens back; weight changes run on the engine
// thread once the jobs running have ended (the jobs waiting start after the change), so every job
// runs on one version of the weights, which it is told. One adapter runs at a time: jobs for
// another wait until the loop is idle, then the loop switches to theirs.
//
// rlcpp serve answers HTTP requests with it; the multi-turn agent loop and partial rollouts plug
// in here too (a job that continues a sequence with inserted tokens, a weight change at a step
// boundary while sequences wait).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <condition_variable>
#include <vector>

#include "engine/engine.h"

namespace rlcpp {

// One unit of work: its requests' samples generated together. The callbacks run on the engine
// thread, must not block, and must not call back into the AsyncEngine.
struct EngineJob {
  std::vector<GenerationRequest> requests;
  std::string adapter;  // the weights it runs on: "" the base model, else a name `activate` knows
  // When its requests join the loop, with the version of the weights they run on.
  std::function<void(int64_t version)> on_start;
  // Each token sampled for sample `t.sample` of request `request` (an index into `requests`);
  // `finished` is that sample whole when the token ended it, else null.
  std::function<void(size_t request, const StepToken& t, const GeneratedSample* finished)> on_token;
  // Once every sample has ended: the samples of each request, in sample order.
  std::function<void(std::vector<std::vector<GeneratedSample>> samples)> on_done;
  // The job will not finish: `why` is its own fault (a request the engine refuses, an adapter that
  // cannot be switched to: the exception thrown) or the engine's (failed, or stopping).
  enum class Failure { kRejected, kEngineFailed, kStopping };
  std::function<void(Failure why, const std::exception& e)> on_error;
  // Set from any thread: the engine cancels the job's samples at its next step (then on_done).
  std::atomic<bool> cancelled{false};
};

struct AsyncEngineStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;  // since the start
  int64_t running_sequences = 0;                    // waiting or decoding in the loop
  int64_t waiting_jobs = 0;                         // queued, not started
  int64_t kv_blocks_used = 0, kv_blocks = 0;
  double tokens_per_second = 0;                     // generated over the last 10 s
};

class AsyncEngine {
 public:
  // Makes the model run `adapter` ("": the base model), on the engine thread with the loop idle;
  // a throw rejects the jobs that asked for it (and the loop goes back to the base model).
  using Activate = std::function<void(const std::string& adapter)>;

  // The thread starts at once. `engine` must outlive this object.
  AsyncEngine(Engine& engine, Activate activate, int64_t version);
  ~AsyncEngine();  // stop(), then joins the thread
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Queues a job; false (and no callback) when the engine is stopping or has failed.
  bool submit(std::shared_ptr<EngineJob> job);
  // Runs `change` on the engine thread once no job runs (jobs submitted meanwhile wait for it);
  // then the loop starts again on the weights as they are, its adapter activated again (or the
  // base model, when that fails). The future carries what `change` threw.
  std::future<void> change_weights(std::function<void()> change);

  // The version jobs started from now on report; set it from within a change.
  int64_t version() const { return version_; }
  void set_version(int64_t version) { version_ = version; }

  AsyncEngineStats stats() const;
  // Ends the thread: the jobs waiting and running get on_error(kStopping), the changes waiting a
  // broken promise. From any thread; idempotent.
  void stop();

 private:
  struct Running;
  void main();
  void start_job(const std::shared_ptr<EngineJob>& job);
  void step();
  void switch_to(const std::string& adapter);
  void run_change(std::function<void()>& change, std::promise<void>& done);
  void fail_all(EngineJob::Failure why, const std::exception& e);

  Engine& engine_;
  Activate activate_;
  std::atomic<int64_t> version_;

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<EngineJob>> queue_;
  std::deque<std::pair<std::function<void()>, std::promise<void>>> changes_;
  bool stopping_ = false;

  // The engine thread's.
  std::unique_ptr<GenerationLoop> loop_;
  std::string active_;  // the adapter the loop runs
  std::vector<std::unique_ptr<Running>> running_;
  std::map<int64_t, std::pair<Running*, size_t>> by_loop_id_;  // loop request -> (job, request index)

  std::atomic<int64_t> prompt_tokens_{0}, generated_tokens_{0}, running_sequences_{0}, waiting_{0};
  std::atomic<int64_t> kv_used_{0}, kv_total_{0};
  mutable std::mutex rate_m_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> rate_;  // (time, generated tokens)

  std::thread thread_;  // last: it starts once everything above exists
};

}  // namespace rlcpp
