// `rlcpp merge BASE ADAPTER OUT`: a PEFT LoRA adapter merged into its base model (W + scaling B A),
// written as a Hugging Face model directory any loader reads, with the base's tokenizer files.
#include <fmt/format.h>

#include "app/commands.h"
#include "io/checkpoint.h"
#include "model/transformer.h"
#include "util/error.h"

namespace rlcpp {

namespace fs = std::filesystem;

namespace {

struct MergeArgs {
  std::string base, adapter, out, dtype = "float32";
  std::string max_shard_size = "0";  // 0: one model.safetensors
  bool force = false;
};

// A size as transformers' max_shard_size writes it: bytes, or a number with KB/MB/GB (powers of 1000)
// or KiB/MiB/GiB (powers of 1024).
uint64_t parse_byte_size(const std::string& text, const std::string& flag) {
  std::size_t end = 0;
  double value = -1;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
  }
  std::string unit = text.substr(std::min(end, text.size()));
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::toupper(c); });
  static const std::map<std::string, double> units = {{"", 1},        {"B", 1},          {"KB", 1e3},
                                                      {"MB", 1e6},    {"GB", 1e9},       {"KIB", 1024.0},
                                                      {"MIB", 1048576.0}, {"GIB", 1073741824.0}};
  const auto it = units.find(unit);
  if (end == 0 || value < 0 || it == units.end()) {
    throw_user_error("{} {}: not a size; give bytes or a number with KB, MB, GB, KiB, MiB or GiB (e.g. 5GB)", flag, text);
  }
  return static_cast<uint64_t>(value * it->second);
}

void run_merge(const MergeArgs& a) {
  if (!fs::exists(fs::path(a.base) / "config.json")) throw_user_error("BASE {}: no config.json there; give the base model directory", a.base);
  if (!is_peft_adapter_dir(a.adapter)) {
    throw_user_error("ADAPTER {}: no {} there; give a LoRA checkpoint (step-N of a run with --lora-rank)", a.adapter,
                     kAdapterConfigFile);
  }
  if (fs::exists(fs::path(a.out) / "config.json") && !a.force) {
    throw_user_error("OUT {}: already holds a model; pass --force to overwrite it", a.out);
  }
  ModelOptions options;
  options.dtype = dtypes().parse(a.dtype, "--dtype");
  auto model = Transformer::from_pretrained(a.base, options);
  model->load_adapter(a.adapter);
  model->save_pretrained(a.out, parse_byte_size(a.max_shard_size, "--max-shard-size"));
  copy_tokenizer_files(a.base, a.out);
  fmt::print("{}: {} merged into {} ({} adapted layers, rank {}, scaling {})\n", a.out, a.adapter, a.base,
             model->trained_weights().size() / 2, model->lora().rank, model->lora().scaling());
}

}  // namespace

void add_merge_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("merge", "merge a LoRA adapter (PEFT directory) into its base model: a full HF model");
  auto a = std::make_shared<MergeArgs>();
  cmd->add_option("BASE", a->base, "the base model directory")->required();
  cmd->add_option("ADAPTER", a->adapter, "the adapter directory (adapter_config.json, adapter_model.safetensors)")->required();
  cmd->add_option("OUT", a->out, "output model directory")->required();
  cmd->add_option("--dtype", a->dtype, "dtype of the merged weights: " + dtypes().names())->capture_default_str();
  cmd->add_option("--max-shard-size", a->max_shard_size,
                  "write the weights in shards of at most this size with an index, as transformers' max_shard_size "
                  "(bytes, or 200KB, 5GB, 2GiB); 0: one model.safetensors")->capture_default_str();
  cmd->add_flag("--force", a->force, "overwrite a model already in OUT");
  cmd->callback([a] { run_merge(*a); });
}

}  // namespace rlcpp
