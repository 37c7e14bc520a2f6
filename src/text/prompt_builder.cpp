#include "text/prompt_builder.h"

#include <spdlog/spdlog.h>

#include "util/error.h"

namespace rlcpp {

const EnumTable<PromptOverflow>& prompt_overflows() {
  static const EnumTable<PromptOverflow> table(
      "overflow policy", {{PromptOverflow::kTruncateLeft, "truncate_left", "keep the last max-prompt-tokens tokens"},
                          {PromptOverflow::kDrop, "drop", "leave the prompt out"},
                          {PromptOverflow::kError, "error", "stop with an error naming the prompt's line"}});
  return table;
}

PromptBuilder::PromptBuilder(const Tokenizer& tokenizer, PromptOptions options)
    : tokenizer_(tokenizer), template_(tokenizer), options_(std::move(options)) {}

std::optional<BuiltPrompt> PromptBuilder::build(const PromptRecord& record) { return build(record.messages, record.line); }

std::optional<BuiltPrompt> PromptBuilder::build(const nlohmann::ordered_json& given, int64_t line,
                                                const nlohmann::ordered_json& variables) {
  nlohmann::ordered_json messages = given;
  const bool has_system = !messages.empty() && messages[0].value("role", "") == "system";
  if (!options_.system_prompt.empty() && !has_system) {
    messages.insert(messages.begin(), nlohmann::ordered_json{{"role", "system"}, {"content", options_.system_prompt}});
  }
  BuiltPrompt prompt;
  nlohmann::ordered_json all_variables = options_.template_variables;
  for (const auto& [name, value] : variables.items()) all_variables[name] = value;
  prompt.text = template_.render(messages, true, all_variables);
  prompt.ids = tokenizer_.encode(prompt.text, false);  // the template already holds BOS where the model wants it
  prompt.messages = messages;
  int64_t limit = options_.max_prompt_tokens;
  std::string why = fmt::format("-mpt {}", limit);
  if (options_.context_tokens > 1 && (limit <= 0 || limit > options_.context_tokens - 1)) {
    limit = options_.context_tokens - 1;
    why = fmt::format("the model's max_position_embeddings {} less one position for the response", options_.context_tokens);
  }
  const auto n = static_cast<int64_t>(prompt.ids.size());
  if (limit > 0 && n > limit) {
    const std::string where = fmt::format("{}:{}", options_.source.empty() ? "prompt" : options_.source, line);
    if (options_.overflow == PromptOverflow::kError) {
      throw_user_error("{}: the prompt is {} tokens, over the limit of {} ({}); shorten it, or give --overflow "
                       "truncate_left or drop", where, n, limit, why);
    }
    if (options_.overflow == PromptOverflow::kDrop) {
      ++n_dropped_;
      return std::nullopt;
    }
    if (n_truncated_ == 0) {
      spdlog::warn("{}: the prompt is {} tokens, over the limit of {} ({}): its first {} tokens are cut (--overflow "
                   "truncate_left; drop or error are the others); further prompts cut are counted", where, n, limit,
                   why, n - limit);
    }
    prompt.ids.erase(prompt.ids.begin(), prompt.ids.end() - limit);
    prompt.truncated = true;
    ++n_truncated_;
  }
  return prompt;
}

}  // namespace rlcpp
