#include "process/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "util/error.h"

extern char** environ;

namespace rlcpp {

namespace {

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Writes a decimal number to fd without allocating (the child side of fork).
void write_number(int fd, long value) {
  char digits[24];
  int n = 0;
  if (value < 0) value = -value;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0 && n < 23);
  while (n > 0) {
    const char c = digits[--n];
    [[maybe_unused]] const ssize_t w = ::write(fd, &c, 1);
  }
}

}  // namespace

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

SpawnOptions shell(const std::string& command) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", command};
  return o;
}

std::string ExitStatus::describe() const {
  if (exited) return fmt::format("exit status {}", code);
  const char* name = ::sigabbrev_np(code);
  return name != nullptr ? fmt::format("killed by signal {} (SIG{})", code, name) : fmt::format("killed by signal {}", code);
}

ChildProcess::ChildProcess(SpawnOptions options, std::string what)
    : what_(std::move(what)), tail_bytes_(options.stderr_tail_bytes) {
  RLCPP_CHECK(!options.argv.empty(), "{}: no program to run", what_);
  ::signal(SIGPIPE, SIG_IGN);  // a dead child must give EPIPE, not kill us
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw_user_error("{}: cannot create pipes: {}", what_, std::strerror(errno));
  }
  // Everything the child needs, built before fork: after it only async-signal-safe calls.
  std::vector<char*> argv;
  for (auto& a : options.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  if (!options.replace_env) {
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  }
  for (const auto& e : options.env) {
    const std::string name = e.substr(0, e.find('=') + 1);
    env_strings.erase(std::remove_if(env_strings.begin(), env_strings.end(),
                                     [&](const std::string& s) { return s.rfind(name, 0) == 0; }),
                      env_strings.end());
    env_strings.push_back(e);
  }
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const bool search_path = options.argv[0].find('/') == std::string::npos;

  pid_ = ::fork();
  if (pid_ < 0) throw_user_error("{}: cannot fork: {}", what_, std::strerror(errno));
  if (pid_ == 0) {
    ::setpgid(0, 0);  // its own process group, so that stopping it stops whatever it started
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(in_pipe[0], 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) {
      static const char message[] = "rlcpp: cannot enter the working directory\n";
      [[maybe_unused]] const ssize_t w = ::write(2, message, sizeof message - 1);
      ::_exit(126);
    }
    if (options.in_child) {
      if (const int rc = options.in_child(); rc != 0) {
        static const char message[] = "rlcpp: setup failed: errno ";
        [[maybe_unused]] const ssize_t w = ::write(2, message, sizeof message - 1);
        write_number(2, rc);
        [[maybe_unused]] const ssize_t w2 = ::write(2, "\n", 1);
        ::_exit(126);
      }
    }
    if (search_path) {
      ::execvpe(argv[0], argv.data(), envp.data());
    } else {
      ::execve(argv[0], argv.data(), envp.data());
    }
    ::_exit(127);
  }
  ::setpgid(pid_, pid_);  // also here: whichever of the two runs first
  group_ = pid_;
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  stdin_ = in_pipe[1];
  stdout_fd_ = out_pipe[0];
  stderr_ = err_pipe[0];
  for (int fd : {stdin_, stdout_fd_, stderr_}) set_nonblocking(fd);
}

ChildProcess::~ChildProcess() { stop(); }

void ChildProcess::drain_stderr() {
  if (stderr_ < 0) return;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(stderr_, buffer, sizeof buffer)) > 0) {
    stderr_tail_.append(buffer, static_cast<size_t>(n));
    stderr_bytes_ += static_cast<uint64_t>(n);
    if (stderr_tail_.size() > tail_bytes_) stderr_tail_.erase(0, stderr_tail_.size() - tail_bytes_);
  }
}

void ChildProcess::reap(bool block) {
  if (pid_ <= 0) return;
  int status = 0;
  rusage used{};
  const pid_t r = ::wait4(pid_, &status, block ? 0 : WNOHANG, &used);
  if (r != pid_) return;
  status_.exited = WIFEXITED(status);
  status_.code = status_.exited ? WEXITSTATUS(status) : WTERMSIG(status);
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * t.tv_usec; };
  usage_.cpu_seconds = seconds(used.ru_utime) + seconds(used.ru_stime);
  usage_.peak_rss_kb = used.ru_maxrss;
  pid_ = -1;
}

