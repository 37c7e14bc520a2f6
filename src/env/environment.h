// External environments (--env-cmd CMD, --env-workers N): N copies of a command, each speaking JSON
// lines on stdin/stdout, one request at a time per process. An episode stays on one process (its
// id modulo N), so a process may keep each episode's state:
//   {"op": "start", "episode": ID, "record": {the dataset line}}       -> {"observation": TEXT or null}
//   {"op": "step", "episode": ID, "turn": K, "assistant": TEXT}         -> {"observation": TEXT or null,
//                                         "role": "user" or "tool", "reward": NUMBER, "done": BOOL}
//   {"op": "end", "episode": ID}                                         -> {}
// As with --reward-cmd: a reply that does not come within the timeout, a process that dies, or a
// reply that is not a JSON object fails that request (counted; the episode ends) and restarts the
// process (its process group killed); past max_restarts the run stops with the command's stderr
// tail. A command the shell cannot run, or a malformed first reply, stops the run at once.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace rlcpp {

class ChildProcess;

struct EnvironmentConfig {
  std::string command;
  int64_t workers = 1;
  double timeout_s = 30.0;  // per reply
  int max_restarts = 3;     // over the run, all workers together
};

struct EnvReply {
  nlohmann::json json = nlohmann::json::object();
  bool failed = false;
  std::string why;  // when failed
};

class ExternalEnvironment {
 public:
  explicit ExternalEnvironment(EnvironmentConfig config);
  ~ExternalEnvironment();
  ExternalEnvironment(const ExternalEnvironment&) = delete;
  ExternalEnvironment& operator=(const ExternalEnvironment&) = delete;

  // One request to the process that holds `episode`, and its reply. Safe from any number of
  // threads (a process serves one request at a time).
  EnvReply request(int64_t episode, const nlohmann::json& request);
  int64_t n_failures() const { return n_failures_; }
  int64_t n_restarts() const { return n_restarts_; }
  const EnvironmentConfig& config() const { return config_; }

 private:
  struct Worker {
    std::mutex mutex;
    std::unique_ptr<ChildProcess> child;
    int64_t replies = 0;
  };
  void start(Worker& worker);
  void restart(Worker& worker, const std::string& why);

  EnvironmentConfig config_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<int64_t> n_failures_{0}, n_restarts_{0}, n_replies_{0};
};

}  // namespace rlcpp
