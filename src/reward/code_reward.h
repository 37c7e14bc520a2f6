// Code rewards (-rt code): the program is the last fenced code block of the response, run in the
// sandbox against the record's tests, either
//   "tests": [{"stdin": "...", "stdout": "..."}, ...]   compared after trimming trailing whitespace
//                                                       per line and trailing blank lines, or
//   "test_code": "assert f(1) == 2\n..."                Python run after the program: each top-level
//                                                       statement is a test (a `check(candidate)` it
//                                                       defines is called with "entry_point"),
// with optional "language" (else the fence's, else python), "time_limit" (seconds per run) and
// "memory_limit_mb". The reward is 1 when every test passes (--code-reward all) or the fraction
// passed (fraction); the verdict says why: passed, no_code, syntax, timeout, memory, runtime_error,
// output_limit, wrong_answer (bad_tests: the record's tests are unusable).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reward/reward_component.h"
#include "sandbox/sandbox.h"
#include "util/enum_table.h"

namespace rlcpp {

class SandboxPool;

enum class CodeRewardMode { kAll, kFraction };
const EnumTable<CodeRewardMode>& code_reward_modes();

struct CodeRewardOptions {
  CodeRewardMode mode = CodeRewardMode::kAll;  // 1 only when every test passes, or the fraction passed
  int64_t workers = 0;                         // sandbox runs in parallel (0: one per core)
  double time_limit = 10.0;    // seconds (wall and CPU) of one run, unless the record gives "time_limit"
  int64_t memory_mb = 1024;    // address space of one run, unless the record gives "memory_limit_mb"
  SandboxLimits limits() const;  // the sandbox's limits with these two
};

enum class CodeVerdict { kPassed, kNoCode, kSyntax, kTimeout, kMemory, kRuntimeError, kOutputLimit, kWrongAnswer, kBadTests };
const EnumTable<CodeVerdict>& code_verdicts();

// A record's tests, read from its fields.
struct CodeTests {
  std::string language;  // "" : the fence's, else python
  std::vector<std::pair<std::string, std::string>> io;  // (stdin, expected stdout)
  std::string test_code, entry_point;
  std::optional<double> time_limit;
  std::optional<int64_t> memory_limit_mb;
  size_t size() const;  // the number of tests (test_code: its top-level statements, counted when run)
};
// Throws a UserError saying what is wrong with the fields (the caller names the line).
CodeTests parse_code_tests(const nlohmann::json& metadata);

struct CodeBlock {
  std::string language;  // the fence's info string, lower-case ("" when none)
  std::string code;
};
// The last fenced (```) block of a response; an unclosed last fence runs to the end.
std::optional<CodeBlock> extract_last_code_block(std::string_view response);

struct TestResult {
  bool passed = false;
  CodeVerdict verdict = CodeVerdict::kWrongAnswer;
  std::string detail;  // the exception, or what differed (short)
};

struct CodeGrade {
  double reward = 0;
  CodeVerdict verdict = CodeVerdict::kNoCode;
  int64_t n_passed = 0, n_tests = 0;
  std::vector<TestResult> tests;
  // The sandbox's figures over the response's runs.
  double wall_seconds = 0, cpu_seconds = 0;
  int64_t peak_memory_kb = 0;
  nlohmann::json to_json() const;
};

// Normalises program output for comparison: trailing whitespace of each line and trailing blank
// lines dropped, \r\n read as \n.
std::string normalize_output(std::string_view text);

class CodeReward : public RewardComponent {
 public:
  explicit CodeReward(CodeRewardOptions options);
  ~CodeReward() override;

  // One grade per input: all their sandbox runs go to the pool at once.
  std::vector<CodeGrade> grade(const std::vector<RewardInput>& inputs);
  std::vector<ComponentScore> score(const std::vector<RewardInput>& inputs) override;
  void check_record(const std::string& gt_answer, const nlohmann::json& metadata) const override;

 private:
  CodeRewardOptions options_;
  std::unique_ptr<SandboxPool> pool_;  // made on first use: loading a dataset starts no sandbox
};

}  // namespace rlcpp