ChildProcess::Pump ChildProcess::pump(const std::string& input, size_t* written, double deadline_s) {
  if (pid_ <= 0) return Pump::kExited;
  const bool to_write = stdin_ >= 0 && written != nullptr && *written < input.size();
  pollfd fds[3] = {{stdout_fd_, POLLIN, 0}, {stderr_, POLLIN, 0}, {to_write ? stdin_ : -1, POLLOUT, 0}};
  // At most 50 ms at a time: a child can exit while something it started keeps its pipes open.
  const int wait_ms = static_cast<int>(std::clamp(deadline_s - now_s(), 0.0, 0.05) * 1000.0) + 1;
  const int ready = ::poll(fds, 3, wait_ms);
  if (ready < 0 && errno != EINTR) throw InternalError(fmt::format("{}: poll failed: {}", what_, std::strerror(errno)));
  if (ready > 0) {
    if (to_write && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t n = ::write(stdin_, input.data() + *written, input.size() - *written);
      if (n > 0) *written += static_cast<size_t>(n);
      if (n < 0 && errno != EAGAIN) *written = input.size();  // EPIPE: it will not read the rest
    }
    if (fds[1].revents & (POLLIN | POLLHUP)) drain_stderr();
    if (fds[0].revents & (POLLIN | POLLHUP)) read_stdout();
  }
  reap(/*block=*/false);
  if (pid_ <= 0) {  // it has ended: what it wrote before is still in the pipes
    read_stdout();
    drain_stderr();
    return Pump::kExited;
  }
  return now_s() >= deadline_s ? Pump::kTimeout : Pump::kProgress;
}

void ChildProcess::read_stdout() {
  if (stdout_fd_ < 0) return;
  char buffer[65536];
  ssize_t n;
  while ((n = ::read(stdout_fd_, buffer, sizeof buffer)) > 0) stdout_.append(buffer, static_cast<size_t>(n));
  if (n == 0) {  // closed by the child (and by everything it started)
    ::close(stdout_fd_);
    stdout_fd_ = -1;
  }
}

bool ChildProcess::take_line(std::string* line) {
  const size_t newline = stdout_.find('\n');
  if (newline == std::string::npos) return false;
  line->assign(stdout_, 0, newline);
  stdout_.erase(0, newline + 1);
  return true;
}

void ChildProcess::kill() {
  if (group_ > 0) ::kill(-group_, SIGKILL);
  reap(/*block=*/true);
  group_ = -1;
  drain_stderr();
  close_fds();
}

void ChildProcess::close_stdin() {
  if (stdin_ >= 0) ::close(stdin_);
  stdin_ = -1;
}

void ChildProcess::stop(double grace_s) {
  close_stdin();  // a polite end
  const double until = now_s() + grace_s;
  while (pid_ > 0) {
    reap(/*block=*/false);
    if (pid_ <= 0 || now_s() >= until) break;
    ::usleep(5000);
  }
  // Then a kill if it lingers, and whatever it started and left behind (sh -c "a | b", a program
  // that forked) goes with it.
  kill();
}

void ChildProcess::close_fds() {
  for (int* fd : {&stdin_, &stdout_fd_, &stderr_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

ProcessResult run_process(SpawnOptions options, const std::string& input, const RunBounds& bounds,
                          const std::string& what) {
  ProcessResult result;
  const size_t output_cap = bounds.output_cap;
  options.stderr_tail_bytes = output_cap;
  const double start = now_s(), deadline = start + bounds.timeout_s;
  ChildProcess child(std::move(options), what);
  size_t written = 0;
  for (;;) {
    if (written >= input.size()) child.close_stdin();  // all of it written (or refused): end-of-file
    const auto state = child.pump(input, &written, deadline);
    std::string& out = child.stdout_buffer();
    if (!result.stdout_truncated) {
      const size_t room = output_cap - std::min(output_cap, result.stdout_text.size());
      result.stdout_text.append(out, 0, std::min(room, out.size()));
      result.stdout_truncated = out.size() > room;
    } else if (!out.empty()) {
      result.stdout_truncated = true;
    }
    out.clear();
    if (state == ChildProcess::Pump::kExited) break;
    if (bounds.kill_past_output_cap && (result.stdout_truncated || child.stderr_bytes() > output_cap)) {
      result.output_killed = true;
      break;
    }
    if (state == ChildProcess::Pump::kTimeout || now_s() >= deadline) {
      result.timed_out = true;
      break;
    }
  }
  if ((result.timed_out || result.output_killed) && bounds.end_early) {
    bounds.end_early(child.pid());
    child.stop(/*grace_s=*/1.0);
  }
  child.kill();  // the group, whatever it left running
  result.status = child.exit_status();
  result.usage = child.usage();
  result.stderr_text = child.stderr_tail();
  result.stderr_truncated = child.stderr_bytes() > result.stderr_text.size();
  result.seconds = now_s() - start;
  return result;
}

}  // namespace rlcpp
