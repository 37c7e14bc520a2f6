#include "reward/reward.h"

#include "reward/extract.h"
#include "reward/math_equal.h"
#include "util/error.h"

namespace rlcpp {

RewardType parse_reward_type(const std::string& name, const std::string& flag) {
  if (name == "boxed") return RewardType::kBoxed;
  if (name == "think_answer_tags") return RewardType::kThinkAnswerTags;
  if (name == "answer_line") return RewardType::kAnswerLine;
  throw_user_error("{}: unknown reward type \"{}\" (use boxed, think_answer_tags or answer_line)", flag, name);
}

std::string to_string(RewardType type) {
  switch (type) {
    case RewardType::kBoxed: return "boxed";
    case RewardType::kThinkAnswerTags: return "think_answer_tags";
    case RewardType::kAnswerLine: return "answer_line";
  }
  return "?";
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
