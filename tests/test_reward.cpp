// Rewards: the table-driven corpus (tests/data), scales, and bounds on hostile input.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <tuple>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "reward/answer_forms.h"
#include "reward/extract.h"
#include "reward/math_equal.h"
#include "reward/math_expr.h"
#include "reward/reward.h"
#include "reward/external.h"
#include "reward/reward_function.h"
#include "test_util.h"
#include "util/error.h"

using namespace rlcpp;

namespace {
std::filesystem::path data_dir() { return std::filesystem::path(RLCPP_SOURCE_DIR) / "tests" / "data"; }
}  // namespace

TEST(MathEqual, TableOfCases) {
  std::ifstream in(data_dir() / "math_equal_cases.txt");
  ASSERT_TRUE(in) << "missing tests/data/math_equal_cases.txt";
  std::string line;
  int n = 0, line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    const size_t a = line.find(" ||| "), b = line.rfind(" ||| ");
    ASSERT_NE(a, b) << "line " << line_no;
    const std::string answer = line.substr(0, a), truth = line.substr(a + 5, b - a - 5);
    const bool expected = line.substr(b + 5) == "1";
    EXPECT_EQ(math_equal(answer, truth), expected) << "line " << line_no << ": '" << answer << "' vs '" << truth << "'";
    ++n;
  }
  EXPECT_GE(n, 200);
}

// The rounding rule (rounds_fraction in math_equal.cpp), at every precision: the fraction rounded
// to d decimals is right, one unit either side of it is wrong, and so is the truncation where it
// differs from the rounding. Values are chosen so that no neighbour is within kMathRelTol.
TEST(MathEqual, ARoundedDecimalIsRightOnlyAtTheRoundingOfItsOwnDigits) {
  struct Case { const char* truth; long long numerator, denominator; };
  for (const Case c : {Case{"\\frac{1}{3}", 1, 3}, Case{"\\frac{2}{3}", 2, 3}, Case{"\\frac{1}{7}", 1, 7},
                       Case{"-\\frac{5}{6}", -5, 6}, Case{"\\frac{10}{3}", 10, 3}}) {
    for (int decimals = 2; decimals <= 5; ++decimals) {
      const double scale = std::pow(10.0, decimals);
      const double exact = static_cast<double>(c.numerator) / static_cast<double>(c.denominator);
      auto written = [&](double units) { return fmt::format("{:.{}f}", units / scale, decimals); };
      const double rounded = std::round(exact * scale), truncated = std::trunc(exact * scale);
      EXPECT_TRUE(math_equal(written(rounded), c.truth)) << written(rounded) << " for " << c.truth;
      EXPECT_FALSE(math_equal(written(rounded + 1), c.truth)) << written(rounded + 1) << " for " << c.truth;
      EXPECT_FALSE(math_equal(written(rounded - 1), c.truth)) << written(rounded - 1) << " for " << c.truth;
      if (truncated != rounded) {
        EXPECT_FALSE(math_equal(written(truncated), c.truth)) << written(truncated) << ": a truncation, not a rounding";
      }
    }
  }
  // One significant digit is too coarse, an exact decimal must be exact, and irrationals keep their form.
  EXPECT_FALSE(math_equal("0.3", "\\frac{1}{3}"));
  EXPECT_TRUE(math_equal("0.033", "\\frac{1}{30}"));
  EXPECT_FALSE(math_equal("0.03", "\\frac{1}{30}"));
  EXPECT_FALSE(math_equal("0.13", "\\frac{1}{8}"));
  EXPECT_FALSE(math_equal("3.14", "\\pi"));
  // Only the answer may be the rounded one: a rounded truth is matched by its own digits.
  EXPECT_FALSE(math_equal("\\frac{1}{3}", "0.33"));
}

TEST(AnswerForms, AnInequalityInTheNegatedVariableIsTheIntervalOfTheVariable) {
  using answer_forms::interval_of;
  EXPECT_EQ(interval_of("-x>-1"), "(-\\infty,1)");
  EXPECT_EQ(interval_of("-1<-x"), "(-\\infty,1)");
  EXPECT_EQ(interval_of("-x>=2"), "(-\\infty,-2]");
  EXPECT_EQ(interval_of("-3<-x<=1"), "[-1,3)");
  EXPECT_EQ(interval_of("-x<\\frac{1}{2}"), "(-\\frac{1}{2},\\infty)");
  EXPECT_EQ(interval_of("-x>1+y"), "(-\\infty,-(1+y))");
  EXPECT_EQ(interval_of("-x>-y"), std::nullopt) << "both sides negated: no side is the variable";
}

