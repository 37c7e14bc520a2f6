// The sandbox: runs an untrusted program (the policy's code) in a child process that it cannot
// escape, within limits it cannot raise, and leaves nothing of it behind. Pure mechanism on top of
// process/: it knows languages and limits, not tests or rewards.
//
// Each run gets a fresh private directory (its only writable place, and its working directory)
// with the program written into it. Where the kernel allows it, the program runs under bubblewrap
// in new user, mount, PID, network, IPC, UTS and cgroup namespaces: it sees a read-only /usr (and
// the /bin, /lib symlinks or binds), a private /proc and /dev, its directory at /sandbox, no
// network but its own loopback, and nothing of the run, the models or /etc. When rlcpp runs as
// root, each pool slot also runs as a user of its own (sandbox_uid), so RLIMIT_NPROC
// bounds a fork bomb and everything that user still runs is killed after each run. Always: rlimits
// on CPU seconds, address space, file size, open files and processes, a wall-clock limit, a cap on
// captured output (the run is killed past it), a minimal environment, and the whole process group
// killed at the end. What the machine does not allow is said once (sandbox_isolation()).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "process/child_process.h"

namespace rlcpp {

struct SandboxLimits {
  double wall_seconds = 10.0;     // wall-clock limit; the whole run is killed at it
  double cpu_seconds = 10.0;      // RLIMIT_CPU of each process (SIGXCPU, SIGKILL a second later)
  int64_t memory_mb = 1024;       // RLIMIT_AS: address space of each process
  int64_t file_size_mb = 64;      // RLIMIT_FSIZE: the largest file it may write
  int64_t open_files = 64;        // RLIMIT_NOFILE
  int64_t processes = 32;         // RLIMIT_NPROC of its own user (when it has one: rlcpp as root)
  size_t output_bytes = 1 << 20;  // stdout and stderr each; the run is killed past it
};

// How a language's program runs: its source is written to `file_name` in the run's directory and
// `argv` (with the file name appended) is executed there.
struct SandboxLanguage {
  std::string name;                // as in a code fence: "python"
  std::vector<std::string> aliases;  // other fence names: "py", "python3"
  std::string file_name;           // "main.py"
  std::vector<std::string> argv;   // the interpreter and its flags
};
const std::vector<SandboxLanguage>& sandbox_languages();
// The language a fence or dataset names (case-insensitive, aliases too); nullptr when none.
const SandboxLanguage* find_sandbox_language(const std::string& name);

struct SandboxRun {
  std::string language = "python";
  std::string source;  // the program, written to the language's file
  std::string stdin_text;
  std::vector<std::pair<std::string, std::string>> files;  // more files beside it: (name, content)
  SandboxLimits limits;
};

// What stopped a run before it ended by itself (a memory or file-size limit shows as the program's
// own error: an allocation or a write that fails).
enum class SandboxStop { kNone, kWallLimit, kCpuLimit, kOutputLimit };
const char* sandbox_stop_name(SandboxStop stop);

struct SandboxResult {
  ExitStatus status;  // of the program (bubblewrap's 128+N is read back as signal N)
  std::string stdout_text, stderr_text;  // stdout's first and stderr's last limits.output_bytes
  SandboxStop stopped_by = SandboxStop::kNone;
  double wall_seconds = 0, cpu_seconds = 0;
  // The largest resident set of the run's processes; rlcpp's own forked pages count until the
  // exec, so it is at least about rlcpp's resident set at the time.
  int64_t peak_memory_kb = 0;
  bool setup_failed = false;  // the sandbox could not start it (rlcpp's fault, not the program's)
};

// What isolation this machine gives, found once by trying it.
struct SandboxIsolation {
  bool namespaces = false;  // bubblewrap works: user, mount, PID, network, ... namespaces
  bool own_user = false;    // each slot runs as a user of its own (rlcpp is root)
  std::string bwrap;        // bubblewrap's path ("" when not found)
  std::vector<std::string> missing;  // what it could not get, and why
  std::string describe() const;      // lines for `rlcpp info --system`
};
const SandboxIsolation& sandbox_isolation();

// The user (and group) a slot runs as when rlcpp runs as root: kSandboxUidBase + 256 × rlcpp's
// pid + slot, unique to the slot among every rlcpp process on the machine (pids stay under 2^22).
constexpr uint32_t kSandboxUidBase = 1977000000;
constexpr int kMaxSandboxSlots = 256;
uint32_t sandbox_uid(int slot);

// One slot of sandboxed runs: its runs go one at a time (a pool holds one per worker).
class Sandbox {
 public:
  // `root`: where the runs' private directories are made ("": $TMPDIR, else /tmp).
  explicit Sandbox(int slot = 0, const std::string& root = "");
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  SandboxResult run(const SandboxRun& run);

 private:
  int slot_;
  std::string root_;  // this slot's directory; each run gets a fresh one inside
  int64_t n_runs_ = 0;
};

}  // namespace rlcpp
