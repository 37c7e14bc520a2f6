// The sandbox and the code reward: programs graded right, and hostile programs (fork bombs, huge
// allocations and files, sockets, reading secrets, killing everything) stopped with the right
// verdict, nothing of them left running, nothing changed outside their directory, and the pool
// still working after each.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <thread>

#include "io/prompt_dataset.h"
#include "reward/code_reward.h"
#include "reward/reward_function.h"
#include "rl/rollout/rollout.h"
#include "sandbox/sandbox_pool.h"
#include "test_util.h"
#include "util/error.h"

using namespace rlcpp;
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The pids of this process's live (not zombie) descendants.
std::set<pid_t> live_descendants() {
  std::map<pid_t, pid_t> parent;
  std::set<pid_t> zombies;
  DIR* proc = ::opendir("/proc");
  for (dirent* e; (e = ::readdir(proc)) != nullptr;) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const std::string stat = read_all(fs::path("/proc") / e->d_name / "stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 4 >= stat.size()) continue;
    if (stat[paren + 2] == 'Z') zombies.insert(pid);
    parent[pid] = static_cast<pid_t>(std::atoi(stat.c_str() + paren + 4));
  }
  ::closedir(proc);
  std::set<pid_t> out;
  for (const auto& [pid, ppid] : parent) {
    for (pid_t p = ppid; p > 1; p = parent.count(p) ? parent[p] : 0) {
      if (p == ::getpid()) {
        if (!zombies.count(pid)) out.insert(pid);
        break;
      }
    }
  }
  return out;
}

// Processes still running as a uid in [first, last] (the sandbox's users, when rlcpp is root),
// zombies aside.
int64_t processes_of(uid_t first, uid_t last) {
  int64_t n = 0;
  DIR* proc = ::opendir("/proc");
  for (dirent* e; (e = ::readdir(proc)) != nullptr;) {
    if (std::atoi(e->d_name) <= 0) continue;
    const std::string status = read_all(fs::path("/proc") / e->d_name / "status");
    const size_t uid_at = status.find("\nUid:");
    const size_t state_at = status.find("\nState:");
    if (uid_at == std::string::npos || state_at == std::string::npos) continue;
    if (status[state_at + 8] == 'Z') continue;
    const auto uid = static_cast<uid_t>(std::atoll(status.c_str() + uid_at + 5));
    if (uid >= first && uid <= last) ++n;
  }
  ::closedir(proc);
  return n;
}

// Nothing of a run left: no descendant of this process and (as root) nothing of any slot's user.
// Waits up to 5 s: killed processes take a moment to go.
void expect_nothing_left(const std::string& what) {
  bool clean = false;
  for (int k = 0; k < 100 && !clean; ++k) {
    clean = live_descendants().empty();
    if (sandbox_isolation().own_user) clean = clean && processes_of(sandbox_uid(0), sandbox_uid(kMaxSandboxSlots - 1)) == 0;
    if (!clean) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(clean) << what << ": processes were left behind";
}

RewardInput code_task(const std::string& program, nlohmann::json tests) {
  RewardInput in;
  in.response = "Here it is:\n```python\n" + program + "\n```\n";
  in.metadata = std::move(tests);
  return in;
}

nlohmann::json asserts(const std::string& code) { return {{"test_code", code}}; }

CodeRewardOptions small_limits() {
  CodeRewardOptions o;
  o.workers = 2;
  o.time_limit = 3.0;  // a bound for the hostile programs, far above what the honest ones need
  o.memory_mb = 512;
  return o;
}

}  // namespace

TEST(CodeBlocks, TheLastFencedBlockWithItsLanguage) {
  auto b = extract_last_code_block("first\n```py\nx = 1\n```\nthen\n```Python3 title\nprint(2)\n```\nbye");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->language, "python3");
  EXPECT_EQ(b->code, "print(2)\n");
  b = extract_last_code_block("```\nprint(3)");  // unclosed: runs to the end
  ASSERT_TRUE(b);
  EXPECT_EQ(b->code, "print(3)");
  EXPECT_EQ(b->language, "");
  EXPECT_FALSE(extract_last_code_block("no code at all"));
  EXPECT_FALSE(extract_last_code_block("```python\n\n```"));  // empty
  EXPECT_FALSE(extract_last_code_block("inline ``` fences ``` only"));
}

