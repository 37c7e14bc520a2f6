// `rlcpp init`: a randomly initialised model of a given shape (a Hugging Face config.json) with a
// given tokenizer, saved as a Hugging Face directory — the starting point of a model trained from
// scratch with `rlcpp sft` / `rlcpp train`.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "app/commands.h"
#include "io/checkpoint.h"
#include "model/transformer.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/json.h"

namespace rlcpp {

namespace fs = std::filesystem;

namespace {

struct InitArgs {
  std::string config, tokenizer, out;
  uint64_t seed = 0;
  double stddev = 0;  // 0: the config's initializer_range (0.02 when absent)
  bool force = false;
};

void run_init(const InitArgs& a) {
  const Json json = load_json_file(a.config);
  const ModelConfig config = ModelConfig::from_json(json, a.config);
  const auto tokenizer = Tokenizer::from_dir(a.tokenizer);
  if (tokenizer->vocab_size() > config.vocab_size) {
    throw_user_error("{}: vocab_size {} is smaller than the tokenizer's {} tokens ({}); raise vocab_size", a.config,
                     config.vocab_size, tokenizer->vocab_size(), a.tokenizer);
  }
  if (fs::exists(fs::path(a.out) / "config.json") && !a.force) {
    throw_user_error("--out {}: already holds a model; pass --force to overwrite it", a.out);
  }
  const double stddev = a.stddev > 0 ? a.stddev : json_get_or<double>(json, "initializer_range", 0.02, a.config);
  auto model = std::make_shared<Transformer>(config, ModelOptions{});
  model->init_weights(stddev, a.seed);
  model->save_pretrained(a.out);
  copy_tokenizer_files(a.tokenizer, a.out);
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  fmt::print("{}: {} parameters, normal(0, {}) with seed {}, tokenizer of {} tokens from {}\n", a.out, n, stddev, a.seed,
             tokenizer->vocab_size(), a.tokenizer);
}

}  // namespace

void add_init_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("init", "a randomly initialised model of a given shape and tokenizer (HF directory)");
  auto a = std::make_shared<InitArgs>();
  cmd->add_option("--config", a->config, "Hugging Face config.json of the shape (qwen2, qwen3, llama)")->required();
  cmd->add_option("--tokenizer", a->tokenizer, "directory with tokenizer.json (and tokenizer_config.json)")->required();
  cmd->add_option("--out", a->out, "output model directory")->required();
  cmd->add_option("--seed", a->seed, "initialisation seed")->capture_default_str();
  cmd->add_option("--std", a->stddev, "weight std (default: the config's initializer_range, else 0.02)");
  cmd->add_flag("--force", a->force, "overwrite a model already in --out");
  cmd->callback([a] { run_init(*a); });
}

}  // namespace rlcpp
