#include "reward/reward.h"

#include "reward/extract.h"
#include "reward/math_equal.h"
#include "util/error.h"

namespace rlcpp {

const EnumTable<RewardType>& reward_types() {
  static const EnumTable<RewardType> table(
      "reward type", {{RewardType::kBoxed, "boxed", "the last \\boxed{...} of the response"},
                      {RewardType::kThinkAnswerTags, "think_answer_tags", "<think>...</think><answer>...</answer>"},
                      {RewardType::kAnswerLine, "answer_line", "a last line \"Answer: ...\""}});
  return table;
}

RewardResult grade_response(RewardType type, std::string_view response, std::string_view ground_truth,
                            bool truncated, const RewardScale& scale) {
  RewardResult result;
  result.truncated = truncated;
  switch (type) {
    case RewardType::kBoxed: result.extracted = extract_boxed(response); break;
    case RewardType::kThinkAnswerTags: result.extracted = extract_think_answer(response); break;
    case RewardType::kAnswerLine: result.extracted = extract_answer_line(response); break;
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
