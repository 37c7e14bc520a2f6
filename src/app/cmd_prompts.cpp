// `rlcpp prompts --model DIR --dataset F [-n 3]`: the prompts exactly as the trainer will see them
// (system prompt, chat template, truncation), with their token counts.
#include <fmt/format.h>

#include <iostream>

#include "app/commands.h"
#include "app/setting_flags.h"
#include "io/prompt_dataset.h"
#include "reward/reward.h"
#include "text/prompt_builder.h"
#include "text/tokenizer.h"

namespace rlcpp {

namespace {

struct PromptsArgs {
  std::string model;
  std::string dataset;
  int64_t count = 3;
  std::string system_prompt;
  bool system_prompt_set = false;
  std::string reward_type = "boxed";
  int64_t max_prompt_tokens = 0;
  std::string overflow = "truncate_left";
  bool shuffle = false;
  uint64_t seed = 42;
  bool skip_bad_lines = false;
};

void run_prompts(const PromptsArgs& args) {
  auto tokenizer = Tokenizer::from_dir(args.model);
  DatasetOptions dataset_options;
  dataset_options.skip_bad_lines = args.skip_bad_lines;
  const PromptDataset dataset = load_prompt_dataset(args.dataset, dataset_options);
  PromptOptions options;
  options.system_prompt = args.system_prompt_set ? args.system_prompt : default_system_prompt(reward_types().parse(args.reward_type, "-rt/--reward-type"));
  options.max_prompt_tokens = args.max_prompt_tokens;
  options.overflow = prompt_overflows().parse(args.overflow, "--overflow");
  options.source = args.dataset;
  PromptBuilder builder(*tokenizer, options);
  DatasetCursor cursor(static_cast<int64_t>(dataset.records.size()), args.seed, args.shuffle);
  const int64_t n = std::min<int64_t>(args.count, static_cast<int64_t>(dataset.records.size()));
  for (int64_t k = 0; k < n; ++k) {
    const PromptRecord& record = dataset.records[static_cast<size_t>(cursor.next())];
    auto prompt = builder.build(record);
    std::cout << fmt::format("--- {}:{} gt_answer={}", args.dataset, record.line, record.gt_answer);
    if (!prompt) {
      std::cout << fmt::format(" DROPPED (longer than --max-prompt-tokens {})\n", args.max_prompt_tokens);
      continue;
    }
    std::cout << fmt::format(" tokens={}{}\n", prompt->ids.size(), prompt->truncated ? " (truncated from the left)" : "");
    std::cout << (prompt->truncated ? tokenizer->decode(prompt->ids) : prompt->text) << "\n";
  }
  std::cout << fmt::format("--- {} records, {} malformed lines skipped, {} truncated, {} dropped of {} shown\n",
                           dataset.records.size(), dataset.n_bad_lines, builder.n_truncated(), builder.n_dropped(), n);
}

}  // namespace

void add_prompts_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("prompts", "print dataset prompts as the trainer will see them");
  auto args = std::make_shared<PromptsArgs>();
  cmd->add_option("--model", args->model, "model directory (tokenizer.json, tokenizer_config.json)")->required();
  cmd->add_option("--dataset", args->dataset, "JSONL dataset ({\"messages\", \"gt_answer\"} per line)")->required();
  cmd->add_option("-n", args->count, "how many prompts")->capture_default_str();
  cmd->add_option("-s,--system-prompt", args->system_prompt, "system prompt (default: the reward type's)")
      ->each([args](const std::string&) { args->system_prompt_set = true; });
  add_setting_flag(cmd, "reward.reward_type", args->reward_type);
  add_setting_flag(cmd, "rollout.max_prompt_tokens", args->max_prompt_tokens);
  add_setting_flag(cmd, "rollout.overflow", args->overflow);
  cmd->add_flag("--shuffle", args->shuffle, "walk the dataset in the seeded shuffled order");
  cmd->add_option("--seed", args->seed, "shuffle seed")->capture_default_str();
  cmd->add_flag("--skip-bad-lines", args->skip_bad_lines, "skip malformed lines with a count instead of failing");
  cmd->callback([args] { run_prompts(*args); });
}

}  // namespace rlcpp
