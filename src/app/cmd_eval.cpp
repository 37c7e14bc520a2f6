// `rlcpp eval`: a model directory on a prompt dataset with the reference system's eval sampling
// (temperature 0.6, one sample per prompt), graded with a reward type: accuracy, pass@n, format
// accuracy, mean response length, truncation; per-sample JSONL with -o.
#include <fmt/format.h>

#include <fstream>
#include <iostream>

#include "app/commands.h"
#include "rl/evaluate.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"

namespace rlcpp {

namespace {

struct EvalArgs {
  std::string model, dataset, reward_type = "boxed", output, dtype = "float32", device = "cpu";
  std::optional<std::string> system_prompt;
  EvalOptions options;
  bool greedy = false, json = false;
  int64_t max_prompt_tokens = 0, kv_cache_mb = 1024;
};

void run_eval(EvalArgs a) {
  const RewardType type = parse_reward_type(a.reward_type, "-rt/--reward-type");
  auto tokenizer = Tokenizer::from_dir(a.model);
  auto model = Transformer::from_pretrained(a.model, model_options_from_flags(a.dtype, a.device));
  model->eval();
  const PromptDataset dataset = load_prompt_dataset(a.dataset);
  PromptOptions prompt_options;
  prompt_options.system_prompt = a.system_prompt ? *a.system_prompt : default_system_prompt(a.reward_type);
  prompt_options.max_prompt_tokens = a.max_prompt_tokens;
  PromptBuilder prompts(*tokenizer, prompt_options);
  if (a.greedy) a.options.sampling.temperature = 0;
  a.options.sampling.stop_token_ids = default_stop_tokens(model->config(), *tokenizer);
  EngineConfig engine_config;
  engine_config.kv_cache_mb = a.kv_cache_mb;
  Engine engine(model, engine_config, tokenizer);
  RewardFunction reward;
  reward.add_builtin("accuracy", type, 1.0);
  const EvalResult r = evaluate(engine, prompts, dataset, reward, a.options);
  if (!a.output.empty()) {
    std::string text;
    for (const auto& s : r.per_sample) {
      nlohmann::ordered_json line = {{"line", s.line},         {"prompt", s.prompt},       {"response", s.response},
                                     {"gt_answer", s.gt_answer}, {"extracted", s.extracted}, {"correct", s.correct},
                                     {"format_ok", s.format_ok}, {"truncated", s.truncated}, {"tokens", s.tokens},
                                     {"reward", s.reward}};
      text += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    write_file_atomic(a.output, text);
  }
  if (a.json) {
    std::cout << r.summary().dump() << "\n";
    return;
  }
  std::cout << fmt::format("{}: {} prompts x {} ({})\n  accuracy        {:.1f}%\n  pass@{}          {:.1f}%\n"
                           "  format accuracy {:.1f}%\n  mean length     {:.1f} tokens\n  truncated       {:.1f}%\n"
                           "  time            {:.1f} s\n",
                           a.dataset, r.prompts, a.options.n,
                           a.options.sampling.temperature > 0 ? fmt::format("temperature {}", a.options.sampling.temperature)
                                                              : std::string("greedy"),
                           100 * r.accuracy, a.options.n, 100 * r.pass_at_n, 100 * r.format_accuracy,
                           r.response_length_mean, 100 * r.truncated_fraction, r.seconds);
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "accuracy of a model on a prompt dataset (generate + grade)");
  auto a = std::make_shared<EvalArgs>();
  a->options.sampling.temperature = 0.6;
  a->options.sampling.max_new_tokens = 1024;
  cmd->add_option("-m,--model", a->model, "Hugging Face model directory")->required();
  cmd->add_option("-d,--dataset", a->dataset, "JSONL of prompts with gt_answer")->required();
  cmd->add_option("--rt,--reward-type", a->reward_type, "boxed | think_answer_tags | answer_line")->capture_default_str();
  cmd->add_option("-n,--eval-n", a->options.n, "samples per prompt (pass@n)")->capture_default_str();
  cmd->add_option("--temp,--temperature", a->options.sampling.temperature, "sampling temperature")->capture_default_str();
  cmd->add_flag("--eval-greedy,--greedy", a->greedy, "greedy decoding");
  cmd->add_option("--topp,--top-p", a->options.sampling.top_p, "1: off")->capture_default_str();
  cmd->add_option("--mnt,--max-new-tokens", a->options.sampling.max_new_tokens)->capture_default_str();
  cmd->add_option("--limit", a->options.limit, "only the first N prompts (0: all)")->capture_default_str();
  cmd->add_option("--seed", a->options.seed, "sampling seed")->capture_default_str();
  cmd->add_option("-s,--system-prompt", a->system_prompt, "system prompt (default: the reward type's)");
  cmd->add_option("--mpt,--max-prompt-tokens", a->max_prompt_tokens, "truncate prompts from the left (0: off)");
  cmd->add_option("-o,--output", a->output, "per-sample JSONL");
  cmd->add_flag("--json", a->json, "print the summary as one JSON object");
  cmd->add_option("--dtype", a->dtype, "float32 | bfloat16")->capture_default_str();
  cmd->add_option("--device", a->device, "cpu | cuda | cuda:N")->capture_default_str();
  cmd->add_option("--kv-cache-mb", a->kv_cache_mb, "KV cache budget")->capture_default_str();
  cmd->callback([a] { run_eval(*a); });
}

}  // namespace rlcpp
