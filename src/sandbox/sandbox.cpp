#include "sandbox/sandbox.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "util/error.h"
#include "util/file.h"
#include "util/log.h"

namespace rlcpp {

namespace fs = std::filesystem;

namespace {

constexpr const char* kInsideDir = "/sandbox";  // where the run's directory is seen under bubblewrap

// The limits and the user a run's processes get, applied in the child before exec (only
// async-signal-safe calls: raw system calls, no allocation).
struct ChildSetup {
  rlimit cpu, memory, file_size, open_files, processes;
  bool limit_processes = false;
  bool drop_to_user = false;
  uid_t uid = 0;

  int operator()() const {
    if (::setrlimit(RLIMIT_CPU, &cpu) != 0 || ::setrlimit(RLIMIT_AS, &memory) != 0 ||
        ::setrlimit(RLIMIT_FSIZE, &file_size) != 0 || ::setrlimit(RLIMIT_NOFILE, &open_files) != 0 ||
        ::setrlimit(RLIMIT_CORE, &kNoCore) != 0) {
      return errno;
    }
    if (limit_processes && ::setrlimit(RLIMIT_NPROC, &processes) != 0) return errno;
    if (drop_to_user) {
      // Raw calls: glibc's setuid would try to reach threads that do not exist after fork.
      if (::syscall(SYS_setgroups, 0, nullptr) != 0 || ::syscall(SYS_setresgid, uid, uid, uid) != 0 ||
          ::syscall(SYS_setresuid, uid, uid, uid) != 0) {
        return errno;
      }
    }
    return 0;
  }
  static constexpr rlimit kNoCore{0, 0};
};

rlim_t mb(int64_t n) { return static_cast<rlim_t>(std::max<int64_t>(n, 1)) << 20; }

ChildSetup child_setup(const SandboxLimits& limits, bool own_user, uid_t uid) {
  ChildSetup s{};
  const auto cpu = static_cast<rlim_t>(std::max(1.0, std::ceil(limits.cpu_seconds)));
  s.cpu = {cpu, cpu + 1};  // SIGXCPU at the limit, SIGKILL a second later if it is ignored
  s.memory = {mb(limits.memory_mb), mb(limits.memory_mb)};
  s.file_size = {mb(limits.file_size_mb), mb(limits.file_size_mb)};
  const auto files = static_cast<rlim_t>(std::max<int64_t>(limits.open_files, 16));
  s.open_files = {files, files};
  // bubblewrap's own two processes count against the user too.
  const auto processes = static_cast<rlim_t>(std::max<int64_t>(limits.processes, 1) + 2);
  s.processes = {processes, processes};
  s.limit_processes = own_user;  // without a user of its own the count would include rlcpp's threads
  s.drop_to_user = own_user;
  s.uid = uid;
  return s;
}

// Kills every process `uid` runs (what escaped the process group: setsid, double fork), from a
// child that becomes that user: kill(-1) reaches exactly the processes it may signal.
void kill_user(uid_t uid) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::syscall(SYS_setresgid, uid, uid, uid) == 0 && ::syscall(SYS_setresuid, uid, uid, uid) == 0) {
      for (int round = 0; round < 3; ++round) ::kill(-1, SIGKILL);  // again: a fork may have raced the first
    }
    ::_exit(0);
  }
  if (pid > 0) ::waitpid(pid, nullptr, 0);
}

// The processes whose parent is `pid` (from /proc).
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const pid_t candidate = static_cast<pid_t>(std::atol(entry.path().filename().c_str()));
    if (candidate <= 0) continue;
    std::string stat;
    try {
      stat = read_file(entry.path() / "stat", "stat");
    } catch (const UserError&) {
      continue;  // gone meanwhile
    }
    const size_t paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 4 < stat.size() && std::atol(stat.c_str() + paren + 4) == pid) {
      out.push_back(candidate);
    }
  }
  return out;
}

// The bubblewrap command line that runs `argv` in `dir`: new namespaces, a read-only view of
// what interpreters need, the run's directory the only writable place.
std::vector<std::string> bwrap_argv(const std::string& bwrap, const std::string& dir,
                                    const std::vector<std::string>& argv) {
  std::vector<std::string> a = {bwrap, "--unshare-all", "--as-pid-1", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
                                "--hostname", "sandbox", "--ro-bind", "/usr", "/usr"};
  for (const char* top : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    std::error_code ec;
    const auto status = fs::symlink_status(top, ec);
    if (ec || !fs::exists(status)) continue;
    if (fs::is_symlink(status)) {
      a.insert(a.end(), {"--symlink", fs::read_symlink(top, ec).string(), top});  // merged /usr: bin -> usr/bin
    } else if (fs::is_directory(status)) {
      a.insert(a.end(), {"--ro-bind", top, top});
    }
  }
  // The loader's cache and the time zone: no secrets, and interpreters start faster with them.
  for (const char* etc : {"/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives"}) {
    a.insert(a.end(), {"--ro-bind-try", etc, etc});
  }
  a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev", "--bind", dir, kInsideDir, "--remount-ro", "/", "--chdir",
                     kInsideDir});
  a.insert(a.end(), argv.begin(), argv.end());
  return a;
}

