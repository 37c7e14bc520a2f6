#include "reward/code_reward.h"

#include <algorithm>
#include <random>

#include "sandbox/sandbox_pool.h"
#include "util/error.h"

namespace rlcpp {

namespace {

// The Python harness a run executes: it compiles solution.py (a syntax error is reported as
// such), runs it in a namespace of its own, then each test, and reports every outcome on stderr
// as a line "NONCE kind verdict detail". The nonce is fresh per batch, so a program cannot print
// a verdict the grader would believe without reading the harness; one that ends the process early
// (os._exit(0) before the tests) leaves its tests unreported, and unreported tests fail.
constexpr const char* kHarness = R"PY(import ast, os, sys
_N = "@NONCE@"
def _mark(kind, verdict, detail=""):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    line = "\n%s %s %s %s\n" % (_N, kind, verdict, str(detail).replace("\n", " ")[:300])
    os.write(2, line.encode("utf-8", "replace"))
_g = {"__name__": "__main__", "__builtins__": __builtins__}
def _run(code):
    try:
        exec(code, _g)
        return "passed", ""
    except AssertionError as e:
        return "wrong_answer", ("AssertionError: %s" % e)[:200]
    except MemoryError:
        return "memory", "MemoryError"
    except SystemExit as e:
        return ("passed", "") if e.code in (None, 0) else ("runtime_error", "SystemExit: %s" % e.code)
    except BaseException as e:
        return "runtime_error", ("%s: %s" % (type(e).__name__, e))[:200]
try:
    with open("solution.py", encoding="utf-8", errors="replace") as f:
        _code = compile(f.read(), "solution.py", "exec")
except (SyntaxError, ValueError) as e:
    _mark("program", "syntax", "%s: %s" % (type(e).__name__, e))
    os._exit(0)
_v, _d = _run(_code)
_mark("program", _v, _d)
if _v == "passed" and os.path.exists("tests.py"):
    with open("tests.py", encoding="utf-8") as f:
        _tree = ast.parse(f.read(), "tests.py")
    _k = 0
    for _stmt in _tree.body:
        _v, _d = _run(compile(ast.Module(body=[_stmt], type_ignores=[]), "tests.py", "exec"))
        if isinstance(_stmt, ast.Assert):
            _mark("test", _v, "%d %s" % (_k, _d))
            _k += 1
        elif _v != "passed":
            _mark("setup", _v, _d)
            break
    _entry = "@ENTRY@"
    if _entry and callable(_g.get("check")):
        _v, _d = _run(compile("check(%s)" % _entry, "tests.py", "exec"))
        _mark("test", _v, "%d %s" % (_k, _d))
_mark("done", "passed")
os._exit(0)
)PY";

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// How bad a verdict is, to name a response's failure by its worst test.
int severity(CodeVerdict v) {
  switch (v) {
    case CodeVerdict::kPassed: return 0;
    case CodeVerdict::kWrongAnswer: return 1;
    case CodeVerdict::kRuntimeError: return 2;
    case CodeVerdict::kOutputLimit: return 3;
    case CodeVerdict::kMemory: return 4;
    case CodeVerdict::kTimeout: return 5;
    case CodeVerdict::kSyntax: return 6;
    case CodeVerdict::kBadTests: return 7;
    case CodeVerdict::kNoCode: return 8;
  }
  return 0;
}

std::optional<CodeVerdict> verdict_named(std::string_view name) {
  for (const auto& e : code_verdicts().entries()) {
    if (e.name == name) return e.value;
  }
  return std::nullopt;
}

// What the harness reported in one run.
struct HarnessReport {
  std::optional<std::pair<CodeVerdict, std::string>> program;
  std::vector<TestResult> tests;
  std::optional<std::pair<CodeVerdict, std::string>> setup;
  bool done = false;
};

HarnessReport read_report(const std::string& stderr_text, const std::string& nonce) {
  HarnessReport report;
  size_t at = 0;
  const std::string prefix = "\n" + nonce + " ";
  while ((at = stderr_text.find(prefix, at)) != std::string::npos) {
    at += prefix.size();
    const size_t end = std::min(stderr_text.find('\n', at), stderr_text.size());
    const std::string line = stderr_text.substr(at, end - at);
    const size_t s1 = line.find(' '), s2 = line.find(' ', s1 == std::string::npos ? s1 : s1 + 1);
    const std::string kind = line.substr(0, s1);
    const std::string verdict_name = s1 == std::string::npos ? "" : line.substr(s1 + 1, s2 - s1 - 1);
    const std::string detail = s2 == std::string::npos ? "" : line.substr(s2 + 1);
    const auto verdict = verdict_named(verdict_name);
    if (!verdict) continue;
    if (kind == "program") report.program = {{*verdict, detail}};
    if (kind == "setup") report.setup = {{*verdict, detail}};
    if (kind == "test") report.tests.push_back({*verdict == CodeVerdict::kPassed, *verdict, detail});
    if (kind == "done") report.done = true;
  }
  return report;
}

// A run that did not report its own end: what stopped it.
std::pair<CodeVerdict, std::string> unreported_end(const SandboxResult& r, const SandboxLimits& limits) {
  switch (r.stopped_by) {
    case SandboxStop::kWallLimit: return {CodeVerdict::kTimeout, fmt::format("wall-clock limit {} s", limits.wall_seconds)};
    case SandboxStop::kCpuLimit: return {CodeVerdict::kTimeout, fmt::format("CPU limit {} s", limits.cpu_seconds)};
    case SandboxStop::kOutputLimit: return {CodeVerdict::kOutputLimit, fmt::format("output past {} bytes", limits.output_bytes)};
    case SandboxStop::kNone: break;
  }
  // Not from the peak memory figure: it counts the forked rlcpp's pages before exec.
  if (r.stderr_text.find("MemoryError") != std::string::npos) {
    return {CodeVerdict::kMemory, fmt::format("memory limit {} MB", limits.memory_mb)};
  }
  return {CodeVerdict::kRuntimeError, "ended without reporting (" + r.status.describe() + ")"};
}

std::string short_text(const std::string& s, size_t n = 80) {
  return s.size() <= n ? s : s.substr(0, n) + "...";
}

}  // namespace

