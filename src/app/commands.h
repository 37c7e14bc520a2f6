// The subcommands of the `rlcpp` binary. Each add_* registers its options on the CLI11 app and
// the callback that runs it.
#pragma once

#include <CLI/App.hpp>

namespace rlcpp {

void add_info_command(CLI::App& app);
void add_parity_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_template_command(CLI::App& app);
void add_prompts_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_grade_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_init_command(CLI::App& app);
void add_merge_command(CLI::App& app);
void add_sft_command(CLI::App& app);
void add_train_rm_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_serve_command(CLI::App& app);

}  // namespace rlcpp
