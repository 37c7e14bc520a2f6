// The flags of a run command (`train`, `sft`): one option per setting of the run table, plus
// --config and --print-config, so every command reads its settings the same way.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "rl/config/run_config.h"

namespace rlcpp {

struct RunFlags {
  std::string config_file;
  bool print_config = false;
  std::map<std::string, std::string> values;    // setting name -> flag value
  std::map<std::string, CLI::Option*> options;  // setting name -> its option
};

// Registers the settings with flags (all, or those named in `only`) on `cmd`.
void add_run_flags(CLI::App* cmd, RunFlags& flags, const std::set<std::string>& only = {});

// The raw settings: the --config file, then the flags given.
RawSettings collect_run_settings(const RunFlags& flags);

// One-process trainings on examples (`sft`, `train-rm`; `command` names it): one example per
// "group", a step's -tbs examples one mini-batch, micro-batches of -tmbs (default -tbs).
void one_minibatch_per_step(RawSettings& raw, const std::string& command);

}  // namespace rlcpp