const EnumTable<CodeRewardMode>& code_reward_modes() {
  static const EnumTable<CodeRewardMode> table(
      "code reward", {{CodeRewardMode::kAll, "all", "1 when every test passes, else 0"},
                      {CodeRewardMode::kFraction, "fraction", "the fraction of the tests that pass"}});
  return table;
}

const EnumTable<CodeVerdict>& code_verdicts() {
  static const EnumTable<CodeVerdict> table(
      "code verdict", {{CodeVerdict::kPassed, "passed", "every test passed"},
                       {CodeVerdict::kNoCode, "no_code", "no fenced code block in the response"},
                       {CodeVerdict::kSyntax, "syntax", "the program does not compile"},
                       {CodeVerdict::kTimeout, "timeout", "the time limit (wall or CPU) stopped it"},
                       {CodeVerdict::kMemory, "memory", "the memory limit stopped it"},
                       {CodeVerdict::kRuntimeError, "runtime_error", "it raised, crashed or was killed"},
                       {CodeVerdict::kOutputLimit, "output_limit", "it printed past the output cap"},
                       {CodeVerdict::kWrongAnswer, "wrong_answer", "an assert failed or the output differed"},
                       {CodeVerdict::kBadTests, "bad_tests", "the record's tests are unusable"}});
  return table;
}

size_t CodeTests::size() const { return io.size(); }

