// Rewards: the built-in reward types (boxed, think_answer_tags, answer_line) as pure functions
// from (response, ground truth) to a structured result, on a configurable scale.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/enum_table.h"

namespace rlcpp {

// kCode is graded by running the response's program (reward/code_reward.h), not by grade_response.
// kEnv: the sum of an external environment's rewards (multi-turn, --env-cmd): no grader of its own.
// kModel: a reward model's score alone (--reward-model), nothing graded against a ground truth.
enum class RewardType { kBoxed, kThinkAnswerTags, kAnswerLine, kCode, kEnv, kModel, kJudge };

const EnumTable<RewardType>& reward_types();

// What each outcome is worth. Defaults: 1 / 0 / 0 / 0; the reference system's scale is 10 / 0.
struct RewardScale {
  double correct = 1.0;           // format ok and the answer equals the ground truth
  double wrong = 0.0;             // format ok, answer wrong
  double format_violation = 0.0;  // no answer could be extracted
  double truncated = 0.0;         // cut off at max_new_tokens (whatever it says)
};

struct RewardResult {
  std::optional<std::string> extracted;  // the answer found, if any
  bool format_ok = false;
  bool correct = false;
  bool truncated = false;
  double reward = 0.0;
  std::map<std::string, double> parts;  // named components (combined and external rewards)
  std::string reason;                   // why, where the grader says (code: "passed", "timeout", ...)
  std::string details;                  // the grader's per-test results as JSON text ("": none)
};

// The reference system's system prompt for a reward type: the instruction to answer in the form
// its grader reads.
std::string default_system_prompt(RewardType type);

// Grades one response. `truncated`: generation stopped at max_new_tokens.
RewardResult grade_response(RewardType type, std::string_view response, std::string_view ground_truth,
                            bool truncated = false, const RewardScale& scale = {});

}  // namespace rlcpp
