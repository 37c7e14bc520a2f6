#include "env/environment.h"

#include <spdlog/spdlog.h>

#include "process/child_process.h"
#include "util/error.h"

namespace rlcpp {

ExternalEnvironment::ExternalEnvironment(EnvironmentConfig config) : config_(std::move(config)) {
  if (config_.command.empty()) throw_user_error("--env-cmd: empty command");
  if (config_.workers < 1) throw_user_error("--env-workers {}: must be at least 1", config_.workers);
  if (config_.timeout_s <= 0) throw_user_error("--tool-timeout {}: must be positive", config_.timeout_s);
  for (int64_t k = 0; k < config_.workers; ++k) {
    workers_.push_back(std::make_unique<Worker>());
    start(*workers_.back());
  }
}

ExternalEnvironment::~ExternalEnvironment() = default;  // each child's destructor stops its process group

void ExternalEnvironment::start(Worker& worker) {
  worker.child = std::make_unique<ChildProcess>(shell(config_.command), "--env-cmd");
}

void ExternalEnvironment::restart(Worker& worker, const std::string& why) {
  worker.child->stop();
  const std::string tail = worker.child->stderr_tail();
  const int64_t restarts = ++n_restarts_;
  if (restarts > config_.max_restarts) {
    throw_user_error("--env-cmd '{}': {} ({} restarts, the limit is {}); its stderr ended with:\n{}", config_.command,
                     why, restarts - 1, config_.max_restarts, tail);
  }
  spdlog::warn("environment command: {}; restarting it ({} of at most {})", why, restarts, config_.max_restarts);
  start(worker);
}

EnvReply ExternalEnvironment::request(int64_t episode, const nlohmann::json& request) {
  Worker& worker = *workers_[static_cast<size_t>(episode % static_cast<int64_t>(workers_.size()))];
  std::lock_guard<std::mutex> lock(worker.mutex);
  const std::string line = request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  size_t written = 0;
  const double deadline = now_s() + config_.timeout_s;
  EnvReply reply;
  std::string failure;
  for (;;) {
    std::string answer;
    if (worker.child->take_line(&answer)) {
      auto json = nlohmann::json::parse(answer, nullptr, false);
      if (json.is_object()) {
        reply.json = std::move(json);
        ++worker.replies;
        ++n_replies_;
        return reply;
      }
      if (n_replies_ == 0) {
        throw_user_error("--env-cmd '{}': its first reply is not a JSON object: {}; it must answer each request line "
                         "with one line such as {{\"observation\": null}}", config_.command, answer.substr(0, 200));
      }
      failure = fmt::format("a reply that is not a JSON object: {}", answer.substr(0, 200));
      break;
    }
    const auto state = worker.child->pump(line, &written, deadline);
    if (state == ChildProcess::Pump::kTimeout) {
      failure = fmt::format("no reply within {} s", config_.timeout_s);
      break;
    }
    if (state == ChildProcess::Pump::kExited && worker.child->stdout_buffer().find('\n') == std::string::npos) {
      const ExitStatus& status = worker.child->exit_status();
      if (status.exited && (status.code == 126 || status.code == 127)) {
        throw_user_error("--env-cmd '{}': the shell cannot run it (exit {}: {}); its stderr:\n{}", config_.command,
                         status.code, status.code == 127 ? "command not found" : "not executable",
                         worker.child->stderr_tail());
      }
      failure = "it ended: " + status.describe();
      break;
    }
  }
  reply.failed = true;
  reply.why = failure;
  ++n_failures_;
  restart(worker, failure);
  return reply;
}

}  // namespace rlcpp