std::vector<std::string> minimal_env(const std::string& home) {
  return {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + home, "LANG=C.UTF-8", "LC_ALL=C.UTF-8"};
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string temp_root() {
  const char* env = std::getenv("TMPDIR");
  return env != nullptr && *env != '\0' ? env : "/tmp";
}

// Removes a run's directory, whatever modes the program left on what it made.
void remove_tree(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (!ec) return;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    ::chmod(it->path().c_str(), 0700);
  }
  ::chmod(dir.c_str(), 0700);
  fs::remove_all(dir, ec);
  if (ec) spdlog::warn("sandbox: cannot remove {}: {}", dir.string(), ec.message());
}

// A run of `argv` in `dir` as a slot's sandboxed run would be, used to find what works.
ProcessResult try_run(const SandboxIsolation& iso, const std::string& dir, const std::vector<std::string>& argv) {
  SpawnOptions spawn;
  spawn.argv = iso.namespaces ? bwrap_argv(iso.bwrap, dir, argv) : argv;
  spawn.cwd = dir;
  spawn.env = minimal_env(iso.namespaces ? kInsideDir : dir);
  spawn.replace_env = true;
  spawn.in_child = child_setup(SandboxLimits{}, iso.own_user, sandbox_uid(kMaxSandboxSlots - 1));
  return run_process(spawn, "", RunBounds{10.0, 4096}, "sandbox probe");
}

SandboxIsolation probe_isolation() {
  SandboxIsolation iso;
  std::string dir = temp_root() + "/rlcpp-sandbox-probe-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) {
    throw_user_error("sandbox: cannot make a directory in {}: {} (set TMPDIR to a writable place)", temp_root(),
                     std::strerror(errno));
  }
  ::chmod(dir.c_str(), 0777);
  const std::vector<std::string> probe = {"/bin/sh", "-c", "exit 0"};

  if (::geteuid() == 0) {
    iso.own_user = true;
    const auto r = try_run(iso, dir, probe);
    if (!r.status.ok()) {
      iso.own_user = false;
      iso.missing.push_back(fmt::format("a user of its own per slot: cannot become uid {} ({}); a fork bomb is "
                                        "bounded by the time limit only", sandbox_uid(kMaxSandboxSlots - 1),
                                        r.status.describe()));
    }
  } else {
    iso.missing.push_back("a user of its own per slot (needs root): processes are bounded by the time limit only, "
                          "and without namespaces a program could signal rlcpp's other processes");
  }
  for (const char* candidate : {"/usr/bin/bwrap", "/bin/bwrap", "/usr/local/bin/bwrap"}) {
    if (::access(candidate, X_OK) == 0) {
      iso.bwrap = candidate;
      break;
    }
  }
  if (iso.bwrap.empty()) {
    iso.missing.push_back("namespaces: bubblewrap not found (apt-get install bubblewrap); programs see the file "
                          "system as the sandbox user and share the network");
  } else {
    iso.namespaces = true;
    const auto r = try_run(iso, dir, probe);
    if (!r.status.ok()) {
      iso.namespaces = false;
      std::string why = r.stderr_text;
      while (!why.empty() && std::isspace(static_cast<unsigned char>(why.back()))) why.pop_back();
      iso.missing.push_back(fmt::format("namespaces: bubblewrap cannot make them here ({}: {}); programs see the file "
                                        "system as the sandbox user and share the network",
                                        r.status.describe(), why));
    }
  }
  remove_tree(dir);
  return iso;
}

}  // namespace

uint32_t sandbox_uid(int slot) {
  RLCPP_CHECK(slot >= 0 && slot < kMaxSandboxSlots, "sandbox slot {} of at most {}", slot, kMaxSandboxSlots);
  return kSandboxUidBase + 256u * static_cast<uint32_t>(::getpid()) + static_cast<uint32_t>(slot);
}

const std::vector<SandboxLanguage>& sandbox_languages() {
  static const std::vector<SandboxLanguage> table = {
      {"python", {"py", "python3"}, "main.py", {"/usr/bin/python3", "-I", "-B"}},  // -I: no user site, no PYTHON*
      {"sh", {"bash", "shell"}, "main.sh", {"/bin/sh"}},
  };
  return table;
}

const SandboxLanguage* find_sandbox_language(const std::string& name) {
  const std::string key = lower(name);
  for (const auto& language : sandbox_languages()) {
    if (language.name == key || std::find(language.aliases.begin(), language.aliases.end(), key) != language.aliases.end()) {
      return &language;
    }
  }
  return nullptr;
}

const char* sandbox_stop_name(SandboxStop stop) {
  switch (stop) {
    case SandboxStop::kNone: return "none";
    case SandboxStop::kWallLimit: return "wall_limit";
    case SandboxStop::kCpuLimit: return "cpu_limit";
    case SandboxStop::kOutputLimit: return "output_limit";
  }
  return "?";
}

