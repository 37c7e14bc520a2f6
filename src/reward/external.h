// External rewards: a long-lived child process (`--reward-cmd "CMD ARGS"`, run by /bin/sh) that
// speaks JSON lines. rlcpp writes one request per line,
//   {"id": 0, "prompt": "...", "response": "...", "gt_answer": "...", "metadata": {...}}
// pipelined in batches, and reads one reply per request, in order,
//   {"reward": 1.0, "parts": {"name": 0.5, ...}}      ("parts" optional)
// A reply that does not come within the timeout (or a child that dies) gets the child killed and
// restarted, and the request sent to the new child once more; failing twice, it gets the failure
// reward and is counted (a request that crashes the grader is not retried for ever, and a grader
// killed from outside changes no reward). After max_restarts restarts the
// run stops with the child's stderr tail in the error. A malformed reply is a counted failure once
// the command has answered well; a malformed first reply, or a command the shell cannot run (exit
// 126/127), is a setup error and stops the run at once.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reward/reward_component.h"

namespace rlcpp {

class ChildProcess;

struct ExternalRewardConfig {
  std::string command;         // e.g. "python3 examples/rewards/reward_server.py"
  double timeout_s = 30.0;     // per reply
  int max_restarts = 3;
  double failure_reward = 0.0;
  int64_t batch_size = 64;     // requests in flight before replies are awaited
};

struct ExternalRequest {
  std::string prompt, response, gt_answer;
  nlohmann::json metadata = nlohmann::json::object();
};

struct ExternalReply {
  double reward = 0.0;
  std::map<std::string, double> parts;
  bool failed = false;
};

class ExternalReward : public RewardComponent {
 public:
  explicit ExternalReward(ExternalRewardConfig config);
  ~ExternalReward() override;
  ExternalReward(const ExternalReward&) = delete;
  ExternalReward& operator=(const ExternalReward&) = delete;

  std::vector<ExternalReply> score(const std::vector<ExternalRequest>& requests);
  // As a reward component: each reply's reward, its parts, and no grading outcome.
  std::vector<ComponentScore> score(const std::vector<RewardInput>& inputs) override;
  int64_t n_failures() const { return n_failures_; }
  int64_t n_restarts() const { return n_restarts_; }

 private:
  void start();
  void restart(const std::string& why);
  void score_batch(const std::vector<ExternalRequest>& requests, size_t begin, size_t end,
                   std::vector<ExternalReply>* replies);

  ExternalRewardConfig config_;
  std::unique_ptr<ChildProcess> child_;  // the shell running the command, in its own process group
  std::string stderr_tail_;              // of the last child that ended
  int64_t n_failures_ = 0, n_restarts_ = 0;
  int64_t n_replies_ = 0;  // well-formed replies so far
};

}  // namespace rlcpp
