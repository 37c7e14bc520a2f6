// One registration helper for the flags that several commands share with `rlcpp train`
// (--dtype, --temperature, --max-new-tokens, -rt, ...): the flag names and help come from the run
// settings table, so `generate`, `eval`, `parity` and `train` cannot disagree about them.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "rl/run_config.h"
#include "util/error.h"

namespace rlcpp {

// Registers run setting `name`'s flags on `cmd`, bound to `target` (with its default shown).
template <typename T>
CLI::Option* add_setting_flag(CLI::App* cmd, const std::string& name, T& target) {
  const Setting* s = find_setting(name);
  RLCPP_CHECK(s != nullptr && !s->flags.empty(), "no run setting {} with flags", name);
  std::string help = s->help;
  while (!help.empty() && help.back() == '\n') help.pop_back();
  return cmd->add_option(s->flags, target, help)->capture_default_str();
}

}  // namespace rlcpp
