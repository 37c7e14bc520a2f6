// The real tokenizers of tests/data/tokenizers (qwen3, llama3_1, deepseek_v3) for the C++ tests.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include "text/tokenizer.h"
#include "util/file.h"

namespace rlcpp::testing {

// The tokenizer `name`, with its chat template replaced by `template_file` (under
// tests/data/templates: llama3_1's own config carries a shortened one) when given, or removed when
// `template_file` is "chatml".
inline std::shared_ptr<Tokenizer> real_tokenizer(const std::string& name, const std::string& template_file = "") {
  const std::filesystem::path dir = std::filesystem::path(RLCPP_SOURCE_DIR) / "tests/data/tokenizers" / name;
  auto config = nlohmann::json::parse(read_file(dir / "tokenizer_config.json"));
  if (template_file == "chatml") {
    config.erase("chat_template");
  } else if (!template_file.empty()) {
    config["chat_template"] = read_file(std::filesystem::path(RLCPP_SOURCE_DIR) / "tests/data/templates" / template_file);
  }
  return std::make_shared<Tokenizer>(read_file(dir / "tokenizer.json"), config.dump(), dir.string());
}

}  // namespace rlcpp::testing