CodeTests parse_code_tests(const nlohmann::json& m) {
  CodeTests t;
  const bool has_io = m.contains("tests"), has_code = m.contains("test_code");
  if (!has_io && !has_code) {
    throw_user_error("a code task needs \"tests\": [{{\"stdin\": ..., \"stdout\": ...}}] or \"test_code\": \"assert ...\"");
  }
  if (has_io) {
    const auto& tests = m["tests"];
    if (!tests.is_array() || tests.empty()) throw_user_error("\"tests\" must be a non-empty list, got {}", tests.type_name());
    for (size_t k = 0; k < tests.size(); ++k) {
      const auto& test = tests[k];
      if (!test.is_object() || !test.contains("stdout") || !test["stdout"].is_string() ||
          (test.contains("stdin") && !test["stdin"].is_string())) {
        throw_user_error("tests[{}] must be {{\"stdin\": string, \"stdout\": string}}, got {}", k,
                         short_text(test.dump(), 120));
      }
      t.io.emplace_back(test.value("stdin", ""), test["stdout"].get<std::string>());
    }
  }
  if (has_code) {
    if (!m["test_code"].is_string() || m["test_code"].get<std::string>().find_first_not_of(" \t\r\n") == std::string::npos) {
      throw_user_error("\"test_code\" must be a non-empty string of Python asserts");
    }
    t.test_code = m["test_code"].get<std::string>();
  }
  if (m.contains("entry_point")) {
    const auto& e = m["entry_point"];
    const std::string name = e.is_string() ? e.get<std::string>() : "";
    const bool identifier = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                            std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isalnum(c) || c == '_'; });
    if (!identifier) throw_user_error("\"entry_point\" must be a function name, got {}", short_text(e.dump()));
    t.entry_point = name;
  }
  if (m.contains("language")) {
    if (!m["language"].is_string() || find_sandbox_language(m["language"].get<std::string>()) == nullptr) {
      throw_user_error("\"language\" {} is not one the sandbox runs (python, sh)", short_text(m["language"].dump()));
    }
    t.language = find_sandbox_language(m["language"].get<std::string>())->name;
  }
  if (!t.test_code.empty() && !t.language.empty() && t.language != "python") {
    throw_user_error("\"test_code\" is Python; a {} task gives \"tests\" with stdin and stdout", t.language);
  }
  if (m.contains("time_limit")) {
    if (!m["time_limit"].is_number() || m["time_limit"].get<double>() <= 0) {
      throw_user_error("\"time_limit\" must be a positive number of seconds, got {}", short_text(m["time_limit"].dump()));
    }
    t.time_limit = m["time_limit"].get<double>();
  }
  if (m.contains("memory_limit_mb")) {
    if (!m["memory_limit_mb"].is_number() || m["memory_limit_mb"].get<double>() < 1) {
      throw_user_error("\"memory_limit_mb\" must be a positive number, got {}", short_text(m["memory_limit_mb"].dump()));
    }
    t.memory_limit_mb = static_cast<int64_t>(m["memory_limit_mb"].get<double>());
  }
  return t;
}

std::optional<CodeBlock> extract_last_code_block(std::string_view response) {
  // Fences are ``` at the start of a line (after indentation); they pair up in order.
  std::vector<size_t> fences;
  for (size_t at = response.find("```"); at != std::string_view::npos; at = response.find("```", at + 3)) {
    size_t line_start = response.rfind('\n', at == 0 ? 0 : at - 1);
    line_start = line_start == std::string_view::npos || at == 0 ? 0 : line_start + 1;
    if (response.substr(line_start, at - line_start).find_first_not_of(" \t") != std::string_view::npos) continue;
    fences.push_back(at);
    while (at + 3 < response.size() && response[at + 3] == '`') ++at;  // ```` counts once
  }
  if (fences.empty()) return std::nullopt;
  // The last opening fence: with an even count the last pair, with an odd one the unclosed last.
  const size_t open = fences.size() % 2 == 0 ? fences[fences.size() - 2] : fences.back();
  const size_t close = fences.size() % 2 == 0 ? fences.back() : response.size();
  size_t info_end = response.find('\n', open);
  if (info_end == std::string_view::npos || info_end > close) return std::nullopt;
  CodeBlock block;
  std::string_view info = response.substr(open + 3, info_end - open - 3);
  while (!info.empty() && (info.front() == '`' || info.front() == ' ')) info.remove_prefix(1);
  for (char c : info.substr(0, info.find_first_of(" \t\r{"))) block.language += static_cast<char>(std::tolower(c));
  block.code = std::string(response.substr(info_end + 1, close - info_end - 1));
  if (block.code.find_first_not_of(" \t\r\n") == std::string::npos) return std::nullopt;
  return block;
}

