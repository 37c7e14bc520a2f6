// `rlcpp train`: GRPO/DAPO fine-tuning of a Hugging Face model on a JSONL dataset, colocated in
// one process. Every setting of the run table (rl/run_config.h) with flags is an option, with the
// reference system's short and long names; `--config run.yaml` gives them in a file.
#include <iostream>

#include "app/commands.h"
#include "app/run_flags.h"
#include "rl/colocated.h"

namespace rlcpp {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "RL fine-tuning (GRPO, DAPO, ...) of a model on a JSONL dataset");
  auto flags = std::make_shared<RunFlags>();
  add_run_flags(cmd, *flags);
  cmd->callback([flags] {
    const RawSettings raw = collect_run_settings(*flags);
    if (flags->print_config) {
      std::cout << run_config_yaml(resolve_run_config(raw, /*check_files=*/false));
      return;
    }
    run_colocated(resolve_run_config(raw));
  });
}

}  // namespace rlcpp
