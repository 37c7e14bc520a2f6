// A Jinja2 subset sufficient for the chat templates of Qwen2.5, Qwen3, Llama 3.x and DeepSeek as
// published: for/if/elif/else/set (also block set and namespace attributes), macros, break/continue,
// loop.*, slicing, filters, tests, string/dict methods and raise_exception, with the whitespace
// rules transformers uses (trim_blocks, lstrip_blocks, `-` markers). A construct outside the
// subset is a UserError naming it and its line:column.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace rlcpp::jinja {

struct Program;

class Template {
 public:
  explicit Template(const std::string& source);
  ~Template();
  Template(Template&&) noexcept;
  // Renders with the given variables (a JSON object). raise_exception() in the template and
  // runtime type errors are UserErrors naming the template position.
  std::string render(const nlohmann::ordered_json& variables) const;

 private:
  std::unique_ptr<Program> program_;
};

}  // namespace rlcpp::jinja
