// Child processes: spawned in a process group of their own with pipes to their stdin, stdout and
// stderr, pumped without blocking against a deadline, and ended with everything they started.
// The mechanism under the external reward (one long-lived child speaking JSON lines), the sandbox
// (one short-lived child per program, with limits applied in the child before exec) and external
// environments. It knows nothing of what the bytes mean.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rlcpp {

struct SpawnOptions {
  // The program and its arguments (argv[0] is looked up on PATH when it has no '/'); see shell().
  std::vector<std::string> argv;
  std::string cwd;                         // working directory ("": the parent's)
  std::vector<std::string> env;            // "NAME=value" entries; empty: the parent's environment
  bool replace_env = false;                // true: `env` is the whole environment, not added to the parent's
  // Runs in the child after fork, before exec (rlimits, namespaces, dropping privileges): only
  // async-signal-safe calls. A non-zero return ends the child with exit status 126 before exec,
  // the return value written to stderr as "rlcpp: setup failed: errno N".
  std::function<int()> in_child;
  size_t stderr_tail_bytes = 4096;         // the end of stderr kept for error messages
};

// `/bin/sh -c command`, as --reward-cmd runs its command.
SpawnOptions shell(const std::string& command);

// How a child ended.
struct ExitStatus {
  bool exited = false;  // by exit(); else by a signal
  int code = 0;         // exit status, or the signal number
  bool ok() const { return exited && code == 0; }
  std::string describe() const;  // "exit status 3", "killed by signal 9 (SIGKILL)"
};

// What a reaped child used, with the descendants it waited for (wait4's rusage).
struct ResourceUsage {
  double cpu_seconds = 0;   // user + system
  int64_t peak_rss_kb = 0;  // the largest resident set of the child or a waited-for descendant
};

class ChildProcess {
 public:
  // Starts the child; a fork or pipe failure throws a UserError naming `what` (e.g. "--reward-cmd").
  ChildProcess(SpawnOptions options, std::string what);
  ~ChildProcess();  // ends it as stop() does
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }

  enum class Pump { kProgress, kTimeout, kExited };
  // One short wait for the child (at most 50 ms, or until `deadline_s`, a now_s() time): writes
  // what the stdin pipe takes of `input` from `*written` on (advancing it), appends what stdout
  // has to stdout_buffer(), keeps stderr's tail. kExited once the child has ended (exit_status()
  // says how; what it wrote before is in the buffers), kTimeout once the deadline has passed.
  Pump pump(const std::string& input, size_t* written, double deadline_s);

  // Bytes read from stdout and not yet taken; take_line() removes and returns one complete line
  // (without its '\n'), or false when none is complete.
  std::string& stdout_buffer() { return stdout_; }
  bool take_line(std::string* line);
  const std::string& stderr_tail() const { return stderr_tail_; }
  uint64_t stderr_bytes() const { return stderr_bytes_; }  // all of stderr so far, kept or not
  const ExitStatus& exit_status() const { return status_; }
  const ResourceUsage& usage() const { return usage_; }  // once it has ended

  // Closes the child's stdin: it reads end-of-file.
  void close_stdin();
  // Closes stdin (a polite end), waits up to `grace_s` for the child to exit, then kills its
  // whole process group (whatever it started goes with it) and reaps it. Idempotent.
  void stop(double grace_s = 0.1);
  // Kills the process group at once and reaps the child.
  void kill();

 private:
  void reap(bool block);
  void read_stdout();
  void drain_stderr();
  void close_fds();

  std::string what_;
  size_t tail_bytes_;
  pid_t pid_ = -1, group_ = -1;
  int stdin_ = -1, stdout_fd_ = -1, stderr_ = -1;
  std::string stdout_, stderr_tail_;
  uint64_t stderr_bytes_ = 0;
  ExitStatus status_;
  ResourceUsage usage_;
};

// Seconds on the steady clock (for pump deadlines).
double now_s();

// The bounds of run_process.
struct RunBounds {
  double timeout_s = 10.0;          // wall-clock limit: the process group is killed at it
  size_t output_cap = 1 << 20;      // bytes kept of stdout (its first) and of stderr (its last)
  bool kill_past_output_cap = false;  // kill once stdout or stderr passes the cap; else read and drop the rest
  // Ends a child stopped early (time or output) before its group is killed; the child then has a
  // second to exit by itself. The sandbox kills the program under bubblewrap here, so that
  // bubblewrap reaps it and its figures (ResourceUsage) come back.
  std::function<void(pid_t child)> end_early;
};

// A program run to its end: `input` on its stdin (then end-of-file), its output captured within
// the bounds (the rest read and dropped, so the child never blocks on a full pipe, unless it is
// killed for it), the whole process group killed when the child exits or at the time limit.
struct ProcessResult {
  ExitStatus status;
  ResourceUsage usage;
  std::string stdout_text, stderr_text;
  bool stdout_truncated = false, stderr_truncated = false;
  bool timed_out = false;      // killed at the wall-clock limit
  bool output_killed = false;  // killed for output past the cap (kill_past_output_cap)
  double seconds = 0;          // wall-clock time from start to end
};
ProcessResult run_process(SpawnOptions options, const std::string& input, const RunBounds& bounds,
                          const std::string& what);

}  // namespace rlcpp
