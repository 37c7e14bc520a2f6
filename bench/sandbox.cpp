// bench/sandbox: what code rewards cost and what stops a hostile program.
//  1. The hostile-program table: each case's verdict, wall time and what stopped it.
//  2. Throughput: programs graded per second on a code task's records (the bundled one by
//     default), with the pool at 1 worker and at every core.
//  3. One sandboxed `python3 -c pass` against a bare one, in the same run.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <thread>

#include "bench_util.h"
#include "io/prompt_dataset.h"
#include "process/child_process.h"
#include "reward/code_reward.h"
#include "sandbox/sandbox_pool.h"

using namespace rlcpp;

namespace {

RewardInput task(const std::string& program, const nlohmann::json& tests) {
  RewardInput in;
  in.response = "```python\n" + program + "\n```";
  in.metadata = tests;
  return in;
}

// A response per record: a fixed one-line function, right for some records and wrong for others;
// the cost is the same either way (every test runs), as for a policy's responses.
std::vector<RewardInput> graded_records(const std::string& path, int64_t limit) {
  std::vector<RewardInput> out;
  for (const auto& r : load_prompt_dataset(path).records) {
    if (limit > 0 && static_cast<int64_t>(out.size()) >= limit) break;
    const nlohmann::json metadata(r.metadata);
    const std::string entry = metadata.value("entry_point", "f");
    out.push_back(task(out.size() % 2 ? "def " + entry + "(x):\n    return x" : "def " + entry + "(x):\n    return 2 * x + 1",
                       metadata));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dataset = "examples/code/test.jsonl";
  int64_t limit = 200, reps = 20;
  CLI::App app{"bench/sandbox: hostile programs, throughput of the pool, cost of one sandboxed run"};
  app.add_option("--dataset", dataset, "code task JSONL (tests or test_code)")->capture_default_str();
  app.add_option("--limit", limit, "records graded for the throughput figures")->capture_default_str();
  app.add_option("--reps", reps, "runs timed for the cost of one run")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::printf("%s\n\n", sandbox_isolation().describe().c_str());
  CodeRewardOptions options;
  options.time_limit = 2.0;
  options.memory_mb = 512;
  CodeReward reward(options);
  const std::vector<std::pair<std::string, std::string>> hostile = {
      {"infinite loop", "while True:\n    pass"},
      {"fork bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"},
      {"allocate 50 GB", "x = bytearray(50 * 10**9)"},
      {"write a 10 GB file", "with open('big', 'wb') as f:\n    for _ in range(10240):\n        f.write(b'0' * 2**20)"},
      {"print 1 GB", "import sys\nfor _ in range(1024):\n    sys.stdout.write('x' * 2**20)"},
      {"socket to 127.0.0.1", "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)"},
      {"list interfaces", "import socket\nprint(socket.if_nameindex())"},
      {"read /etc/shadow", "print(open('/etc/shadow').read())"},
      {"write outside", "open('/tmp/rlcpp-escaped', 'w').write('x')"},
      {"kill(-1, 9)", "import os\nos.kill(-1, 9)"},
      {"kill its parent", "import os\nos.kill(os.getppid(), 9)"},
      {"sleep past the limit", "import time\ntime.sleep(60)"},
      {"close stdout", "import os\nos.close(1)"},
      {"leave a child behind", "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(300)"},
  };
  std::printf("%-24s %-14s %8s %8s %10s  %s\n", "case", "verdict", "wall s", "cpu s", "peak MB", "what stopped it");
  for (const auto& [name, program] : hostile) {
    const CodeGrade g = reward.grade({task(program, {{"test_code", "assert True"}})})[0];
    std::string why = g.tests.empty() ? "" : g.tests.back().detail;
    if (why.size() > 70) why = why.substr(0, 70) + "...";
    std::printf("%-24s %-14s %8.2f %8.2f %10.1f  %s\n", name.c_str(), code_verdicts().name(g.verdict).c_str(),
                g.wall_seconds, g.cpu_seconds, g.peak_memory_kb / 1024.0, why.c_str());
  }

  const auto inputs = graded_records(dataset, limit);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::printf("\nthroughput on %zu records of %s\n", inputs.size(), dataset.c_str());
  for (int workers : {1, cores}) {
    CodeRewardOptions o;
    o.workers = workers;
    CodeReward pool_reward(o);
    pool_reward.grade({inputs[0]});  // the pool and the probe, outside the timing
    const auto t0 = std::chrono::steady_clock::now();
    const auto grades = pool_reward.grade(inputs);
    const double s = bench::seconds_since(t0);
    int64_t passed = 0;
    for (const auto& g : grades) passed += g.verdict == CodeVerdict::kPassed;
    std::printf("  %2d worker(s): %6.1f programs/s (%zu in %.2f s, %ld passed)\n", workers, inputs.size() / s,
                inputs.size(), s, static_cast<long>(passed));
  }

  SandboxPool one(1);
  SandboxRun pass;
  pass.source = "pass";
  one.run_all({pass});
  auto time_runs = [&](auto run_once) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < reps; ++k) run_once();
    return bench::seconds_since(t0) / static_cast<double>(reps);
  };
  const double bare = time_runs([] {
    SpawnOptions o;
    o.argv = {"/usr/bin/python3", "-I", "-B", "-c", "pass"};
    run_process(o, "", RunBounds{}, "bare python3");
  });
  const double sandboxed = time_runs([&] { one.run_all({pass}); });
  std::printf("\none run of `pass`: bare python3 %.1f ms, sandboxed %.1f ms (+%.1f ms, %.2fx)\n", bare * 1e3,
              sandboxed * 1e3, (sandboxed - bare) * 1e3, sandboxed / bare);
  return 0;
}
