#include "reward/external.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "util/error.h"

namespace rlcpp {

namespace {

constexpr size_t kStderrTail = 4096;

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

ExternalReward::ExternalReward(ExternalRewardConfig config) : config_(std::move(config)) {
  if (config_.command.empty()) throw_user_error("--reward-cmd: empty command");
  if (config_.timeout_s <= 0) throw_user_error("--reward-timeout {}: must be positive", config_.timeout_s);
  ::signal(SIGPIPE, SIG_IGN);  // a dead child must give EPIPE, not kill us
  start();
}

ExternalReward::~ExternalReward() { stop(); }

void ExternalReward::start() {
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw_user_error("--reward-cmd: cannot create pipes: {}", std::strerror(errno));
  }
  pid_ = ::fork();
  if (pid_ < 0) throw_user_error("--reward-cmd: cannot fork: {}", std::strerror(errno));
  if (pid_ == 0) {
    ::setpgid(0, 0);  // its own process group, so that stopping it stops whatever it started
    ::dup2(in_pipe[0], 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::execl("/bin/sh", "sh", "-c", config_.command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid_, pid_);  // also here: whichever of the two runs first
  group_ = pid_;
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  to_child_ = in_pipe[1];
  from_child_ = out_pipe[0];
  child_err_ = err_pipe[0];
  set_nonblocking(to_child_);
  set_nonblocking(from_child_);
  set_nonblocking(child_err_);
  stdout_buffer_.clear();
}

void ExternalReward::stop() {
  if (to_child_ >= 0) ::close(to_child_);  // a polite end: its stdin closes
  to_child_ = -1;
  if (pid_ > 0) {
    for (int k = 0; k < 20 && pid_ > 0; ++k) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) pid_ = -1;
      else ::usleep(5000);
    }
    if (pid_ > 0) {  // then a kill if it lingers
      ::kill(-group_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Whatever the command started and left behind (sh -c "a | b", a program that forked) goes with it.
  if (group_ > 0) ::kill(-group_, SIGKILL);
  group_ = -1;
  pid_ = -1;
  drain_stderr();
  for (int* fd : {&from_child_, &child_err_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void ExternalReward::drain_stderr() {
  if (child_err_ < 0) return;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(child_err_, buffer, sizeof buffer)) > 0) {
    stderr_tail_.append(buffer, static_cast<size_t>(n));
    if (stderr_tail_.size() > kStderrTail) stderr_tail_.erase(0, stderr_tail_.size() - kStderrTail);
  }
}

void ExternalReward::restart(const std::string& why) {
  stop();
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

void ExternalReward::score_batch(const std::vector<ExternalRequest>& requests, size_t begin, size_t end,
                                 std::vector<ExternalReply>* replies) {
  size_t next = begin;  // the reply awaited
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
      size_t newline;
      while (next < end && (newline = stdout_buffer_.find('\n')) != std::string::npos) {
        const std::string line = stdout_buffer_.substr(0, newline);
        stdout_buffer_.erase(0, newline + 1);
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
      pollfd fds[3] = {{from_child_, POLLIN, 0}, {child_err_, POLLIN, 0}, {to_child_, POLLOUT, 0}};
      const nfds_t n_fds = written < pending.size() ? 3 : 2;
      const int wait_ms = static_cast<int>(std::max(0.0, deadline - now_s()) * 1000.0) + 1;
      const int ready = ::poll(fds, n_fds, wait_ms);
      if (ready < 0 && errno != EINTR) failure = fmt::format("poll failed: {}", std::strerror(errno));
      if (ready == 0 || now_s() > deadline) {
        failure = fmt::format("no reply within {} s", config_.timeout_s);
        break;
      }
      if (n_fds == 3 && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
        const ssize_t n = ::write(to_child_, pending.data() + written, pending.size() - written);
        if (n > 0) written += static_cast<size_t>(n);
        if (n < 0 && errno != EAGAIN) failure = fmt::format("writing to it failed: {}", std::strerror(errno));
      }
      if (fds[1].revents & (POLLIN | POLLHUP)) drain_stderr();
      if (fds[0].revents & (POLLIN | POLLHUP)) {
        char buffer[65536];
        const ssize_t n = ::read(from_child_, buffer, sizeof buffer);
        if (n > 0) {
          stdout_buffer_.append(buffer, static_cast<size_t>(n));
        } else if (n == 0) {
          int status = 0;
          ::waitpid(pid_, &status, 0);
          pid_ = -1;
          if (WIFEXITED(status) && (WEXITSTATUS(status) == 126 || WEXITSTATUS(status) == 127)) {
            drain_stderr();
            throw_user_error("--reward-cmd '{}': the shell cannot run it (exit {}: {}); its stderr:\n{}", config_.command,
                             WEXITSTATUS(status), WEXITSTATUS(status) == 127 ? "command not found" : "not executable",
                             stderr_tail_);
          }
          failure = WIFEXITED(status) ? fmt::format("it exited with status {}", WEXITSTATUS(status))
                                      : fmt::format("it was killed by signal {}", WTERMSIG(status));
        }
      }
    }
    if (!failure.empty()) {
      // The awaited request fails; the child is restarted and the rest of the batch sent again.
      (*replies)[next].failed = true;
      (*replies)[next].reward = config_.failure_reward;
      ++n_failures_;
      ++next;
      restart(failure);
    }
  }
}

}  // namespace rlcpp
