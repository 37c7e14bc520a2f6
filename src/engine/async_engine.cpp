#include "engine/async_engine.h"

#include <spdlog/spdlog.h>

#include <stdexcept>

#include "util/error.h"

namespace rlcpp {

// A job in the loop: its loop request ids, by request index.
struct AsyncEngine::Running {
  std::shared_ptr<EngineJob> job;
  std::vector<int64_t> loop_ids;
};

AsyncEngine::AsyncEngine(Engine& engine, Activate activate, int64_t version)
    : engine_(engine), activate_(std::move(activate)), version_(version), thread_([this] { main(); }) {}

AsyncEngine::~AsyncEngine() {
  stop();
  if (thread_.joinable()) thread_.join();
}

bool AsyncEngine::submit(std::shared_ptr<EngineJob> job) {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (stopping_) return false;
    queue_.push_back(std::move(job));
    waiting_ = static_cast<int64_t>(queue_.size());
  }
  cv_.notify_all();
  return true;
}

std::future<void> AsyncEngine::change_weights(std::function<void()> change) {
  std::promise<void> done;
  auto future = done.get_future();
  {
    std::lock_guard<std::mutex> lock(m_);
    if (stopping_) {
      done.set_exception(std::make_exception_ptr(std::runtime_error("the engine is stopping")));
      return future;
    }
    changes_.emplace_back(std::move(change), std::move(done));
  }
  cv_.notify_all();
  return future;
}

void AsyncEngine::stop() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stopping_ = true;
  }
  cv_.notify_all();
}

AsyncEngineStats AsyncEngine::stats() const {
  AsyncEngineStats s;
  s.prompt_tokens = prompt_tokens_;
  s.generated_tokens = generated_tokens_;
  s.running_sequences = running_sequences_;
  s.waiting_jobs = waiting_;
  s.kv_blocks_used = kv_used_;
  s.kv_blocks = kv_total_;
  std::lock_guard<std::mutex> lock(rate_m_);
  if (rate_.size() >= 2) {
    const double dt = std::chrono::duration<double>(rate_.back().first - rate_.front().first).count();
    if (dt > 0) s.tokens_per_second = static_cast<double>(rate_.back().second - rate_.front().second) / dt;
  }
  return s;
}

void AsyncEngine::main() {
  try {
    for (;;) {
      std::vector<std::shared_ptr<EngineJob>> admit;
      std::function<void()> change;
      std::promise<void> change_done;
      bool has_change = false;
      std::string target = active_;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !changes_.empty() || !running_.empty(); });
        if (stopping_) break;
        const bool idle = running_.empty();
        if (!changes_.empty()) {
          if (idle) {  // a change waits for the running jobs; nothing new starts meanwhile
            change = std::move(changes_.front().first);
            change_done = std::move(changes_.front().second);
            changes_.pop_front();
            has_change = true;
          }
        } else if (!queue_.empty()) {
          // The loop runs one adapter at a time: idle, it takes the first waiting job's.
          if (idle) target = queue_.front()->adapter;
          for (auto it = queue_.begin(); it != queue_.end();) {
            if ((*it)->adapter == target) {
              admit.push_back(*it);
              it = queue_.erase(it);
            } else {
              ++it;
            }
          }
        }
        waiting_ = static_cast<int64_t>(queue_.size());
      }
      if (has_change) {
        run_change(change, change_done);
        continue;
      }
      if (target != active_ || loop_ == nullptr) {
        try {
          switch_to(target);
        } catch (const std::exception& e) {  // those jobs fail; the others go on with the base model
          for (auto& job : admit) {
            if (job->on_error) job->on_error(EngineJob::Failure::kRejected, e);
          }
          admit.clear();
          switch_to("");
        }
      }
      for (auto& job : admit) start_job(job);
      if (!running_.empty()) step();
    }
  } catch (const std::exception& e) {  // the engine itself failed: every job waiting hears of it
    spdlog::error("engine: {}", e.what());
    fail_all(EngineJob::Failure::kEngineFailed, std::runtime_error(fmt::format("the engine failed: {}", e.what())));
    return;
  }
  fail_all(EngineJob::Failure::kStopping, std::runtime_error("the engine is stopping"));
}