TEST(AnswerForms, LabelsNameValuesAndExpressionsDoNot) {
  for (const char* label : {"x", "x_1", "a_{n}", "f(x)", "AB", "ABC", "|AB|", "\\overline{AB}", "\\angleABC",
                            "\\angleA", "m\\angleABC", "(p,q)", "(x_1,x_2,AB)", "V_1:V_2", "AB:BC"}) {
    EXPECT_TRUE(answer_forms::is_label(label)) << label;
  }
  for (const char* not_label : {"p+2q", "2x", "|x-1|", "(p+q,q)", "(p)", "ABCDE", "1:2", "V_1:", "ab"}) {
    EXPECT_FALSE(answer_forms::is_label(not_label)) << not_label;
  }
  EXPECT_TRUE(answer_forms::names_a_figure_part("|AB|"));
  EXPECT_FALSE(answer_forms::names_a_figure_part("x")) << "a letter may be an unknown, not a figure's part";
  EXPECT_FALSE(answer_forms::names_a_figure_part("A")) << "a bare capital too; \\angleA is the angle";
}

TEST(AnswerForms, AChainHasThreeOrMoreMembersAndIsNoListOrInequality) {
  EXPECT_EQ(answer_forms::chain_members("x=5+5+1=11"), (std::vector<std::string>{"x", "5+5+1", "11"}));
  EXPECT_EQ(answer_forms::chain_members("(p,q)=(1+2,2)=(3,2)").size(), 3u);
  EXPECT_TRUE(answer_forms::chain_members("x=11").empty());
  EXPECT_TRUE(answer_forms::chain_members("AB=4,CD=5=5").empty()) << "a list of equations";
  EXPECT_TRUE(answer_forms::chain_members("1<=x=2=2").empty());
  EXPECT_TRUE(answer_forms::chain_members("x==11").empty());
  EXPECT_TRUE(answer_forms::chain_members("1=1=1=1=1=1=1=1=1").empty()) << "over 8 members";
}

TEST(AnswerForms, ListsSplitAtSemicolonsBeforeCommasAndBareBracesAreASet) {
  EXPECT_EQ(answer_forms::list_items("-12;-11"), (std::vector<std::string>{"-12", "-11"}));
  EXPECT_EQ(answer_forms::list_items("(1,2);(3,4)"), (std::vector<std::string>{"(1,2)", "(3,4)"}));
  const auto set = answer_forms::structure_of("{-12,-11}");
  ASSERT_TRUE(set.has_value());
  EXPECT_EQ(set->open, '{');
  EXPECT_EQ(set->items.size(), 2u);
  EXPECT_FALSE(answer_forms::structure_of("{1}{2}").has_value()) << "no pair encloses it, and no top-level comma";
}

// Issue 44's forms through the boxed grader, as a policy writes them.
TEST(Reward, BoxedAnswersInEverydayFormsAreGradedByTheirValue) {
  const std::vector<std::tuple<std::string, std::string, bool>> cases = {
      {"so $\\boxed{(p,q)=(3,2)}$", "(3,2)", true},
      {"so $\\boxed{(p,q)=(2,3)}$", "(3,2)", false},
      {"\\boxed{AB = 4} and \\boxed{CD = 5}", "4, 5", true},
      {"\\boxed{AB = 5} and \\boxed{CD = 4}", "4, 5", false},
      {"\\boxed{V_1 : V_2 = 11 : 21}", "11:21", true},
      {"\\boxed{x = 5 + 5 + 1 = 11}", "11", true},
      {"\\boxed{x = 5 + 5 + 2 = 11}", "11", false},
      {"\\boxed{\\left(0.33, 0.5\\right)}", "\\left(\\frac{1}{3}, \\frac12\\right)", true},
      {"\\boxed{(0.34, 0.5)}", "(\\frac{1}{3}, \\frac12)", false},
      {"\\boxed{-x > -1}", "x < 1", true},
      {"\\boxed{x > 1}", "x < 1", false},
      {"\\boxed{\\{-12, -11\\}}", "-12;-11", true},
      {"\\boxed{\\{-12, -10\\}}", "-12;-11", false},
      {"\\boxed{(7,11), (11,7)}", "(11,7) \\text{ or } (7,11)", true},
      {"\\boxed{28 \\text{ percentage}}", "28\\%", true},
      {"\\boxed{27 \\text{ percentage}}", "28\\%", false},
  };
  for (const auto& [response, truth, correct] : cases) {
    EXPECT_EQ(grade_response(RewardType::kBoxed, response, truth).correct, correct) << response << " vs " << truth;
  }
}

