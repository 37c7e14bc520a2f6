// `rlcpp train`: GRPO/DAPO fine-tuning of a Hugging Face model on a JSONL dataset, colocated in
// one process. Every setting of the run table (rl/run_config.h) with flags becomes an option here
// with the reference system's short and long names; `--config run.yaml` gives the same settings
// in a file, and flags override it.
#include <fmt/format.h>

#include <iostream>
#include <map>

#include "app/commands.h"
#include "rl/colocated.h"
#include "rl/run_config.h"
#include "util/error.h"

namespace rlcpp {

namespace {

struct TrainArgs {
  std::string config_file;
  bool print_config = false;
  std::map<std::string, std::string> values;      // setting name -> flag value
  std::map<std::string, CLI::Option*> options;    // setting name -> its option
};

// "-lr/--learning-rate" for "--lr,--learning-rate": how users type the reference's flags.
std::string display_flags(const std::string& flags) {
  const size_t comma = flags.find(',');
  if (comma == std::string::npos) return flags;
  std::string first = flags.substr(0, comma);
  if (first.rfind("--", 0) == 0) first = first.substr(1);
  return first + "/" + flags.substr(comma + 1);
}

void run_train(const TrainArgs& args) {
  RawSettings raw;
  if (!args.config_file.empty()) read_run_file(args.config_file, raw);
  for (const auto& setting : run_settings()) {
    auto it = args.options.find(setting.name);
    if (it == args.options.end() || it->second->count() == 0) continue;
    raw.set_override(setting.name, args.values.at(setting.name), display_flags(setting.flags));
  }
  if (args.print_config) {
    // Print what the sources say even before the files exist: resolve without the file checks.
    std::cout << run_config_yaml(resolve_run_config(raw, /*check_files=*/false));
    return;
  }
  run_colocated(resolve_run_config(raw));
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "RL fine-tuning (GRPO, DAPO, ...) of a model on a JSONL dataset");
  auto args = std::make_shared<TrainArgs>();
  cmd->add_option("--config", args->config_file, "YAML run file (groups runtime/model/rollout/algorithm/train/logging; "
                                                 "ChatLearn names accepted); flags override it")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--print-config", args->print_config, "print the resolved configuration as YAML and exit");
  const RunConfig defaults;
  for (const auto& setting : run_settings()) {
    if (setting.flags.empty()) continue;
    const auto value = setting.get(defaults);
    std::string help = setting.help;
    if (!value.is_null() && !(value.is_string() && value.get<std::string>().empty())) {
      help += fmt::format(" [{}]", value.is_string() ? value.get<std::string>() : value.dump());
    }
    help += fmt::format(" ({})", setting.name);
    args->options[setting.name] = cmd->add_option(setting.flags, args->values[setting.name], help);
  }
  cmd->callback([args] { run_train(*args); });
}

}  // namespace rlcpp