std::string normalize_output(std::string_view text) {
  std::string out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.remove_suffix(1);
    out.append(line);
    out += '\n';
    start = end + 1;
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

nlohmann::json CodeGrade::to_json() const {
  nlohmann::json tests_json = nlohmann::json::array();
  for (const auto& t : tests) {
    tests_json.push_back({{"passed", t.passed}, {"verdict", code_verdicts().name(t.verdict)}, {"detail", t.detail}});
  }
  return {{"verdict", code_verdicts().name(verdict)}, {"passed", n_passed}, {"tests", n_tests},
          {"wall_s", wall_seconds}, {"cpu_s", cpu_seconds}, {"peak_memory_kb", peak_memory_kb},
          {"results", std::move(tests_json)}};
}

SandboxLimits CodeRewardOptions::limits() const {
  SandboxLimits l;
  l.wall_seconds = l.cpu_seconds = time_limit;
  l.memory_mb = memory_mb;
  return l;
}

CodeReward::CodeReward(CodeRewardOptions options) : options_(std::move(options)) {}
CodeReward::~CodeReward() = default;

void CodeReward::check_record(const std::string& gt_answer, const nlohmann::json& metadata) const {
  parse_code_tests(metadata);
}

std::vector<CodeGrade> CodeReward::grade(const std::vector<RewardInput>& inputs) {
  std::vector<CodeGrade> grades(inputs.size());
  // Each response's runs: one per stdin/stdout test, or one for test_code.
  struct Plan {
    size_t input;
    CodeTests tests;
    SandboxLimits limits;
    size_t first_run = 0, n_runs = 0;
    bool harness = false;
  };
  std::vector<Plan> plans;
  std::vector<SandboxRun> runs;
  std::mt19937_64 rng(std::random_device{}());
  const std::string nonce = fmt::format("rlcpp-{:016x}{:016x}", rng(), rng());
  for (size_t k = 0; k < inputs.size(); ++k) {
    CodeGrade& g = grades[k];
    CodeTests tests;
    try {
      tests = parse_code_tests(inputs[k].metadata);
    } catch (const UserError& e) {
      g.verdict = CodeVerdict::kBadTests;
      g.tests.push_back({false, CodeVerdict::kBadTests, e.what()});
      continue;
    }
    const auto block = extract_last_code_block(inputs[k].response);
    if (!block) continue;  // no_code
    std::string language = tests.language;
    if (language.empty()) {
      const SandboxLanguage* fenced = find_sandbox_language(block->language);
      language = fenced != nullptr ? fenced->name : "python";
    }
    Plan plan{k, tests, options_.limits()};
    if (tests.time_limit) plan.limits.wall_seconds = plan.limits.cpu_seconds = *tests.time_limit;
    if (tests.memory_limit_mb) plan.limits.memory_mb = *tests.memory_limit_mb;
    plan.harness = language == "python";
    plan.first_run = runs.size();
    SandboxRun base;
    base.language = language;
    base.limits = plan.limits;
    if (plan.harness) {
      base.source = replace_all(replace_all(kHarness, "@NONCE@", nonce), "@ENTRY@", tests.entry_point);
      base.files = {{"solution.py", block->code}};
    } else {
      base.source = block->code;
    }
    if (!tests.test_code.empty()) {
      SandboxRun run = base;
      run.files.emplace_back("tests.py", tests.test_code);
      runs.push_back(std::move(run));
    }
    for (const auto& [input, expected] : tests.io) {
      SandboxRun run = base;
      run.stdin_text = input;
      runs.push_back(std::move(run));
    }
    plan.n_runs = runs.size() - plan.first_run;
    plans.push_back(std::move(plan));
  }
  if (!runs.empty() && !pool_) pool_ = std::make_unique<SandboxPool>(static_cast<int>(options_.workers));
  const std::vector<SandboxResult> results = runs.empty() ? std::vector<SandboxResult>{} : pool_->run_all(runs);

  for (const Plan& plan : plans) {
    CodeGrade& g = grades[plan.input];
    size_t r = plan.first_run;
    auto account = [&](const SandboxResult& result) {
      g.wall_seconds += result.wall_seconds;
      g.cpu_seconds += result.cpu_seconds;
      g.peak_memory_kb = std::max(g.peak_memory_kb, result.peak_memory_kb);
      if (result.setup_failed) throw_user_error("sandbox: cannot start a program: {}", result.stderr_text);
    };
    if (!plan.tests.test_code.empty()) {
      const SandboxResult& result = results[r++];
      account(result);
      const HarnessReport report = read_report(result.stderr_text, nonce);
      if (report.program && report.program->first != CodeVerdict::kPassed) {
        g.tests.push_back({false, report.program->first, report.program->second});
      } else {
        g.tests = report.tests;
        if (report.setup) g.tests.push_back({false, report.setup->first, "tests' setup: " + report.setup->second});
        if (!report.done) {
          const auto [verdict, detail] = unreported_end(result, plan.limits);
          g.tests.push_back({false, verdict, detail});
        } else if (g.tests.empty()) {
          g.tests.push_back({false, CodeVerdict::kBadTests, "test_code has no assert (and no check(candidate))"});
        }
      }
    }
    for (const auto& [input, expected] : plan.tests.io) {
      const SandboxResult& result = results[r++];
      account(result);
      TestResult t;
      const HarnessReport report = plan.harness ? read_report(result.stderr_text, nonce) : HarnessReport{};
      if (report.program && report.program->first != CodeVerdict::kPassed) {
        t = {false, report.program->first, report.program->second};
      } else if (result.stopped_by != SandboxStop::kNone || (plan.harness ? !report.program : !result.status.ok())) {
        const auto [verdict, detail] = unreported_end(result, plan.limits);
        t = {false, verdict, detail};
      } else if (normalize_output(result.stdout_text) == normalize_output(expected)) {
        t = {true, CodeVerdict::kPassed, ""};
      } else {
        t = {false, CodeVerdict::kWrongAnswer,
             fmt::format("expected {} got {}", nlohmann::json(short_text(normalize_output(expected))).dump(),
                         nlohmann::json(short_text(normalize_output(result.stdout_text))).dump())};
      }
      g.tests.push_back(std::move(t));
    }
  }
  for (CodeGrade& g : grades) {
    g.n_tests = static_cast<int64_t>(g.tests.size());
    g.n_passed = std::count_if(g.tests.begin(), g.tests.end(), [](const TestResult& t) { return t.passed; });
    if (g.tests.empty()) continue;  // no_code
    g.verdict = CodeVerdict::kPassed;
    for (const auto& t : g.tests) {
      if (severity(t.verdict) > severity(g.verdict)) g.verdict = t.verdict;
    }
    const bool all = g.n_passed == g.n_tests;
    g.reward = options_.mode == CodeRewardMode::kAll ? (all ? 1.0 : 0.0) : static_cast<double>(g.n_passed) / g.n_tests;
  }
  return grades;
}

std::vector<ComponentScore> CodeReward::score(const std::vector<RewardInput>& inputs) {
  const std::vector<CodeGrade> grades = grade(inputs);
  std::vector<ComponentScore> out(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const CodeGrade& g = grades[k];
    const auto block = extract_last_code_block(inputs[k].response);
    out[k].value = g.reward;
    out[k].outcome = GradeOutcome{block ? std::optional<std::string>(block->code) : std::nullopt, block.has_value(),
                                  g.verdict == CodeVerdict::kPassed};
    out[k].reason = code_verdicts().name(g.verdict);
    out[k].details = g.to_json().dump();
    if (g.n_tests > 0) out[k].parts["tests_passed"] = static_cast<double>(g.n_passed) / g.n_tests;
  }
  return out;
}

}  // namespace rlcpp