TEST(Reward, TableOfResponses) {
  std::ifstream in(data_dir() / "reward_cases.jsonl");
  ASSERT_TRUE(in);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    auto c = nlohmann::json::parse(line);
    const auto type = reward_types().parse(c["type"].get<std::string>(), "type");
    const bool truncated = c.value("truncated", false);
    const auto r = grade_response(type, c["response"].get<std::string>(), c["gt_answer"].get<std::string>(), truncated);
    const std::string where = "case " + std::to_string(n + 1) + ": " + line;
    EXPECT_EQ(r.format_ok, c["format_ok"].get<bool>()) << where;
    EXPECT_EQ(r.correct, c["correct"].get<bool>()) << where;
    if (c.contains("extracted")) {
      ASSERT_TRUE(r.extracted.has_value()) << where;
      EXPECT_EQ(*r.extracted, c["extracted"].get<std::string>()) << where;
    }
    // Default scale 1 / 0 / 0, truncated 0.
    EXPECT_EQ(r.reward, !truncated && r.correct ? 1.0 : 0.0) << where;
    ++n;
  }
  EXPECT_GE(n, 100);
}

TEST(Reward, ScalesIncludingTheReferenceTenToZero) {
  RewardScale reference{10.0, 0.0, 0.0, 0.0};
  EXPECT_EQ(grade_response(RewardType::kBoxed, "\\boxed{3}", "3", false, reference).reward, 10.0);
  EXPECT_EQ(grade_response(RewardType::kBoxed, "\\boxed{4}", "3", false, reference).reward, 0.0);
  RewardScale graded{1.0, -0.5, -1.0, -0.25};
  EXPECT_EQ(grade_response(RewardType::kBoxed, "\\boxed{4}", "3", false, graded).reward, -0.5);
  EXPECT_EQ(grade_response(RewardType::kBoxed, "no box", "3", false, graded).reward, -1.0);
  EXPECT_EQ(grade_response(RewardType::kBoxed, "\\boxed{3}", "3", true, graded).reward, -0.25);
  EXPECT_THROW_MSG(reward_types().parse("regex", "-rt"), UserError, "-rt", "boxed, think_answer_tags, answer_line");
}

TEST(MathEqual, HostileInputIsBoundedWork) {
  // Long, deeply nested or repetitive inputs: the parser's caps (512 bytes, ~40 nesting levels,
  // 4,096 nodes) refuse them before any work, and grading still gives the right answer. The
  // bounds, not a clock, are what is asserted; a hang would be caught by the test's CTest timeout.
  const std::vector<std::string> inputs = {
      std::string(1999, '('), std::string(100000, '1'), std::string(1500, '{') + std::string(1500, '}'),
      [] { std::string s; for (int k = 0; k < 300; ++k) s += "\\frac{1}{"; return s; }(),
      [] { std::string s; for (int k = 0; k < 600; ++k) s += "x+"; return s + "1"; }(),
      [] { std::string s; for (int k = 0; k < 400; ++k) s += "1,"; return s + "1"; }(),
      [] { std::string s; for (int k = 0; k < 300; ++k) s += "\\pm"; return s; }(),
  };
  for (const auto& input : inputs) {
    EXPECT_FALSE(MathExpr::parse(input).has_value()) << "over a cap, so refused: " << input.substr(0, 40);
    EXPECT_FALSE(math_equal(input, input + "1")) << input.substr(0, 40);
    EXPECT_FALSE(math_equal(input, "5")) << input.substr(0, 40);
    EXPECT_FALSE(grade_response(RewardType::kBoxed, "\\boxed{" + input + "}", "5").correct) << input.substr(0, 40);
  }
  // Just under the caps, the same shapes still parse (the caps are where they claim to be).
  EXPECT_TRUE(MathExpr::parse(std::string(30, '(') + "1" + std::string(30, ')')).has_value());
  EXPECT_TRUE(MathExpr::parse(std::string(500, '1')).has_value());
  EXPECT_FALSE(MathExpr::parse(std::string(513, '1')).has_value());
}

