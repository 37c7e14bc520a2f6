// Pre-tokenizers of tokenizer.json: Split (regex or string; Isolated, Removed, MergedWithPrevious,
// MergedWithNext, Contiguous; invert), ByteLevel (GPT-2 regex optional, add_prefix_space), Digits
// and Sequence. Pieces stay raw UTF-8 bytes; ByteLevel only marks that the model must read them
// through the byte-level alphabet. Any other type is a UserError naming it.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace rlcpp {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits each piece further, in place.
  virtual void split(std::vector<std::string>* pieces) const = 0;
  // True when this pre-tokenizer (or one inside it) is ByteLevel.
  virtual bool byte_level() const { return false; }
  static std::unique_ptr<PreTokenizer> from_json(const nlohmann::json& json, const std::string& where);
};

}  // namespace rlcpp
