// `rlcpp parity MODEL_DIR`: forward pass against a reference (`reference.safetensors` with
// input_ids, logits, token_logprobs; for a sequence classifier, a reward model or a PPO critic:
// input_ids and scores [B, num_labels], each row's last token scored), printing the largest differences.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <iostream>

#include "app/commands.h"
#include "app/setting_flags.h"
#include "io/safetensors.h"
#include "model/transformer.h"
#include "util/cuda_backend.h"
#include "util/error.h"
#include "util/torch_format.h"

namespace rlcpp {

namespace {

struct ParityArgs {
  std::string model_dir;
  std::string reference;  // default MODEL_DIR/reference.safetensors
  std::string dtype = "float32";
  std::string device = "cpu";
};

void run_parity(const ParityArgs& args) {
  namespace fs = std::filesystem;
  const fs::path reference = args.reference.empty() ? fs::path(args.model_dir) / "reference.safetensors"
                                                     : fs::path(args.reference);
  if (!fs::exists(reference)) throw_user_error("--reference: '{}' does not exist", reference.string());
  const ModelOptions options = model_options_from_flags(args.dtype, args.device);
  set_cuda_fp32_matmul_tf32(false);  // the reference is IEEE fp32 (or float64): compare in it
  auto start = std::chrono::steady_clock::now();
  // A sequence classifier (its config.json says so) loads as one; anything else as a causal LM.
  const fs::path config_file = fs::path(args.model_dir) / "config.json";
  const int64_t labels = fs::exists(config_file) ? ModelConfig::load(args.model_dir).num_labels : 0;
  auto model = labels > 0 ? Transformer::classifier_from_pretrained(args.model_dir, options, labels, /*seed=*/0)
                          : Transformer::from_pretrained(args.model_dir, options);
  model->eval();
  auto ref = SafetensorsFile::open(reference);
  auto ids = ref->tensor("input_ids");
  torch::NoGradGuard no_grad;
  // (name, largest difference from the reference) for each output compared.
  std::vector<std::pair<std::string, double>> diffs;
  auto compare = [&](const std::string& name, const torch::Tensor& ours) {
    if (ref->find(name) == nullptr) {
      throw_user_error("--reference '{}' has no \"{}\" for {} ({}): write it for this kind of model", reference.string(),
                       name, args.model_dir, model->config().architecture);
    }
    diffs.emplace_back(name, (ours.to(torch::kCPU).to(torch::kFloat32) - ref->tensor(name)).abs().max().item<double>());
  };
  if (model->config().classifier()) {
    compare("scores", model->scores(ids));
  } else {
    compare("logits", model->forward(ids));
    auto targets = torch::full_like(ids, -1);
    targets.narrow(1, 0, ids.size(1) - 1).copy_(ids.narrow(1, 1, ids.size(1) - 1));
    compare("token_logprobs", model->token_logprobs(ids, targets).narrow(1, 0, ids.size(1) - 1));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << fmt::format("{}: {} ({} layers, vocab {}), {} on {}, input {}\n", args.model_dir,
                           model->config().architecture, model->config().num_hidden_layers,
                           model->config().vocab_size, dtypes().name(options.dtype), args.device,
                           fmt::format("{}", ids.sizes()));
  for (const auto& [name, diff] : diffs) {
    std::cout << fmt::format("  max |{} - reference|{} = {:.3e}\n", name, std::string(name.size() < 15 ? 15 - name.size() : 1, ' '), diff);
  }
  std::cout << fmt::format("  load + forward: {:.2f} s\n", seconds);
}

}  // namespace

void add_parity_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("parity", "compare a model's logits with a reference.safetensors");
  auto args = std::make_shared<ParityArgs>();
  cmd->add_option("model_dir", args->model_dir, "model directory")->required();
  cmd->add_option("--reference", args->reference, "reference file (default MODEL_DIR/reference.safetensors)");
  add_setting_flag(cmd, "runtime.dtype", args->dtype);
  add_setting_flag(cmd, "runtime.device", args->device);
  cmd->callback([args] { run_parity(*args); });
}

}  // namespace rlcpp
