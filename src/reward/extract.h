// Answer extraction from model responses, for the built-in reward types. Pure, bounded functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace rlcpp {

// Content of the last \boxed{...} or \fbox{...} (nested braces matched), or of `\boxed X` (a space,
// then up to the next '$' or the end). nullopt when there is none or its braces never close.
std::optional<std::string> extract_boxed(std::string_view text);

// <think>...</think> then <answer>...</answer>, each tag exactly once and in this order, nothing but
// whitespace before <think>, between </think> and <answer>, and after </answer>. The answer is the
// <answer> content, or the \boxed{} inside it when there is one. nullopt when the format is broken.
std::optional<std::string> extract_think_answer(std::string_view text);

// What follows the last "Answer:" on its line (DAPO-Math), trimmed, without a trailing period or
// surrounding $...$. nullopt when there is no "Answer:".
std::optional<std::string> extract_answer_line(std::string_view text);

}  // namespace rlcpp
