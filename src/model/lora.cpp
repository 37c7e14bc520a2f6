#include "model/lora.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "util/error.h"
#include "util/json.h"

namespace rlcpp {

namespace fs = std::filesystem;

namespace {

// The last component of a dotted module name.
std::string leaf(const std::string& module) {
  const auto dot = module.rfind('.');
  return dot == std::string::npos ? module : module.substr(dot + 1);
}

std::string regex_escape(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (std::string_view("\\^$.|?*+()[]{}").find(ch) != std::string_view::npos) out += '\\';
    out += ch;
  }
  return out;
}

}  // namespace

const std::vector<std::string>& lora_module_names() {
  static const std::vector<std::string> names = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj"};
  return names;
}

bool LoraConfig::adapts(const std::string& module) const {
  if (!enabled()) return false;
  if (!name_scope.empty() && module.find(name_scope) == std::string::npos) return false;
  const std::string name = leaf(module);
  if (targets.empty()) {
    const auto& all = lora_module_names();
    return std::find(all.begin(), all.end(), name) != all.end();
  }
  return std::find(targets.begin(), targets.end(), name) != targets.end();
}

std::vector<std::string> parse_lora_targets(const std::string& text, const std::string& where) {
  std::vector<std::string> out;
  if (text == "all-linear" || text == "all_linear" || text.empty()) return out;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    std::string name = text.substr(begin, comma - begin);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    begin = comma + 1;
    if (name.empty()) continue;
    const auto& valid = lora_module_names();
    if (std::find(valid.begin(), valid.end(), name) == valid.end()) {
      throw_user_error("{}: \"{}\" is not a linear layer of these models; use all-linear or a comma-separated list of {}",
                       where, name, fmt::join(valid, ", "));
    }
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  if (out.size() == lora_module_names().size()) out.clear();  // every one: all-linear
  return out;
}

std::string lora_targets_text(const std::vector<std::string>& targets) {
  return targets.empty() ? "all-linear" : fmt::format("{}", fmt::join(targets, ","));
}

nlohmann::json peft_adapter_config(const LoraConfig& c, const std::string& base_model, bool classifier) {
  const auto& names = c.targets.empty() ? lora_module_names() : c.targets;
  nlohmann::json targets = names;
  if (!c.name_scope.empty()) {  // PEFT full-matches a string against each module's name
    targets = fmt::format(".*{}.*\\.({})", regex_escape(c.name_scope), fmt::join(names, "|"));
  }
  nlohmann::json out = {{"peft_type", "LORA"},
          {"task_type", "CAUSAL_LM"},
          {"base_model_name_or_path", base_model},
          {"r", c.rank},
          {"lora_alpha", c.scaling() * static_cast<double>(c.rank)},
          {"lora_dropout", c.dropout},
          {"target_modules", targets},
          {"bias", "none"},
          {"fan_in_fan_out", false},
          {"inference_mode", true},
          {"init_lora_weights", true},
          {"modules_to_save", nullptr},
          {"layers_to_transform", nullptr},
          {"layers_pattern", nullptr},
          {"rank_pattern", nlohmann::json::object()},
          {"alpha_pattern", nlohmann::json::object()},
          {"use_rslora", false},
          {"use_dora", false},
          {"revision", nullptr}};
  if (classifier) {
    out["task_type"] = "SEQ_CLS";
    out["modules_to_save"] = nlohmann::json::array({"score"});
  }
  return out;
}

bool is_peft_adapter_dir(const fs::path& dir) { return fs::exists(dir / kAdapterConfigFile); }

PeftAdapter read_peft_adapter(const fs::path& dir) {
  const fs::path file = dir / kAdapterConfigFile;
  const std::string where = file.string();
  const auto j = load_json_file(file);
  if (!j.is_object()) throw_user_error("{}: expected a JSON object", where);
  const auto type = json_get<std::string>(j, "peft_type", where);
  if (type != "LORA") throw_user_error("{}: peft_type {} is not supported (only LORA adapters)", where, type);
  PeftAdapter out;
  out.base_model = json_get<std::string>(j, "base_model_name_or_path", where);
  out.config.rank = json_get<int64_t>(j, "r", where);
  if (out.config.rank < 1) throw_user_error("{}: r = {} must be at least 1", where, out.config.rank);
  out.config.alpha = json_get_or<double>(j, "lora_alpha", 8.0, where);  // PEFT's default
  out.config.dropout = json_get_or<double>(j, "lora_dropout", 0.0, where);
  for (const char* unsupported : {"use_dora", "use_rslora", "fan_in_fan_out"}) {
    if (json_get_or<bool>(j, unsupported, false, where)) throw_user_error("{}: {} adapters are not supported", where, unsupported);
  }
  // A sequence classifier's score head, trained whole beside the adapters (PEFT's SEQ_CLS), is the
  // one module saved whole that loads: its weights file holds it under its own name.
  if (j.contains("modules_to_save") && !j["modules_to_save"].is_null() && !j["modules_to_save"].empty() &&
      j["modules_to_save"] != nlohmann::json::array({"score"})) {
    throw_user_error("{}: modules_to_save {} is not supported (only LoRA matrices and a classifier's \"score\" head are "
                     "loaded)", where, j["modules_to_save"].dump());
  }
  // Which modules carry an adapter is read from the weights file's keys; target_modules is checked
  // only when it is a list. PEFT matches an entry against a module name's end, and writes
  // all-linear out as every module's full name ("model.layers.1.mlp.gate_proj"): the kind is the
  // name's last part.
  if (j.contains("target_modules") && j["target_modules"].is_array()) {
    std::string list;
    for (const auto& t : j["target_modules"]) list += (list.empty() ? "" : ",") + leaf(t.get<std::string>());
    out.config.targets = parse_lora_targets(list, where + ": target_modules");
  }
  return out;
}

}  // namespace rlcpp