TEST(CodeBlocks, OutputIsComparedWithoutTrailingWhitespace) {
  EXPECT_EQ(normalize_output("1 \n2\t\r\n\n\n"), normalize_output("1\n2"));
  EXPECT_NE(normalize_output("1\n2"), normalize_output("1\n 2"));
}

TEST(CodeTests, MalformedTestsAreClearErrors) {
  auto message = [](const nlohmann::json& m) {
    try {
      parse_code_tests(m);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(nlohmann::json::object()).find("needs \"tests\""), std::string::npos);
  EXPECT_NE(message({{"tests", "print"}}).find("non-empty list"), std::string::npos);
  EXPECT_NE(message({{"tests", {{{"stdin", "1"}}}}}).find("tests[0]"), std::string::npos);
  EXPECT_NE(message({{"test_code", ""}}).find("non-empty string"), std::string::npos);
  EXPECT_NE(message({{"test_code", "assert 1"}, {"entry_point", "f()"}}).find("function name"), std::string::npos);
  EXPECT_NE(message({{"test_code", "assert 1"}, {"time_limit", -1}}).find("positive"), std::string::npos);
  EXPECT_NE(message({{"tests", {{{"stdout", "1"}}}}, {"language", "cobol"}}).find("cobol"), std::string::npos);
  EXPECT_EQ(message({{"tests", {{{"stdout", "1"}}}}, {"time_limit", 2}, {"memory_limit_mb", 64}}), "no error");
}

TEST(CodeTests, AMalformedRecordNamesItsLineOrIsSkipped) {
  rlcpp::testing::TempDir dir;
  const fs::path data = dir / "code.jsonl";
  std::ofstream(data) << R"({"messages": [{"role": "user", "content": "a"}], "test_code": "assert f(1) == 1"})" << "\n"
                      << R"({"messages": [{"role": "user", "content": "b"}], "tests": [{"stdin": "1"}]})" << "\n";
  RewardOptions options;
  options.type = RewardType::kCode;
  const RewardFunction reward = make_reward_function(options);
  try {
    load_prompt_dataset(data, checked_by(reward));
    FAIL() << "a record without expected output loaded";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("code.jsonl:2: tests[0] must be"), std::string::npos) << e.what();
  }
  DatasetOptions skip;
  skip.skip_bad_lines = true;
  const auto dataset = load_prompt_dataset(data, checked_by(reward, skip));
  EXPECT_EQ(dataset.records.size(), 1u);
  EXPECT_EQ(dataset.n_bad_lines, 1);
  // Graded anyway (rlcpp grade, or a record that reached the reward): 0 with its reason.
  const auto scores = CodeReward(small_limits()).score({code_task("x = 1", {{"tests", "bad"}})});
  EXPECT_EQ(scores[0].value, 0.0);
  EXPECT_EQ(scores[0].reason, "bad_tests");
}

TEST(CodeReward, VerdictsOfOrdinaryPrograms) {
  CodeReward reward(small_limits());
  const auto io = nlohmann::json{{"tests", {{{"stdin", "2 3\n"}, {"stdout", "5\n"}}, {{"stdin", "10 -4"}, {"stdout", "6"}}}}};
  std::vector<RewardInput> inputs = {
      code_task("a, b = map(int, input().split())\nprint(a + b)   ", io),                        // passed
      code_task("a, b = map(int, input().split())\nprint(a * b)", io),                           // wrong_answer
      code_task("def f(x):\n    return x + 1", asserts("assert f(1) == 2\nassert f(-1) == 0")),  // passed
      code_task("def f(x):\n    return x + 1", asserts("assert f(1) == 2\nassert f(2) == 4")),   // one of two
      code_task("def f(x) return x", asserts("assert f(1) == 1")),                               // syntax
      code_task("def f(x):\n    return 1 // 0", asserts("assert f(1) == 1")),                    // runtime_error
      code_task("import os\nos._exit(0)", asserts("assert False")),  // ends before its tests: they fail
      {"", "no fence here", "", asserts("assert True")},             // no_code
      code_task("def g(a):\n    return a * 2",
                {{"test_code", "def check(candidate):\n    assert candidate(3) == 6\n"}, {"entry_point", "g"}}),
  };
  const auto grades = reward.grade(inputs);
  const std::vector<std::string> expected = {"passed",        "wrong_answer",  "passed",  "wrong_answer", "syntax",
                                             "runtime_error", "runtime_error", "no_code", "passed"};
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(code_verdicts().name(grades[k].verdict), expected[k]) << "input " << k << ": " << grades[k].to_json().dump();
    EXPECT_EQ(grades[k].reward, expected[k] == "passed" ? 1.0 : 0.0) << "input " << k;
  }
  EXPECT_EQ(grades[3].n_passed, 1);
  EXPECT_EQ(grades[3].n_tests, 2);
  EXPECT_NE(grades[1].tests[0].detail.find("expected \"5\" got \"6\""), std::string::npos) << grades[1].tests[0].detail;

  CodeRewardOptions fraction = small_limits();
  fraction.mode = CodeRewardMode::kFraction;
  EXPECT_DOUBLE_EQ(CodeReward(fraction).grade({inputs[3]})[0].reward, 0.5);
}

