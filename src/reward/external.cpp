#include "reward/external.h"

#include <spdlog/spdlog.h>

#include "process/child_process.h"
#include "util/error.h"

namespace rlcpp {

ExternalReward::ExternalReward(ExternalRewardConfig config) : config_(std::move(config)) {
  if (config_.command.empty()) throw_user_error("--reward-cmd: empty command");
  if (config_.timeout_s <= 0) throw_user_error("--reward-timeout {}: must be positive", config_.timeout_s);
  start();
}

ExternalReward::~ExternalReward() = default;  // the child's destructor stops it and its process group

void ExternalReward::start() { child_ = std::make_unique<ChildProcess>(shell(config_.command), "--reward-cmd"); }

void ExternalReward::restart(const std::string& why) {
  child_->stop();
  stderr_tail_ = child_->stderr_tail();
  ++n_restarts_;
  if (n_restarts_ > config_.max_restarts) {
    throw_user_error("--reward-cmd '{}': {} ({} restarts, the limit is {}); its stderr ended with:\n{}",
                     config_.command, why, n_restarts_ - 1, config_.max_restarts, stderr_tail_);
  }
  spdlog::warn("reward command: {}; restarting it ({} of at most {})", why, n_restarts_, config_.max_restarts);
  start();
}

std::vector<ExternalReply> ExternalReward::score(const std::vector<ExternalRequest>& requests) {
  std::vector<ExternalReply> replies(requests.size());
  const size_t batch = static_cast<size_t>(std::max<int64_t>(1, config_.batch_size));
  for (size_t begin = 0; begin < requests.size(); begin += batch) {
    score_batch(requests, begin, std::min(requests.size(), begin + batch), &replies);
  }
  return replies;
}

std::vector<ComponentScore> ExternalReward::score(const std::vector<RewardInput>& inputs) {
  std::vector<ExternalRequest> requests;
  for (const auto& in : inputs) requests.push_back({in.prompt, in.response, in.gt_answer, in.metadata});
  const auto replies = score(requests);
  std::vector<ComponentScore> out(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    out[k].value = replies[k].reward;
    out[k].parts = replies[k].parts;
  }
  return out;
}

void ExternalReward::score_batch(const std::vector<ExternalRequest>& requests, size_t begin, size_t end,
                                 std::vector<ExternalReply>* replies) {
  size_t next = begin;         // the reply awaited
  size_t retried = end;        // the request sent once more after its child died or hung on it
  while (next < end) {
    std::string pending;  // requests [next, end) serialised, written as the pipe takes them
    for (size_t k = next; k < end; ++k) {
      nlohmann::json line = {{"id", k},
                             {"prompt", requests[k].prompt},
                             {"response", requests[k].response},
                             {"gt_answer", requests[k].gt_answer},
                             {"metadata", requests[k].metadata}};
      pending += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    size_t written = 0;
    double deadline = now_s() + config_.timeout_s;
    std::string failure;
    while (next < end && failure.empty()) {
      // Complete lines already read are replies.
      std::string line;
      while (next < end && child_->take_line(&line)) {
        ExternalReply& reply = (*replies)[next];
        auto json = nlohmann::json::parse(line, nullptr, false);
        if (json.is_object() && json.contains("reward") && json["reward"].is_number()) {
          reply.reward = json["reward"].get<double>();
          ++n_replies_;
          if (json.contains("parts") && json["parts"].is_object()) {
            for (auto it = json["parts"].begin(); it != json["parts"].end(); ++it) {
              if (it.value().is_number()) reply.parts[it.key()] = it.value().get<double>();
            }
          }
        } else {
          if (n_replies_ == 0) {
            throw_user_error("--reward-cmd '{}': its first reply is not a JSON object with a numeric \"reward\": {}; "
                             "it must answer each request line with one line such as {{\"reward\": 1.0}}",
                             config_.command, line.substr(0, 200));
          }
          reply.failed = true;
          reply.reward = config_.failure_reward;
          ++n_failures_;
          spdlog::warn("reward command: malformed reply for request {}: {}", next, line.substr(0, 200));
        }
        ++next;
        deadline = now_s() + config_.timeout_s;
      }
      if (next >= end) break;
      const auto state = child_->pump(pending, &written, deadline);
      if (state == ChildProcess::Pump::kTimeout) {
        failure = fmt::format("no reply within {} s", config_.timeout_s);
      } else if (state == ChildProcess::Pump::kExited && child_->stdout_buffer().find('\n') == std::string::npos) {
        // It ended with no reply left unread.
        const ExitStatus& status = child_->exit_status();
        if (status.exited && (status.code == 126 || status.code == 127)) {
          throw_user_error("--reward-cmd '{}': the shell cannot run it (exit {}: {}); its stderr:\n{}", config_.command,
                           status.code, status.code == 127 ? "command not found" : "not executable",
                           child_->stderr_tail());
        }
        failure = status.exited ? fmt::format("it exited with status {}", status.code)
                                : fmt::format("it was killed by signal {}", status.code);
      }
    }
    if (!failure.empty()) {
      // The child is restarted and the rest of the batch sent again. The awaited request goes to
      // the new child once more (a child killed from outside or a passing fault changes no
      // reward); failing again, it is the request's own doing and gets the failure reward.
      if (retried != next) {
        retried = next;
        restart(failure);
        continue;
      }
      (*replies)[next].failed = true;
      (*replies)[next].reward = config_.failure_reward;
      ++n_failures_;
      ++next;
      restart(failure);
    }
  }
}

}  // namespace rlcpp
