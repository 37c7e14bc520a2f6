#include "app/run_flags.h"

#include <fmt/format.h>

#include "util/error.h"

namespace rlcpp {

namespace {

// "-lr/--learning-rate" for "--lr,--learning-rate": how users type the reference's flags.
std::string display_flags(const std::string& flags) {
  const size_t comma = flags.find(',');
  if (comma == std::string::npos) return flags;
  std::string first = flags.substr(0, comma);
  if (first.rfind("--", 0) == 0) first = first.substr(1);
  return first + "/" + flags.substr(comma + 1);
}

}  // namespace

void add_run_flags(CLI::App* cmd, RunFlags& flags, const std::set<std::string>& only) {
  cmd->add_option("--config", flags.config_file, "YAML run file (groups runtime/model/rollout/algorithm/train/logging; "
                                                 "ChatLearn names accepted); flags override it")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--print-config", flags.print_config, "print the resolved configuration as YAML and exit");
  const RunConfig defaults;
  for (const auto& setting : run_settings()) {
    if (setting.flags.empty() || (!only.empty() && only.count(setting.name) == 0)) continue;
    const auto value = setting.get(defaults);
    // The default and the setting's name go at the end of the help's first line (an enum's values follow).
    const size_t first_line = std::min(setting.help.find('\n'), setting.help.size());
    std::string help = setting.help.substr(0, first_line);
    if (!value.is_null() && !(value.is_string() && value.get<std::string>().empty())) {
      help += fmt::format(" [{}]", value.is_string() ? value.get<std::string>() : value.dump());
    }
    help += fmt::format(" ({})", setting.name) + setting.help.substr(first_line);
    while (!help.empty() && help.back() == '\n') help.pop_back();
    auto* option = cmd->add_option(setting.flags, flags.values[setting.name], help);
    if (value.is_boolean()) option->expected(0, 1);  // "--skip-bad-lines" alone means true
    flags.options[setting.name] = option;
  }
}

RawSettings collect_run_settings(const RunFlags& flags) {
  RawSettings raw;
  if (!flags.config_file.empty()) read_run_file(flags.config_file, raw);
  for (const auto& setting : run_settings()) {
    auto it = flags.options.find(setting.name);
    if (it == flags.options.end() || it->second->count() == 0) continue;
    std::string value = flags.values.at(setting.name);
    if (value.empty() && setting.get(RunConfig{}).is_boolean()) value = "true";  // a boolean flag given alone
    raw.set_override(setting.name, value, display_flags(setting.flags));
  }
  return raw;
}

void one_minibatch_per_step(RawSettings& raw, const std::string& command) {
  raw.set("rollout.num_generations", 1, command);
  const Json batch = raw.values.contains("train.train_batch_size") ? raw.values["train.train_batch_size"] : Json(4);
  raw.set("train.train_minibatch_size", batch, "-tbs/--train-batch-size");
  if (!raw.values.contains("train.train_microbatch_size")) raw.set("train.train_microbatch_size", batch, "-tbs/--train-batch-size");
}

int64_t take_supervised_zero(RawSettings& raw) {
  if (!raw.values.contains("parallel.zero_stage")) return 0;
  const Json value = raw.values["parallel.zero_stage"];
  raw.values.erase("parallel.zero_stage");
  if (value.is_number_integer()) return value.get<int64_t>();
  const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  size_t used = 0;
  int64_t zero = -1;
  try {
    zero = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) throw_user_error("-zero/--zero-stage: expected a whole number, got '{}'", text);
  return zero;
}

void give_supervised_zero(RunConfig& config, int64_t zero) { config.parallel.zero = zero; }

}  // namespace rlcpp