// ---- external reward processes (children are small /bin/sh loops and the shipped Python example)

namespace {
std::vector<ExternalRequest> requests_of(const std::vector<std::string>& responses) {
  std::vector<ExternalRequest> out;
  for (const auto& r : responses) out.push_back({"p", r, "42", nlohmann::json::object()});
  return out;
}
}  // namespace

TEST(ExternalReward, ShippedExampleServesBatches) {
  ExternalRewardConfig config;
  config.command = "python3 " + (std::filesystem::path(RLCPP_SOURCE_DIR) / "examples/rewards/reward_server.py").string();
  config.batch_size = 16;
  ExternalReward external(config);
  std::vector<std::string> responses;
  for (int k = 0; k < 100; ++k) responses.push_back(k % 2 ? "the answer is 42" : "no idea");
  const auto replies = external.score(requests_of(responses));
  ASSERT_EQ(replies.size(), 100u);
  for (int k = 0; k < 100; ++k) {
    EXPECT_FALSE(replies[k].failed);
    EXPECT_EQ(replies[k].parts.at("has_answer"), k % 2 ? 1.0 : 0.0);
  }
  EXPECT_EQ(external.n_failures(), 0);
}

TEST(ExternalReward, HangIsKilledRestartedAndCounted) {
  ExternalRewardConfig config;
  config.command = "while read l; do case \"$l\" in *hang*) sleep 100;; esac; echo '{\"reward\": 1, \"parts\": {\"a\": 2}}'; done";
  config.timeout_s = 0.3;
  config.failure_reward = -1.0;
  config.max_restarts = 5;
  ExternalReward external(config);
  const auto replies = external.score(requests_of({"ok", "ok", "please hang", "ok", "hang again", "ok"}));
  const std::vector<double> expected = {1, 1, -1, 1, -1, 1};
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(replies[k].reward, expected[k]) << k;
    EXPECT_EQ(replies[k].failed, expected[k] < 0) << k;
  }
  EXPECT_EQ(external.n_failures(), 2);
  EXPECT_EQ(external.n_restarts(), 4);  // each hanging request was sent twice
}

// A child that dies once (killed from outside, a passing fault) changes no reward: the request it
// died on goes to the new child and is scored as if nothing happened.
TEST(ExternalReward, RequestAChildDiedOnIsSentOnceMore) {
  const auto marker = std::filesystem::temp_directory_path() / fmt::format("rlcpp-died-once-{}", ::getpid());
  std::filesystem::remove(marker);
  ExternalRewardConfig config;
  config.command = fmt::format("while read l; do case \"$l\" in *third*) [ -f {0} ] || {{ touch {0}; exit 9; }};; esac; "
                               "echo '{{\"reward\": 1}}'; done", marker.string());
  config.failure_reward = -1.0;
  ExternalReward external(config);
  const auto replies = external.score(requests_of({"first", "second", "third", "fourth"}));
  for (size_t k = 0; k < replies.size(); ++k) {
    EXPECT_EQ(replies[k].reward, 1.0) << k;
    EXPECT_FALSE(replies[k].failed) << k;
  }
  EXPECT_EQ(external.n_failures(), 0);
  EXPECT_EQ(external.n_restarts(), 1);
  std::filesystem::remove(marker);
}

