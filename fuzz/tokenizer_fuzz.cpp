// libFuzzer target for tokenizer.json loading and encoding. The input is split at the first NUL
// into (tokenizer.json, text): the file is loaded (it may be rejected with a UserError), and if it
// loads, the text is encoded and decoded. Without a NUL the input is text for a fixed byte-level
// BPE tokenizer. No input may crash or run long.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "text/tokenizer.h"
#include "util/error.h"

namespace {

const char* kTokenizer = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġa": 4, "c": 5, "<0x41>": 6},
  "merges": ["a b", "Ġ a"], "byte_fallback": true},
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "decoder": {"type": "ByteLevel"},
  "added_tokens": [{"id": 7, "content": "<|im_end|>", "special": true}]})";

void exercise(const rlcpp::Tokenizer& tokenizer, const std::string& text) {
  const auto ids = tokenizer.encode(text, true);
  tokenizer.decode(ids, false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const rlcpp::Tokenizer fixed(kTokenizer, "", "fixed");
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  try {
    if (split == std::string_view::npos) {
      exercise(fixed, std::string(input));
    } else {
      rlcpp::Tokenizer loaded(std::string(input.substr(0, split)), "", "fuzz tokenizer.json");
      exercise(loaded, std::string(input.substr(split + 1)));
    }
  } catch (const rlcpp::UserError&) {
  }
  return 0;
}
