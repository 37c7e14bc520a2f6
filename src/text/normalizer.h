// Normalizers of tokenizer.json: NFC/NFD/NFKC/NFKD, Lowercase, Replace, Prepend, Strip and Sequence.
// Any other type is a UserError naming it.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace rlcpp {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(const std::string& text) const = 0;
  // Builds from the "normalizer" object; null gives nullptr (no normalisation).
  static std::unique_ptr<Normalizer> from_json(const nlohmann::json& json, const std::string& where);
};

}  // namespace rlcpp
