// libFuzzer target for grading: the input is split at the first NUL into (response, ground truth)
// and graded with every reward type. No input may crash, and none may take long (-timeout).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "reward/reward.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string_view response = input.substr(0, split);
  const std::string_view truth = split == std::string_view::npos ? std::string_view("42") : input.substr(split + 1);
  for (auto type : {rlcpp::RewardType::kBoxed, rlcpp::RewardType::kThinkAnswerTags, rlcpp::RewardType::kAnswerLine}) {
    rlcpp::grade_response(type, response, truth);
  }
  return 0;
}
