// rlcpp: reinforcement-learning fine-tuning of language models. Entry point and subcommand dispatch.
#include <CLI/CLI.hpp>

#include <torch/version.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "app/commands.h"
#include "util/error.h"
#include "util/log.h"
#include "util/threads.h"

namespace {

// The reference system's flags are argparse-style multi-letter single-dash names (-rt, -mpt, -tbs).
// CLI11 takes one-letter short names only, so each such flag is declared as a long name (--rt) and
// its single-dash spelling rewritten here. One letter after a dash, and negative numbers, are left alone.
std::vector<std::string> rewrite_single_dash_long_options(int argc, char** argv) {
  std::vector<std::string> args;
  for (int k = 1; k < argc; ++k) {
    std::string a = argv[k];
    const size_t name_end = a.find('=');
    const size_t name_len = (name_end == std::string::npos ? a.size() : name_end) - 1;
    if (a.size() > 2 && a[0] == '-' && a[1] != '-' && std::isalpha(static_cast<unsigned char>(a[1])) && name_len > 1) {
      a.insert(a.begin(), '-');
    }
    args.push_back(a);
  }
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  rlcpp::prepare_process(argv);  // may run this program again (OpenMP's wait policy)
  rlcpp::init_logging();
  rlcpp::configure_threads();
  CLI::App app{"rlcpp: RL fine-tuning (GRPO, DAPO) of Hugging Face language models in C++", "rlcpp"};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "print the version and exit");
  rlcpp::add_info_command(app);
  rlcpp::add_parity_command(app);
  rlcpp::add_tokenize_command(app);
  rlcpp::add_template_command(app);
  rlcpp::add_prompts_command(app);
  rlcpp::add_generate_command(app);
  rlcpp::add_grade_command(app);
  rlcpp::add_train_command(app);
  rlcpp::add_init_command(app);
  rlcpp::add_merge_command(app);
  rlcpp::add_sft_command(app);
  rlcpp::add_train_rm_command(app);
  rlcpp::add_eval_command(app);
  rlcpp::add_report_command(app);
  rlcpp::add_serve_command(app);
  try {
    app.parse(rewrite_single_dash_long_options(argc, argv));
    if (show_version) {
      std::cout << "rlcpp " << RLCPP_VERSION << " (LibTorch " << TORCH_VERSION << ")\n";
      return 0;
    }
    if (app.get_subcommands().empty()) {
      std::cout << app.help();
      return 0;
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const rlcpp::UserError& e) {
    std::cerr << std::string("error: ") + e.what() + "\n";  // one write: ranks share the launcher's stream
    return 2;
  } catch (const std::exception& e) {
    std::cerr << std::string("internal error: ") + e.what() + "\n";
    return 3;
  }
  return 0;
}