TEST(CodeReward, ThroughTheRewardFunctionWithReasonAndDetails) {
  RewardOptions options;
  options.type = RewardType::kCode;
  options.code = small_limits();
  const auto results = make_reward_function(options).score(
      {code_task("print(input()[::-1])", {{"tests", {{{"stdin", "abc"}, {"stdout", "cba"}}}}})});
  EXPECT_EQ(results[0].reward, 1.0);
  EXPECT_TRUE(results[0].correct);
  EXPECT_EQ(results[0].reason, "passed");
  const auto details = nlohmann::json::parse(results[0].details);
  EXPECT_EQ(details["tests"], 1);
  EXPECT_EQ(details["results"][0]["verdict"], "passed");
}

// Each hostile program: its verdict, nothing left of it, nothing changed outside its directory,
// and the pool's next run works.
TEST(Sandbox, HostileProgramsAreStoppedAndLeaveNothing) {
  rlcpp::testing::TempDir outside;  // stands for the run directory and the model weights
  const fs::path secret = outside / "model.safetensors";
  std::ofstream(secret) << "weights";
  ::chmod(outside.path().c_str(), 0755);
  ::setenv("RLCPP_TEST_SECRET", "trainer-secret", 1);
  // A listener on loopback that the program must not reach.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);

  const std::string s = secret.string();
  // What a case needs of the machine: its program would hurt the host, or win, where the sandbox
  // has less (sandbox_isolation() says what it lacks, and rlcpp warns of it once).
  enum Needs { kAnything, kNamespaces, kIsolation /* namespaces or a user of its own */ };
  struct Case {
    std::string name, program, verdict;
    Needs needs = kAnything;
  };
  const std::vector<Case> cases = {
      {"infinite loop", "while True:\n    pass", "timeout"},
      {"fork bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", "timeout",
       kIsolation},
      {"50 GB allocation", "x = bytearray(50 * 10**9)", "memory"},
      {"10 GB file", "with open('big', 'wb') as f:\n    for _ in range(10 * 1024):\n        f.write(b'0' * 2**20)",
       "runtime_error"},
      {"1 GB printed", "import sys\nfor _ in range(1024):\n    sys.stdout.write('x' * 2**20)", "output_limit"},
      {"socket to the host's loopback",
       fmt::format("import socket\ns = socket.create_connection(('127.0.0.1', {}), timeout=1)\nprint('connected')", port),
       "runtime_error", kNamespaces},
      {"network interfaces", "import socket\nassert [n for _, n in socket.if_nameindex()] == ['lo'], socket.if_nameindex()",
       "passed", kNamespaces},
      {"read the weights", fmt::format("print(open('{}').read())", s), "runtime_error", kNamespaces},
      {"read /etc/shadow", "print(open('/etc/shadow').read())", "runtime_error"},
      {"the trainer's environment",
       "import os\nassert 'RLCPP_TEST_SECRET' not in os.environ\nfor p in os.listdir('/proc'):\n"
       "    try:\n        assert b'trainer-secret' not in open('/proc/%s/environ' % p, 'rb').read()\n"
       "    except (OSError, ValueError):\n        pass",
       "passed", kIsolation},
      {"write outside its directory",
       fmt::format("import os\nfor p in ['{}/x', '/tmp/rlcpp-escaped', '/usr/x', '/x']:\n"
                   "    try:\n        open(p, 'w').write('x')\n    except OSError:\n        continue\n"
                   "    raise SystemExit('wrote ' + p)",
                   outside.path().string()),
       "passed", kNamespaces},
      // Both survive: what they may signal is their own namespace, or their own user's processes.
      {"kill(-1, 9)", "import os\ntry:\n    os.kill(-1, 9)\nexcept OSError:\n    pass", "passed", kIsolation},
      {"kill its parent", "import os\ntry:\n    os.kill(os.getppid(), 9)\nexcept OSError:\n    pass", "passed",
       kIsolation},
      {"sleep past the wall limit", "import time\ntime.sleep(60)", "timeout"},
      {"close stdout early", "import os\nos.close(1)\nx = 1", "passed"},
      {"a background child left behind",
       "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(300)\n", "passed"},
  };
  CodeRewardOptions options = small_limits();
  options.time_limit = 2.0;
  CodeReward reward(options);
  const SandboxIsolation& iso = sandbox_isolation();
  for (const auto& c : cases) {
    if ((c.needs == kNamespaces && !iso.namespaces) || (c.needs == kIsolation && !iso.namespaces && !iso.own_user)) {
      std::cout << "skipped on this machine (" << iso.describe() << "): " << c.name << "\n";
      continue;
    }
    const auto grade = reward.grade({code_task(c.program, asserts("assert True"))})[0];
    EXPECT_EQ(code_verdicts().name(grade.verdict), c.verdict) << c.name << ": " << grade.to_json().dump();
    expect_nothing_left(c.name);
    EXPECT_EQ(read_all(secret), "weights") << c.name;
    EXPECT_EQ(std::distance(fs::directory_iterator(outside.path()), fs::directory_iterator()), 1) << c.name;
    EXPECT_FALSE(fs::exists("/tmp/rlcpp-escaped")) << c.name;
    // The next run works.
    const auto next = reward.grade({code_task("def f():\n    return 7", asserts("assert f() == 7"))})[0];
    EXPECT_EQ(code_verdicts().name(next.verdict), "passed") << "after " << c.name << ": " << next.to_json().dump();
  }
  // Nothing reached the listener.
  fcntl(listener, F_SETFL, O_NONBLOCK);
  EXPECT_LT(::accept(listener, nullptr, nullptr), 0) << "a sandboxed program connected to the host's loopback";
  ::close(listener);
  ::unsetenv("RLCPP_TEST_SECRET");
}

