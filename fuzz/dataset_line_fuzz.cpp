// libFuzzer target for dataset lines: each input is one JSONL record, parsed as a prompt (RL,
// evaluation), as an open prompt (a reward model's), as a chat (SFT) and as a preference pair
// (train-rm). A malformed record is a UserError naming the line; nothing may crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/prompt_dataset.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  for (auto kind : {rlcpp::DatasetKind::kPrompts, rlcpp::DatasetKind::kOpenPrompts, rlcpp::DatasetKind::kChats}) {
    try {
      rlcpp::parse_prompt_record(line, "fuzz.jsonl:1", kind);
    } catch (const rlcpp::UserError&) {
    }
  }
  try {
    rlcpp::parse_preference_record(line, "fuzz.jsonl:1");
  } catch (const rlcpp::UserError&) {
  }
  return 0;
}