// A hanging command's children go with it: it runs in its own process group, and the group is
// killed on a timeout and at the end (sh -c started them; killing only the shell left orphans).
TEST(ExternalReward, NoProcessOutlivesTheCommand) {
  auto running = [] {
    FILE* p = ::popen("pgrep -f 'sleep 73[1]' | wc -l", "r");
    int n = -1;
    if (p != nullptr) {
      if (std::fscanf(p, "%d", &n) != 1) n = -1;
      ::pclose(p);
    }
    return n;
  };
  ASSERT_EQ(running(), 0) << "a 'sleep 731' from elsewhere is running";
  {
    ExternalRewardConfig config;
    // The hang is a grandchild (a pipeline); a background sleeper is left by every request too.
    config.command = "while read l; do sleep 731 & case \"$l\" in *hang*) sleep 731 | cat;; esac; "
                     "echo '{\"reward\": 1}'; done";
    config.timeout_s = 0.3;
    config.max_restarts = 5;
    ExternalReward external(config);
    const auto replies = external.score(requests_of({"ok", "hang", "ok"}));
    EXPECT_TRUE(replies[1].failed);
    EXPECT_FALSE(replies[2].failed);
  }
  ::usleep(100000);
  EXPECT_EQ(running(), 0) << "processes of the reward command outlived it";
}

TEST(ExternalReward, RestartLimitStopsWithStderrTail) {
  ExternalRewardConfig config;
  config.command = "echo 'Traceback: boom in my reward' >&2; exit 3";
  config.max_restarts = 2;
  ExternalReward external(config);
  EXPECT_THROW_MSG(external.score(requests_of({"a", "b", "c", "d"})), UserError, "exited with status 3",
                   "Traceback: boom in my reward", "limit is 2");
}

TEST(ExternalReward, MalformedRepliesAreCountedFailures) {
  ExternalRewardConfig config;
  config.command = "read l; echo '{\"reward\": 1}'; while read l; do echo 'not json'; done";
  config.failure_reward = 0.5;
  ExternalReward external(config);
  const auto replies = external.score(requests_of({"a", "b", "c"}));
  EXPECT_FALSE(replies[0].failed);
  EXPECT_TRUE(replies[1].failed && replies[2].failed);
  EXPECT_EQ(replies[1].reward, 0.5);
  EXPECT_EQ(external.n_failures(), 2);
  EXPECT_EQ(external.n_restarts(), 0);
}

// A command that never answered well is set up wrong: its first malformed reply, or the shell
// failing to run it, stops at once instead of scoring every sample with the failure reward.
TEST(ExternalReward, SetupErrorsStopAtOnce) {
  ExternalRewardConfig config;
  config.command = "while read l; do echo banana; done";
  EXPECT_THROW_MSG(ExternalReward(config).score(requests_of({"a", "b"})), UserError, "first reply", "banana");
  config.command = "./no_such_reward_program --flag";
  EXPECT_THROW_MSG(ExternalReward(config).score(requests_of({"a", "b"})), UserError, "no_such_reward_program",
                   "command not found");
}

TEST(Reward, EachTypesSystemPromptAsksForTheFormItsGraderReads) {
  EXPECT_NE(default_system_prompt(RewardType::kBoxed).find("\\boxed{}"), std::string::npos);
  EXPECT_NE(default_system_prompt(RewardType::kThinkAnswerTags).find("<answer> </answer>"), std::string::npos);
  EXPECT_NE(default_system_prompt(RewardType::kAnswerLine).find("Answer: $Answer"), std::string::npos);
  for (const auto& e : reward_types().entries()) {
    // An environment says what it wants in its own observations, and a reward model or a judge
    // scores the conversation as its data has it: no system prompt of rlcpp's.
    EXPECT_EQ(default_system_prompt(e.value).empty(),
              e.value == RewardType::kEnv || e.value == RewardType::kModel || e.value == RewardType::kJudge)
        << e.name;
  }
}

// A component of the test's own: the seam takes any RewardComponent.
class LengthReward : public RewardComponent {
 public:
  std::vector<ComponentScore> score(const std::vector<RewardInput>& inputs) override {
    std::vector<ComponentScore> out(inputs.size());
    for (size_t k = 0; k < inputs.size(); ++k) {
      out[k].value = static_cast<double>(inputs[k].response.size());
      out[k].parts["chars"] = out[k].value;
      out[k].parts["truncated"] = inputs[k].truncated ? 1.0 : 0.0;
    }
    return out;
  }
};

