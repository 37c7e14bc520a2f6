// `rlcpp generate`: sample from a Hugging Face model with the engine, for one prompt or a dataset,
// printing responses or writing one JSON object per sample.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>

#include "app/commands.h"
#include "app/setting_flags.h"
#include "engine/engine.h"
#include "io/prompt_dataset.h"
#include "text/prompt_builder.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace rlcpp {

namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string dataset;
  int64_t limit = 0;
  int64_t n = 1;
  SamplingParams sampling;
  std::vector<std::string> stop;
  uint64_t seed = 0;
  std::string output;
  bool raw = false;
  std::string system_prompt;
  EngineFlags engine;
  int64_t max_prompt_tokens = 0;
  std::string overflow = "truncate_left";
};

void run_generate(GenerateArgs args) {
  if (args.prompt.empty() == args.dataset.empty()) {
    throw_user_error("give exactly one of --prompt TEXT or --dataset FILE.jsonl");
  }
  if (args.n < 1) throw_user_error("-n {}: the number of samples per prompt must be at least 1", args.n);
  auto tokenizer = Tokenizer::from_dir(args.model);
  auto model = Transformer::from_pretrained(args.model, args.engine.model_options());
  model->eval();
  std::vector<PromptRecord> records;
  if (!args.dataset.empty()) {
    records = load_prompt_dataset(args.dataset).records;
    if (args.limit > 0 && static_cast<int64_t>(records.size()) > args.limit) records.resize(static_cast<size_t>(args.limit));
  } else {
    PromptRecord record;
    record.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", args.prompt}}});
    records.push_back(record);
  }
  args.sampling.stop_token_ids = default_stop_tokens(model->config(), *tokenizer);
  args.sampling.stop_strings = args.stop;
  PromptOptions prompt_options;
  prompt_options.system_prompt = args.system_prompt;
  prompt_options.max_prompt_tokens = args.max_prompt_tokens;
  prompt_options.context_tokens = model->config().max_position_embeddings;
  prompt_options.overflow = prompt_overflows().parse(args.overflow, "--overflow");
  prompt_options.source = args.dataset;
  PromptBuilder builder(*tokenizer, prompt_options);
  std::vector<GenerationRequest> requests;
  std::vector<std::string> prompt_texts;
  for (size_t k = 0; k < records.size(); ++k) {
    GenerationRequest request;
    if (args.raw) {
      prompt_texts.push_back(records[k].messages.back()["content"].get<std::string>());
      request.prompt_ids = tokenizer->encode(prompt_texts.back(), true);
    } else {
      auto built = builder.build(records[k]);
      prompt_texts.push_back(built->text);
      request.prompt_ids = built->ids;
    }
    request.params = args.sampling;
    request.n = args.n;
    request.seed = args.seed + k;
    requests.push_back(std::move(request));
  }
  Engine engine(model, args.engine.engine_config(), tokenizer);
  const auto samples = engine.generate(requests);
  std::ofstream file;
  if (!args.output.empty()) {
    file.open(args.output);
    if (!file) throw_user_error("--output: cannot write '{}'", args.output);
  }
  for (const auto& s : samples) {
    const auto& request = requests[static_cast<size_t>(s.request)];
    if (file.is_open()) {
      nlohmann::ordered_json line;
      line["request"] = s.request;
      line["sample"] = s.sample;
      line["prompt"] = prompt_texts[static_cast<size_t>(s.request)];
      line["response"] = s.text;
      line["prompt_ids"] = request.prompt_ids;
      line["response_ids"] = s.token_ids;
      line["logprobs"] = s.logprobs;
      line["finish_reason"] = to_string(s.finish_reason);
      line["policy_version"] = s.policy_version;
      if (!args.dataset.empty()) line["gt_answer"] = records[static_cast<size_t>(s.request)].gt_answer;
      file << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      std::cout << fmt::format("=== prompt {} sample {} ({} tokens, {})\n{}\n", s.request, s.sample, s.token_ids.size(),
                               to_string(s.finish_reason), s.text);
    }
  }
  const auto& stats = engine.last_stats();
  std::cerr << fmt::format("{} samples, {} prompt + {} generated tokens in {:.2f} s ({:.1f} tokens/s), {} preemptions, "
                           "KV cache {:.0f} MiB\n",
                           samples.size(), stats.n_prompt_tokens, stats.n_generated_tokens, stats.seconds,
                           stats.n_generated_tokens / std::max(stats.seconds, 1e-9), stats.scheduler.n_preemptions,
                           stats.kv_cache_bytes / 1048576.0);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "sample responses from a model (engine with paged KV cache)");
  auto args = std::make_shared<GenerateArgs>();
  add_setting_flag(cmd, "model.path", args->model)->required();
  cmd->add_option("--prompt", args->prompt, "one prompt (a user message)");
  cmd->add_option("-d,--dataset", args->dataset, "JSONL of prompts ({\"messages\", \"gt_answer\"})");
  cmd->add_option("--limit", args->limit, "only the first N dataset records (0: all)");
  cmd->add_option("-n,-g,--num-generations", args->n, "samples per prompt")->capture_default_str();
  add_setting_flag(cmd, "rollout.temperature", args->sampling.temperature);
  add_setting_flag(cmd, "rollout.top_k", args->sampling.top_k);
  add_setting_flag(cmd, "rollout.top_p", args->sampling.top_p);
  cmd->add_option("--min-p", args->sampling.min_p, "0: off")->capture_default_str();
  add_setting_flag(cmd, "rollout.max_new_tokens", args->sampling.max_new_tokens);
  cmd->add_option("--stop", args->stop, "stop strings (checked on the decoded text)");
  cmd->add_option("--seed", args->seed, "sample s of prompt k uses seed (seed + k, s)")->capture_default_str();
  cmd->add_option("-o,--output", args->output, "write one JSON object per sample here");
  cmd->add_flag("--raw", args->raw, "no chat template: the text is the prompt (BOS added as the tokenizer says)");
  cmd->add_option("-s,--system-prompt", args->system_prompt, "system prompt (default: none)");
  add_setting_flag(cmd, "rollout.max_prompt_tokens", args->max_prompt_tokens);
  add_setting_flag(cmd, "rollout.overflow", args->overflow);
  add_engine_flags(cmd, args->engine);
  cmd->callback([args] { run_generate(*args); });
}

}  // namespace rlcpp