std::string SandboxIsolation::describe() const {
  std::string out = fmt::format("sandbox: {} namespaces{}, {}", namespaces ? "bubblewrap" : "no",
                                namespaces ? " (user, mount, PID, network, IPC, UTS, cgroup)" : "",
                                own_user ? "a user of its own per slot" : "rlcpp's own user");
  out += "; rlimits on CPU, address space, file size, open files" + std::string(own_user ? ", processes" : "");
  for (const auto& m : missing) out += "\n  without " + m;
  return out;
}

const SandboxIsolation& sandbox_isolation() {
  static const SandboxIsolation iso = [] {
    SandboxIsolation found = probe_isolation();
    for (const auto& m : found.missing) spdlog::warn("sandbox: running without {}", m);
    return found;
  }();
  return iso;
}

Sandbox::Sandbox(int slot, const std::string& root) : slot_(slot) {
  std::string pattern = (root.empty() ? temp_root() : root) + "/rlcpp-sandbox-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw_user_error("sandbox: cannot make a directory in {}: {} (set TMPDIR to a writable place)",
                     root.empty() ? temp_root() : root, std::strerror(errno));
  }
  ::chmod(pattern.c_str(), 0711);  // the slot's user may pass through to its run, not list the others
  root_ = pattern;
}

Sandbox::~Sandbox() { remove_tree(root_); }

SandboxResult Sandbox::run(const SandboxRun& run) {
  const SandboxLanguage* language = find_sandbox_language(run.language);
  if (language == nullptr) throw_user_error("sandbox: no language '{}' (known: python, sh)", run.language);
  if (::access(language->argv[0].c_str(), X_OK) != 0) {
    throw_user_error("sandbox: {} needs {}, which this machine lacks (apt-get install {})", language->name,
                     language->argv[0], language->name == "python" ? "python3" : language->name);
  }
  const SandboxIsolation& iso = sandbox_isolation();
  const uid_t uid = sandbox_uid(slot_);
  const fs::path dir = fs::path(root_) / fmt::format("run-{}", n_runs_++);
  fs::create_directory(dir);
  ::chmod(dir.c_str(), 0700);
  auto write = [&](const std::string& name, const std::string& content) {
    RLCPP_CHECK(name.find('/') == std::string::npos && name != ".." && !name.empty(), "sandbox file name '{}'", name);
    write_file_atomic((dir / name).string(), content);
    if (iso.own_user) RLCPP_CHECK(::chown((dir / name).c_str(), uid, uid) == 0, "chown {}", (dir / name).string());
  };
  write(language->file_name, run.source);
  for (const auto& [name, content] : run.files) write(name, content);
  if (iso.own_user) RLCPP_CHECK(::chown(dir.c_str(), uid, uid) == 0, "chown {}", dir.string());

  std::vector<std::string> argv = language->argv;
  argv.push_back(language->file_name);
  SpawnOptions spawn;
  spawn.argv = iso.namespaces ? bwrap_argv(iso.bwrap, dir.string(), argv) : argv;
  spawn.cwd = dir.string();
  spawn.env = minimal_env(iso.namespaces ? kInsideDir : dir.string());
  spawn.replace_env = true;
  spawn.in_child = child_setup(run.limits, iso.own_user, uid);
  RunBounds bounds{run.limits.wall_seconds, run.limits.output_bytes, /*kill_past_output_cap=*/true, {}};
  if (iso.namespaces) {
    // The program is bubblewrap's child (PID 1 of its namespace: the rest die with it); bubblewrap
    // reaps it, so its CPU time and peak memory come back with bubblewrap's exit.
    bounds.end_early = [](pid_t bwrap) {
      for (const pid_t program : children_of(bwrap)) ::kill(program, SIGKILL);
    };
  }
  ProcessResult p = run_process(std::move(spawn), run.stdin_text, bounds, "sandbox");
  if (iso.own_user) kill_user(uid);  // whatever escaped the process group and the namespaces

  SandboxResult r;
  r.status = p.status;
  if (iso.namespaces && r.status.exited && r.status.code > 128 && r.status.code < 128 + 65) {
    r.status = ExitStatus{false, r.status.code - 128};  // bubblewrap's report of a signal
  }
  r.setup_failed = p.status.exited && p.status.code == 126 && p.stderr_text.rfind("rlcpp: setup failed", 0) == 0;
  r.stdout_text = std::move(p.stdout_text);
  r.stderr_text = std::move(p.stderr_text);
  r.wall_seconds = p.seconds;
  r.cpu_seconds = p.usage.cpu_seconds;
  r.peak_memory_kb = p.usage.peak_rss_kb;
  if (p.timed_out) {
    r.stopped_by = SandboxStop::kWallLimit;
  } else if (p.output_killed) {
    r.stopped_by = SandboxStop::kOutputLimit;
  } else if (!r.status.exited && (r.status.code == SIGXCPU ||
                                  (r.status.code == SIGKILL && r.cpu_seconds >= run.limits.cpu_seconds * 0.9))) {
    r.stopped_by = SandboxStop::kCpuLimit;
  }
  remove_tree(dir);
  return r;
}

}  // namespace rlcpp
