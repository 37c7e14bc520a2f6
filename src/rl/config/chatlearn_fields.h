// Every field of ChatLearn's configuration reference (docs/reference/chatlearn-config-reference.txt) and its
// fate in rlcpp, so a run file written for ChatLearn loads: implemented (the same meaning under an
// rlcpp setting), mapped (converted onto an rlcpp setting), refused (a feature that does not exist
// yet: accepted only at its "off" value, otherwise an error naming the plan for it), or meaningless
// without Ray (accepted with a one-line notice). docs/configuration.md's table is printed from this one.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "util/json.h"

namespace rlcpp {

enum class FieldFate { kImplemented, kMapped, kRefused, kNotice };

struct ChatLearnField {
  std::string name;     // as written in a ChatLearn YAML; dotted inside its nested block ("lora.lora_dim")
  std::string section;  // ChatLearn's config class: RuntimeEnvConfig, RuntimeConfig, ModelConfig, ...
  FieldFate fate = FieldFate::kNotice;
  std::string setting;  // implemented and mapped: the rlcpp setting (group.key) it sets
  std::string note;     // mapped: how; refused: why and what will implement it; notice: the notice
  std::vector<std::string> off = {};  // refused: values meaning "not used", accepted silently;
                                      // notice: values accepted (empty: any)
  // The value for `setting` (a discarded JSON value: leave the setting at its default).
  std::function<Json(const Json& value, const std::string& where)> convert = {};
};

const std::vector<ChatLearnField>& chatlearn_fields();

// The field named `key` (dotted inside a nested block), or nullptr.
const ChatLearnField* find_chatlearn_field(const std::string& key);

// docs/configuration.md's table: field, ChatLearn section, fate, rlcpp setting and note, one row per field.
std::string chatlearn_fields_markdown();

}  // namespace rlcpp