void AsyncEngine::fail_all(EngineJob::Failure why, const std::exception& e) {
  std::deque<std::shared_ptr<EngineJob>> queued;
  std::deque<std::pair<std::function<void()>, std::promise<void>>> changes;
  {
    std::lock_guard<std::mutex> lock(m_);
    stopping_ = true;
    queued.swap(queue_);
    changes.swap(changes_);
  }
  for (auto& job : queued) {
    if (job->on_error) job->on_error(why, e);
  }
  for (auto& r : running_) {
    if (r->job->on_error) r->job->on_error(why, e);
  }
  running_.clear();
  by_loop_id_.clear();
  for (auto& [change, done] : changes) done.set_exception(std::make_exception_ptr(std::runtime_error(e.what())));
}

void AsyncEngine::switch_to(const std::string& adapter) {
  loop_.reset();
  activate_(adapter);
  active_ = adapter;
  loop_ = std::make_unique<GenerationLoop>(engine_);
  kv_total_ = loop_->kv_blocks();
}

void AsyncEngine::run_change(std::function<void()>& change, std::promise<void>& done) {
  try {
    loop_.reset();
    change();
    done.set_value();
  } catch (...) {
    done.set_exception(std::current_exception());
  }
  // The next loop takes the weights as they are now; its adapter is activated (read) again.
  const std::string keep = active_;
  try {
    switch_to(keep);
  } catch (const std::exception& e) {
    if (keep.empty()) throw;  // the base model cannot be activated: the engine has failed
    switch_to("");
  }
}

void AsyncEngine::start_job(const std::shared_ptr<EngineJob>& job) {
  auto running = std::make_unique<Running>();
  running->job = job;
  try {
    for (size_t k = 0; k < job->requests.size(); ++k) {
      const int64_t id = loop_->add(job->requests[k]);
      running->loop_ids.push_back(id);
      by_loop_id_[id] = {running.get(), k};
    }
  } catch (const UserError& e) {
    for (int64_t id : running->loop_ids) {
      loop_->cancel(id);
      loop_->take(id);
      by_loop_id_.erase(id);
    }
    if (job->on_error) job->on_error(EngineJob::Failure::kRejected, e);
    return;
  }
  for (const auto& r : job->requests) prompt_tokens_ += static_cast<int64_t>(r.prompt_ids.size());
  if (job->on_start) job->on_start(version_);
  running_.push_back(std::move(running));
}

void AsyncEngine::step() {
  // Jobs cancelled by their owner end first.
  for (auto& r : running_) {
    if (!r->job->cancelled) continue;
    for (int64_t id : r->loop_ids) loop_->cancel(id);
  }
  const auto tokens = loop_->step();
  generated_tokens_ += static_cast<int64_t>(tokens.size());
  {
    std::lock_guard<std::mutex> lock(rate_m_);
    const auto now = std::chrono::steady_clock::now();
    rate_.emplace_back(now, generated_tokens_.load());
    while (rate_.size() > 2 && now - rate_.front().first > std::chrono::seconds(10)) rate_.pop_front();
  }
  for (const auto& t : tokens) {
    const auto [running, k] = by_loop_id_.at(t.request);
    if (!running->job->on_token || running->job->cancelled) continue;
    GeneratedSample finished;
    if (t.finished) finished = loop_->peek(t.request, t.sample);
    running->job->on_token(k, t, t.finished ? &finished : nullptr);
  }
  // Jobs whose every sample ended.
  for (auto it = running_.begin(); it != running_.end();) {
    Running& r = **it;
    bool all = true;
    for (int64_t id : r.loop_ids) all = all && loop_->finished(id);
    if (!all) {
      ++it;
      continue;
    }
    std::vector<std::vector<GeneratedSample>> samples;
    for (int64_t id : r.loop_ids) {
      samples.push_back(loop_->take(id));
      by_loop_id_.erase(id);
    }
    auto job = r.job;
    it = running_.erase(it);
    if (job->on_done) job->on_done(std::move(samples));
  }
  running_sequences_ = loop_->n_unfinished();
  kv_used_ = loop_->kv_blocks_used();
}

}  // namespace rlcpp
