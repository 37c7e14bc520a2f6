// rlcpp: reinforcement-learning fine-tuning of language models. Entry point and subcommand dispatch.
#include <CLI/CLI.hpp>

#include <torch/version.h>

#include <iostream>

#include "app/commands.h"
#include "util/error.h"
#include "util/log.h"
#include "util/threads.h"

int main(int argc, char** argv) {
  rlcpp::init_logging();
  rlcpp::configure_threads();
  CLI::App app{"rlcpp: RL fine-tuning (GRPO, DAPO) of Hugging Face language models in C++"};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "print the version and exit");
  rlcpp::add_info_command(app);
  rlcpp::add_parity_command(app);
  rlcpp::add_tokenize_command(app);
  rlcpp::add_template_command(app);
  try {
    app.parse(argc, argv);
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
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
