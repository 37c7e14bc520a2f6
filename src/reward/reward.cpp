#include "reward/reward.h"

#include "reward/extract.h"
#include "reward/math_equal.h"
#include "util/error.h"

namespace rlcpp {

const EnumTable<RewardType>& reward_types() {
  static const EnumTable<RewardType> table(
      "reward type", {{RewardType::kBoxed, "boxed", "the last \\boxed{...} of the response"},
                      {RewardType::kThinkAnswerTags, "think_answer_tags", "<think>...</think><answer>...</answer>"},
                      {RewardType::kAnswerLine, "answer_line", "a last line \"Answer: ...\""},
                      {RewardType::kCode, "code", "the last fenced code block, run against the record's tests in the sandbox"},
                      {RewardType::kEnv, "env", "the sum of the external environment's rewards (--env-cmd)"},
                      {RewardType::kModel, "model", "a reward model's score of the conversation (--reward-model DIR)"},
                      {RewardType::kJudge, "judge", "an LLM judge's score of the response (--judge-url, --judge-template)"}});
  return table;
}

std::string default_system_prompt(RewardType type) {
  switch (type) {
    case RewardType::kBoxed: return "Please reason step by step, and put your final answer within \\boxed{}.";
    case RewardType::kThinkAnswerTags:
      return "You are a helpful assistant. The assistant first thinks about the reasoning process in the mind and then "
             "provides the user with the answer. The reasoning process and answer are enclosed within <think> </think> "
             "and <answer> </answer> tags, respectively, i.e., <think> reasoning process here </think><answer> answer "
             "here </answer>.";
    case RewardType::kCode:
      return "Write your solution as a Python program in a single ```python code block at the end of your response.";
    case RewardType::kEnv: return "";
    case RewardType::kModel: return "";
    case RewardType::kJudge: return "";
    case RewardType::kAnswerLine:
      return "Solve the problem step by step. The last line of your response should be of the form Answer: $Answer "
             "(without quotes) where $Answer is the answer to the problem.";
  }
  return "";
}

RewardResult grade_response(RewardType type, std::string_view response, std::string_view ground_truth,
                            bool truncated, const RewardScale& scale) {
  RewardResult result;
  result.truncated = truncated;
  switch (type) {
    case RewardType::kBoxed: result.extracted = extract_boxed(response); break;
    case RewardType::kThinkAnswerTags: result.extracted = extract_think_answer(response); break;
    case RewardType::kAnswerLine: result.extracted = extract_answer_line(response); break;
    case RewardType::kCode: RLCPP_CHECK(false, "code rewards run programs: use CodeReward, not grade_response");
    case RewardType::kEnv: RLCPP_CHECK(false, "environment rewards come from the environment, not grade_response");
    case RewardType::kModel: RLCPP_CHECK(false, "a reward model's scores come from the model, not grade_response");
    case RewardType::kJudge: RLCPP_CHECK(false, "a judge's scores come from the judge, not grade_response");
  }
  result.format_ok = result.extracted.has_value();
  result.correct = result.format_ok && math_equal(*result.extracted, ground_truth);
  if (truncated) {
    result.reward = scale.truncated;
  } else if (!result.format_ok) {
    result.reward = scale.format_violation;
  } else {
    result.reward = result.correct ? scale.correct : scale.wrong;
  }
  return result;
}

}  // namespace rlcpp