TEST(SandboxPool, RunsInParallelInOrderWithFigures) {
  SandboxPool pool(3);
  std::vector<SandboxRun> runs(7);
  for (size_t k = 0; k < runs.size(); ++k) {
    runs[k].source = fmt::format("import sys\nprint({} * int(sys.stdin.read()))", k);
    runs[k].stdin_text = "3";
  }
  const auto results = pool.run_all(runs);
  ASSERT_EQ(results.size(), runs.size());
  for (size_t k = 0; k < runs.size(); ++k) {
    EXPECT_TRUE(results[k].status.ok()) << results[k].status.describe() << " " << results[k].stderr_text;
    EXPECT_EQ(results[k].stdout_text, fmt::format("{}\n", 3 * k));
    EXPECT_GT(results[k].peak_memory_kb, 0);
    EXPECT_GT(results[k].wall_seconds, 0.0);
  }
  SandboxRun unknown;
  unknown.language = "cobol";
  EXPECT_THROW(pool.run_all({unknown}), UserError);
}

TEST(Sandbox, SaysWhatIsolationItHas) {
  const std::string text = sandbox_isolation().describe();
  EXPECT_NE(text.find("sandbox:"), std::string::npos);
  EXPECT_NE(text.find("rlimits"), std::string::npos);
  EXPECT_EQ(sandbox_isolation().missing.empty(), sandbox_isolation().namespaces && sandbox_isolation().own_user);
}