TEST(RewardFunction, AnyComponentPlugsInAndTheFirstGraderReportsTheOutcome) {
  RewardFunction reward;
  reward.add("length", std::make_shared<LengthReward>(), 0.5);
  reward.add_builtin("accuracy", RewardType::kBoxed, 1.0);
  reward.add_builtin("tags", RewardType::kThinkAnswerTags, 1.0);  // grades too, but after "accuracy"
  RewardInput input{"p", "\\boxed{3}", "3"};
  input.truncated = true;
  const auto results = reward.score({input});
  ASSERT_EQ(results.size(), 1u);
  // 9 characters at 0.5; the graders see the truncation: the scale's truncated value, 0.
  EXPECT_DOUBLE_EQ(results[0].reward, 0.5 * 9 + 0.0 + 0.0);
  EXPECT_EQ(results[0].parts.at("length"), 9.0);
  EXPECT_EQ(results[0].parts.at("length/chars"), 9.0);
  EXPECT_EQ(results[0].parts.at("length/truncated"), 1.0);
  EXPECT_EQ(results[0].parts.at("tags"), 0.0);
  EXPECT_TRUE(results[0].correct);  // accuracy's outcome, not tags'
  EXPECT_TRUE(results[0].format_ok);
  EXPECT_EQ(results[0].extracted, std::optional<std::string>("3"));
  EXPECT_TRUE(results[0].truncated);
}

TEST(RewardFunction, WeightedSumOfComponentsWithParts) {
  ExternalRewardConfig config;
  config.command = "while read l; do echo '{\"reward\": 0.25}'; done";
  RewardFunction reward;
  reward.add_builtin("accuracy", RewardType::kBoxed, 2.0);
  reward.add("style", std::make_shared<ExternalReward>(config), 4.0);
  const auto results = reward.score({{"p", "\\boxed{3}", "3"}, {"p", "\\boxed{4}", "3"}});
  EXPECT_DOUBLE_EQ(results[0].reward, 2.0 * 1.0 + 4.0 * 0.25);
  EXPECT_DOUBLE_EQ(results[1].reward, 4.0 * 0.25);
  EXPECT_TRUE(results[0].correct);
  EXPECT_EQ(results[1].parts.at("accuracy"), 0.0);
  EXPECT_EQ(results[1].parts.at("style"), 0.25);
}

TEST(RewardFunction, RewardWeightsNameTheRunsComponents) {
  RewardOptions options;
  options.cmd = "cat";
  options.weights = "accuracy=0.25, external = -2";  // spaces around names and numbers are fine
  EXPECT_EQ(reward_weights(options), (std::map<std::string, double>{{"accuracy", 0.25}, {"external", -2}}));
  options.weights = "";
  EXPECT_TRUE(reward_weights(options).empty());
  options.weights = "model=1";
  EXPECT_THROW_MSG(reward_weights(options), UserError, "no reward component \"model\"", "external (--reward-cmd)");
  options.model.path = "rm";
  EXPECT_EQ(reward_weights(options).at("model"), 1.0);
  options.weights = "accuracy=x";
  EXPECT_THROW_MSG(reward_weights(options), UserError, "'accuracy=x' is not NAME=WEIGHT");
  options.weights = "accuracy=1,accuracy=2";
  EXPECT_THROW_MSG(reward_weights(options), UserError, "\"accuracy\" is given twice");
  options.weights = "accuracy=inf";
  EXPECT_THROW_MSG(reward_weights(options), UserError, "is not NAME=WEIGHT");
  // -rt model has no grader to weigh, and grades no answer.
  options.type = RewardType::kModel;
  options.weights = "accuracy=1";
  EXPECT_THROW_MSG(reward_weights(options), UserError, "no reward component \"accuracy\"");
  EXPECT_FALSE(grades_answers(options));
  EXPECT_TRUE(grades_answers(RewardOptions{}));
}

TEST(RewardFunction, WeightsApplyToTheRuleGrader) {
  RewardOptions options;
  options.weights = "accuracy=0.5";
  const auto reward = make_reward_function(options);
  EXPECT_TRUE(reward.has("accuracy"));
  EXPECT_FALSE(reward.has("model"));
  const auto r = reward.score({{"", "so \\boxed{4}", "4"}});
  EXPECT_EQ(r[0].parts.at("accuracy"), 1.0);
  EXPECT_EQ(r[0].reward, 0.5);
  EXPECT_TRUE(r[0].correct);
  // -rt model: no component from this layer (the run adds the model's).
  options.type = RewardType::kModel;
  options.weights.clear();
  EXPECT_TRUE(make_reward_function(options).empty());
}
