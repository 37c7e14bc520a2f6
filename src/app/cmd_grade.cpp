// `rlcpp grade`: grade one response or a JSONL of {"response", "gt_answer"} (a code task's record:
// {"response", "tests" | "test_code", ...}; a reward model's: {"messages" | "prompt", "response"})
// with a reward type (and optionally an external reward command, a reward model and an LLM judge), printing the
// structured result(s) as JSON, one verdict per line.
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>

#include "app/commands.h"
#include "app/setting_flags.h"
#include "reward/external.h"
#include "io/prompt_dataset.h"
#include "reward/reward_function.h"
#include "rl/rollout/model_reward.h"
#include "util/error.h"

namespace rlcpp {

namespace {

struct GradeArgs {
  std::string reward_type = "boxed";
  std::string gt;
  std::string response;
  std::string input;
  std::string output;
  bool truncated = false;
  RewardScale scale;
  std::string reward_cmd;
  double reward_cmd_weight = 1.0;
  double reward_timeout = 30.0;
  CodeRewardFlags code;
  ModelRewardOptions model;
  JudgeOptions judge;
  std::string reward_weights;
  std::string device = "cpu", dtype = "float32";
};

nlohmann::ordered_json to_json(const RewardResult& r) {
  nlohmann::ordered_json j;
  j["extracted"] = r.extracted ? nlohmann::ordered_json(*r.extracted) : nlohmann::ordered_json(nullptr);
  j["format_ok"] = r.format_ok;
  j["correct"] = r.correct;
  j["truncated"] = r.truncated;
  j["reward"] = r.reward;
  if (r.parts.size() > 1 || (r.parts.size() == 1 && r.parts.begin()->first != "accuracy")) j["parts"] = r.parts;
  if (!r.reason.empty()) j["reason"] = r.reason;
  if (!r.details.empty()) j["details"] = nlohmann::ordered_json::parse(r.details);
  return j;
}

void run_grade(const GradeArgs& args) {
  RewardOptions options;
  options.type = reward_types().parse(args.reward_type, "--reward-type");
  options.scale = args.scale;
  options.cmd = args.reward_cmd;
  options.cmd_weight = args.reward_cmd_weight;
  options.timeout = args.reward_timeout;
  options.code = args.code.options();
  options.model = args.model;
  options.judge = args.judge;
  options.weights = args.reward_weights;
  if (options.type == RewardType::kEnv) {
    throw_user_error("-rt env: an environment's rewards come from its episodes in rlcpp train; grade cannot run one");
  }
  const RewardFunction reward = make_run_reward(options, args.device, args.dtype);
  const bool code = options.type == RewardType::kCode;
  const bool answers = grades_answers(options) && !code;
  std::vector<RewardInput> inputs;
  if (!args.input.empty()) {
    std::ifstream in(args.input);
    if (!in) throw_user_error("--input: cannot open '{}'", args.input);
    std::string line;
    int64_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto json = nlohmann::json::parse(line, nullptr, false);
      const bool has_gt = json.is_object() && json.contains("gt_answer") &&
                          (json["gt_answer"].is_string() || json["gt_answer"].is_number());
      if (!json.is_object() || !json.contains("response") || !json["response"].is_string() || (!has_gt && answers)) {
        throw_user_error("{}:{}: expected {{\"response\": string, {}}}", args.input, line_no,
                         code ? "\"tests\" or \"test_code\": ..."
                              : answers ? "\"gt_answer\": string" : "\"messages\": [...] or \"prompt\": string");
      }
      RewardInput input;
      input.response = json["response"].get<std::string>();
      const std::string where = fmt::format("{}:{}", args.input, line_no);
      if (json.contains("messages")) {
        input.messages = nlohmann::json(parse_messages(nlohmann::ordered_json::parse(json["messages"].dump()), where, "messages"));
      } else if (json.contains("prompt")) {
        if (!json["prompt"].is_string()) throw_user_error("{}: \"prompt\" must be a string", where);
        input.prompt = json["prompt"].get<std::string>();
      } else if (!options.model.path.empty()) {
        throw_user_error("{}: a reward model scores a conversation: give the prompt as \"messages\" or \"prompt\"", where);
      }
      if (has_gt) input.gt_answer = json["gt_answer"].is_string() ? json["gt_answer"].get<std::string>() : json["gt_answer"].dump();
      input.truncated = json.value("truncated", false);
      for (const auto& [key, value] : json.items()) {
        if (key != "response" && key != "gt_answer" && key != "truncated" && key != "messages" && key != "prompt") {
          input.metadata[key] = value;
        }
      }
      if (code) {
        try {
          reward.check_record(input.gt_answer, input.metadata);
        } catch (const UserError& e) {
          throw_user_error("{}:{}: {}", args.input, line_no, e.what());
        }
      }
      inputs.push_back(std::move(input));
    }
  } else {
    if (args.response.empty()) throw_user_error("give a RESPONSE to grade, or --input FILE.jsonl");
    if (code) throw_user_error("-rt code grades records with their tests: give --input FILE.jsonl");
    if (!options.model.path.empty()) {
      throw_user_error("a reward model scores a conversation: give --input FILE.jsonl of {{\"messages\" or \"prompt\", \"response\"}}");
    }
    if (args.gt.empty() && answers) throw_user_error("--gt: the ground-truth answer is required with a RESPONSE");
    inputs.push_back({"", args.response, args.gt, nlohmann::json::object(), args.truncated});
  }
  const auto results = reward.score(inputs);
  std::ofstream file;
  if (!args.output.empty()) {
    file.open(args.output);
    if (!file) throw_user_error("--output: cannot write '{}'", args.output);
  }
  std::ostream& out = file.is_open() ? static_cast<std::ostream&>(file) : std::cout;
  for (const auto& r : results) out << to_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

}  // namespace

void add_grade_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("grade", "grade responses against ground-truth answers");
  auto args = std::make_shared<GradeArgs>();
  add_setting_flag(cmd, "reward.reward_type", args->reward_type);
  cmd->add_option("--gt", args->gt, "ground-truth answer (with RESPONSE)");
  cmd->add_option("response", args->response, "the response text");
  cmd->add_option("--input", args->input, "JSONL of {\"response\", \"gt_answer\"[, \"truncated\"]}");
  cmd->add_option("-o,--output", args->output, "write the JSON results here (default: stdout)");
  cmd->add_flag("--truncated", args->truncated, "the response was cut off at max_new_tokens");
  cmd->add_option("--reward-correct", args->scale.correct, "reward of a correct answer")->capture_default_str();
  cmd->add_option("--reward-wrong", args->scale.wrong, "reward of a wrong answer")->capture_default_str();
  cmd->add_option("--reward-format", args->scale.format_violation, "reward of a format violation")->capture_default_str();
  cmd->add_option("--reward-truncated", args->scale.truncated, "reward of a truncated response")->capture_default_str();
  cmd->add_option("--reward-cmd", args->reward_cmd, "external reward command (JSON lines; see docs/rewards.md)");
  cmd->add_option("--reward-cmd-weight", args->reward_cmd_weight, "its weight in the sum")->capture_default_str();
  cmd->add_option("--reward-timeout", args->reward_timeout, "seconds per reply")->capture_default_str();
  add_code_reward_flags(cmd, args->code);
  cmd->add_option("--reward-model", args->model.path,
                  "a reward model directory (rlcpp train-rm's step-N): its score of each record's conversation, as "
                  "the component \"model\" (-rt model: alone)");
  cmd->add_option("--reward-model-batch", args->model.batch, "responses per forward of the reward model")->capture_default_str();
  cmd->add_flag("--normalize-reward", args->model.normalize, "standardise its scores with its config.json's mean and std");
  cmd->add_option("--reward-clip", args->model.clip, "clip its scores to [-x, x] (0: off)")->capture_default_str();
  cmd->add_option("--judge-url", args->judge.url,
                  "an LLM judge's OpenAI-compatible servers, http://HOST:PORT[,...]: its score of each response, as the "
                  "component \"judge\" (-rt judge: alone)");
  cmd->add_option("--judge-template", args->judge.template_path,
                  "the judge's prompt, a file in which {prompt}, {response} and {answer} are filled in");
  cmd->add_option("--judge-model", args->judge.model, "the judge's served name (default: each server's first listed)");
  cmd->add_option("--judge-pattern", args->judge.pattern, "a regex whose first group is the score (default: the last number)");
  cmd->add_option("--judge-max-score", args->judge.max_score, "the judge's best score (reward = score / it)")->capture_default_str();
  cmd->add_option("--judge-max-tokens", args->judge.max_tokens, "the judge's reply at most")->capture_default_str();
  cmd->add_option("--judge-timeout", args->judge.timeout, "seconds per judgement")->capture_default_str();
  cmd->add_option("--judge-concurrency", args->judge.concurrency, "judgements in flight per server")->capture_default_str();
  cmd->add_option("--reward-weights", args->reward_weights, "the components' weights, NAME=W,... (accuracy, external, model, judge)");
  cmd->add_option("--device", args->device, "where the reward model runs")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "the reward model's dtype")->capture_default_str();
  cmd->callback([args] { run_grade(*args); });
}

}  // namespace rlcpp
