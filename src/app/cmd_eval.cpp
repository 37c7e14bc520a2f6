// `rlcpp eval`: a model directory on a prompt dataset with the reference system's eval sampling
// (temperature 0.6, one sample per prompt), graded with a reward type: accuracy, pass@n, format
// accuracy, mean response length, truncation; per-sample JSONL with -o. --eval-dataset takes
// several sets as `rlcpp train -ed` does.
#include <fmt/format.h>

#include <fstream>
#include <iostream>

#include "app/commands.h"
#include "app/setting_flags.h"
#include "reward/reward.h"
#include "rl/config/run_config.h"
#include "rl/rollout/rollout.h"
#include "rl/step/evaluate.h"
#include "sandbox/sandbox_pool.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"

namespace rlcpp {

namespace fs = std::filesystem;

namespace {

struct EvalArgs {
  std::string model, dataset, eval_dataset, reward_type = "boxed", output;
  std::optional<std::string> system_prompt;
  EvalSampling options;
  bool greedy = false, json = false;
  int64_t max_prompt_tokens = 0;
  EngineFlags engine;
  std::string overflow = "truncate_left";
  CodeRewardFlags code;
  EpisodeOptions episode;  // --tools ...: prompts run as multi-turn episodes
};

void run_eval(EvalArgs a) {
  const RewardType type = reward_types().parse(a.reward_type, "-rt/--reward-type");
  auto tokenizer = Tokenizer::from_dir(a.model);
  auto model = Transformer::from_pretrained(a.model, a.engine.model_options());
  model->eval();
  if (a.dataset.empty() == a.eval_dataset.empty()) {
    throw_user_error("give -d/--dataset FILE or --ed/--eval-dataset '{{\"name\": \"path.jsonl\", ...}}' (one of them)");
  }
  EvalOptions sets_config;  // the eval sets as `rlcpp train -ed` reads them
  sets_config.dataset = a.eval_dataset;
  const auto sets = a.dataset.empty() ? eval_sets(sets_config) : std::vector<std::pair<std::string, std::string>>{{"", a.dataset}};
  PromptOptions prompt_options;
  prompt_options.system_prompt = a.system_prompt ? *a.system_prompt : default_system_prompt(type);
  prompt_options.max_prompt_tokens = a.max_prompt_tokens;
  prompt_options.context_tokens = model->config().max_position_embeddings;
  prompt_options.overflow = prompt_overflows().parse(a.overflow, "--overflow");
  if (!a.dataset.empty()) prompt_options.source = a.dataset;
  if (type == RewardType::kEnv) throw_user_error("-rt env: rlcpp eval runs no environment; grade with another -rt");
  if (type == RewardType::kModel || type == RewardType::kJudge) {
    throw_user_error("-rt {0}: rlcpp eval reports accuracy against ground-truth answers; score responses with rlcpp grade "
                     "-rt {0} ({1}) --input FILE", reward_types().name(type),
                     type == RewardType::kModel ? "--reward-model DIR" : "--judge-url URL --judge-template FILE");
  }
  std::unique_ptr<SandboxPool> tool_sandbox;
  std::unique_ptr<Agent> agent;
  if (a.episode.multi_turn()) {
    if (a.episode.tools.find("python") != std::string::npos) {
      tool_sandbox = std::make_unique<SandboxPool>(static_cast<int>(a.code.code.workers));
    }
    SandboxLimits limits;
    limits.memory_mb = a.code.code.memory_mb;
    agent = std::make_unique<Agent>(*tokenizer, a.episode, prompt_options.template_variables, tool_sandbox.get(), limits);
    prompt_options.template_variables = agent->template_variables();
    a.options.agent = agent.get();
  }
  PromptBuilder prompts(*tokenizer, prompt_options);
  if (a.greedy) a.options.sampling.temperature = 0;
  a.options.sampling.stop_token_ids = default_stop_tokens(model->config(), *tokenizer);
  Engine engine(model, a.engine.engine_config(), tokenizer);
  RewardOptions reward_options;
  reward_options.type = type;
  reward_options.code = a.code.options();
  const RewardFunction reward = make_grader(reward_options);
  nlohmann::ordered_json all = nlohmann::ordered_json::object();
  for (const auto& [name, path] : sets) {
    const EvalResult r = evaluate(engine, prompts, load_prompt_dataset(path, checked_by(reward)), reward, a.options);
    if (!a.output.empty()) {
      // One set: -o is the file; several: -o is a directory holding <set>.jsonl.
      fs::path out = a.output;
      if (!name.empty()) {
        fs::create_directories(out);
        out /= name + ".jsonl";
      }
      write_file_atomic(out, eval_samples_jsonl(r));
    }
    if (a.json) {
      all[name.empty() ? "summary" : name] = r.summary();
      continue;
    }
    std::cout << fmt::format("{}: {} prompts x {} ({})\n  accuracy        {:.1f}%\n  pass@{}          {:.1f}%\n"
                             "  maj@{}           {:.1f}%\n  format accuracy {:.1f}%\n  mean length     {:.1f} tokens\n"
                             "  truncated       {:.1f}%\n  time            {:.1f} s\n",
                             name.empty() ? path : name + " (" + path + ")", r.prompts, a.options.n,
                             a.options.sampling.temperature > 0
                                 ? fmt::format("temperature {}", a.options.sampling.temperature)
                                 : std::string("greedy"),
                             100 * r.accuracy, a.options.n, 100 * r.pass_at_n, a.options.n, 100 * r.maj_at_n,
                             100 * r.format_accuracy, r.response_length_mean, 100 * r.truncated_fraction, r.seconds);
    if (r.multi_turn) {
      std::cout << fmt::format("  tool-call rate  {:.1f}%\n  tool calls      {:.2f} per sample\n  turns           {:.2f} "
                               "per sample\n  tito mismatches {}\n", 100 * r.tool_call_rate, r.tool_calls_mean,
                               r.turns_mean, r.tito_mismatch);
    }
  }
  if (a.json) std::cout << (a.dataset.empty() ? all : all["summary"]).dump() << "\n";
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "accuracy of a model on a prompt dataset (generate + grade)");
  auto a = std::make_shared<EvalArgs>();
  a->options.sampling.temperature = 0.6;
  a->options.sampling.max_new_tokens = 1024;
  add_setting_flag(cmd, "model.path", a->model)->required();
  cmd->add_option("-d,--dataset", a->dataset, "JSONL of prompts with gt_answer");
  cmd->add_option("--ed,--eval-dataset", a->eval_dataset, "several sets as a JSON map {\"name\": \"path.jsonl\", ...}");
  add_setting_flag(cmd, "reward.reward_type", a->reward_type);
  cmd->add_option("-n,--eval-n", a->options.n, "samples per prompt (pass@n)")->capture_default_str();
  add_setting_flag(cmd, "rollout.temperature", a->options.sampling.temperature);
  cmd->add_flag("--eval-greedy,--greedy", a->greedy, "greedy decoding");
  add_setting_flag(cmd, "rollout.top_p", a->options.sampling.top_p);
  add_setting_flag(cmd, "rollout.max_new_tokens", a->options.sampling.max_new_tokens);
  cmd->add_option("--limit", a->options.limit, "only the first N prompts (0: all)")->capture_default_str();
  cmd->add_option("--seed", a->options.seed, "sampling seed")->capture_default_str();
  add_setting_flag(cmd, "rollout.system_prompt", a->system_prompt);
  add_setting_flag(cmd, "rollout.max_prompt_tokens", a->max_prompt_tokens);
  add_setting_flag(cmd, "rollout.overflow", a->overflow);
  cmd->add_option("-o,--output", a->output, "per-sample JSONL");
  cmd->add_flag("--json", a->json, "print the summary as one JSON object");
  add_engine_flags(cmd, a->engine);
  add_code_reward_flags(cmd, a->code);
  add_episode_flags(cmd, a->episode);
  cmd->callback([a] { run_eval(*a); });
}

}  // namespace rlcpp
