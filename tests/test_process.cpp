// The process layer: children in their own process group, pumped against deadlines, their output
// capped, and nothing they start left behind.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <thread>

#include "process/child_process.h"
#include "test_util.h"
#include "util/error.h"

using namespace rlcpp;

namespace {

// Whether process `pid` has ended: gone, or a zombie its new parent has not reaped yet (an orphan
// waits for init, which may take its time). Waits up to 5 s.
bool gone(pid_t pid) {
  for (int k = 0; k < 500; ++k) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    if (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

TEST(RunProcess, FeedsStdinAndCapturesStdoutAndStatus) {
  const auto r = run_process(shell("cat; echo done >&2; exit 3"), "hello\nworld\n", {10, 1 << 20}, "test");
  EXPECT_EQ(r.stdout_text, "hello\nworld\n");
  EXPECT_EQ(r.stderr_text, "done\n");
  EXPECT_TRUE(r.status.exited);
  EXPECT_EQ(r.status.code, 3);
  EXPECT_EQ(r.status.describe(), "exit status 3");
  EXPECT_FALSE(r.timed_out || r.stdout_truncated || r.stderr_truncated);
}

TEST(RunProcess, CapsOutputWithoutBlockingTheChild) {
  // 4 MB through a 64 KB pipe: the child finishes only if the parent keeps reading past the cap.
  const auto r = run_process(shell("head -c 4000000 /dev/zero; head -c 100000 /dev/zero >&2"), "", {30, 1000}, "test");
  EXPECT_TRUE(r.status.ok()) << r.status.describe();
  EXPECT_EQ(r.stdout_text.size(), 1000u);
  EXPECT_TRUE(r.stdout_truncated);
  EXPECT_EQ(r.stderr_text.size(), 1000u);
  EXPECT_TRUE(r.stderr_truncated);
}

TEST(RunProcess, KillsAtTheWallClockLimit) {
  const auto r = run_process(shell("echo started; sleep 30"), "", {0.3, 1000}, "test");
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.status.exited);
  EXPECT_EQ(r.status.code, SIGKILL);
  EXPECT_EQ(r.status.describe(), "killed by signal 9 (SIGKILL)");
  EXPECT_EQ(r.stdout_text, "started\n");
  EXPECT_LT(r.seconds, 10.0);  // not 30: a bound on a hang, not a timing assertion
}

TEST(RunProcess, LeavesNothingOfTheProcessGroupBehind) {
  // The shell exits at once; the sleep it started in the background holds stdout open.
  const auto r = run_process(shell("sleep 30 & echo $!"), "", {20, 1000}, "test");
  EXPECT_FALSE(r.timed_out);
  const pid_t background = std::stoi(r.stdout_text);
  EXPECT_TRUE(gone(background)) << "the background sleep " << background << " outlived its process group";
}

TEST(RunProcess, SetupInTheChildAndItsFailure) {
  SpawnOptions limited = shell("ulimit -n");
  limited.in_child = [] {
    rlimit files{16, 16};
    return ::setrlimit(RLIMIT_NOFILE, &files) == 0 ? 0 : errno;
  };
  EXPECT_EQ(run_process(limited, "", {10, 100}, "test").stdout_text, "16\n");
  SpawnOptions failing = shell("echo never");
  failing.in_child = [] { return 13; };
  const auto r = run_process(failing, "", {10, 100}, "test");
  EXPECT_EQ(r.status.code, 126);
  EXPECT_EQ(r.stdout_text, "");
  EXPECT_EQ(r.stderr_text, "rlcpp: setup failed: errno 13\n");
}

TEST(RunProcess, EnvironmentAndWorkingDirectory) {
  rlcpp::testing::TempDir dir;
  SpawnOptions o = shell("echo \"$GREETING:$(pwd):${HOME:-none}\"");
  o.env = {"GREETING=hi", "PATH=/usr/bin:/bin"};
  o.replace_env = true;
  o.cwd = dir.path().string();
  EXPECT_EQ(run_process(o, "", {10, 1000}, "test").stdout_text,
            "hi:" + std::filesystem::canonical(dir.path()).string() + ":none\n");
  SpawnOptions missing;
  missing.argv = {"/nonexistent/program"};
  EXPECT_EQ(run_process(missing, "", {10, 100}, "test").status.code, 127);
}

TEST(ChildProcess, SpeaksLinesAndStops) {
  ChildProcess child(shell("while read line; do echo \"got $line\"; done"), "test");
  const std::string input = "a\nb\n";
  size_t written = 0;
  std::vector<std::string> lines;
  const double deadline = now_s() + 10;
  std::string line;
  while (lines.size() < 2 && now_s() < deadline) {
    ASSERT_NE(child.pump(input, &written, deadline), ChildProcess::Pump::kExited);
    while (child.take_line(&line)) lines.push_back(line);
  }
  EXPECT_EQ(lines, (std::vector<std::string>{"got a", "got b"}));
  const pid_t pid = child.pid();
  child.stop();  // stdin closes: the loop ends by itself
  EXPECT_FALSE(child.running());
  EXPECT_TRUE(child.exit_status().ok()) << child.exit_status().describe();
  EXPECT_TRUE(gone(pid));
  EXPECT_EQ(child.pump("", nullptr, now_s() + 1), ChildProcess::Pump::kExited);
}
