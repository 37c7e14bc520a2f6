// The reward group's settings: the built-in grader, the external command, code tests, the reward
// model and the LLM judge, and the components' weights.
#include "rl/config/setting_builders.h"
#include "rl/config/setting_choices.h"

namespace rlcpp {

void add_reward_settings(std::vector<Setting>& s) {
  using C = RunConfig;
  s.push_back(enum_setting("reward.reward_type", "--rt,--reward-type", "the built-in grader", reward_types(),
                           [](C& c) -> RewardType& { return c.reward.type; }));
  s.push_back(string_setting("reward.reward_cmd", "--reward-cmd", "external reward command, added to the built-in reward",
                             [](C& c) -> std::string& { return c.reward.cmd; }));
  s.push_back(double_setting("reward.reward_timeout", "--reward-timeout",
                             "seconds the external reward command has for each reply (then it is restarted)",
                             [](C& c) -> double& { return c.reward.timeout; }, kPositive));
  s.push_back(enum_setting("reward.code_reward", "--code-reward", "-rt code: what the tests' outcome is worth",
                           code_reward_modes(), [](C& c) -> CodeRewardMode& { return c.reward.code.mode; }));
  s.push_back(int_setting("reward.sandbox_workers", "--sandbox-workers",
                          "-rt code: sandboxed programs run in parallel (0: one per core)",
                          [](C& c) -> int64_t& { return c.reward.code.workers; }, 0, {}, true));
  s.push_back(double_setting("reward.sandbox_time_limit", "--sandbox-time-limit",
                             "-rt code: seconds (wall and CPU) of one program run, unless its record gives time_limit",
                             [](C& c) -> double& { return c.reward.code.time_limit; }, kPositive));
  s.push_back(int_setting("reward.sandbox_memory_mb", "--sandbox-memory-mb",
                          "-rt code: address space (MB) of one program run, unless its record gives memory_limit_mb",
                          [](C& c) -> int64_t& { return c.reward.code.memory_mb; }, 16, {}));
  s.push_back(double_setting("reward.reward_cmd_weight", "--reward-cmd-weight", "the external reward's weight in the sum",
                             [](C& c) -> double& { return c.reward.cmd_weight; }, kAnyNumber));
  s.push_back(string_setting("reward.reward_model", "--reward-model",
                             "a reward model (...ForSequenceClassification directory, as rlcpp train-rm writes): its score "
                             "of each conversation is added as the component \"model\" (-rt model: alone)",
                             [](C& c) -> std::string& { return c.reward.model.path; }));
  s.push_back(dtype_setting("reward.reward_model_dtype", "--reward-model-dtype",
                            "the reward model's weights and compute (default: --dtype)",
                            [](C& c) -> std::string& { return c.reward.model.dtype; }));
  s.push_back(int_setting("reward.reward_model_batch", "--reward-model-batch", "responses per forward of the reward model",
                          [](C& c) -> int64_t& { return c.reward.model.batch; }, 1, {}, true));
  s.push_back(bool_setting("reward.normalize_reward", "--normalize-reward",
                           "the reward model's scores standardised with the mean and std its config.json holds (rlcpp "
                           "train-rm writes them; OpenRLHF's --normalize_reward)",
                           [](C& c) -> bool& { return c.reward.model.normalize; }));
  s.push_back(double_setting("reward.reward_clip", "--reward-clip",
                             "the reward model's scores clipped to [-x, x], after --normalize-reward (0: not clipped; "
                             "OpenRLHF's reward_clip_range)",
                             [](C& c) -> double& { return c.reward.model.clip; }, kNonNegative));
  s.push_back(string_setting("reward.judge_url", "--judge-url",
                             "an LLM judge: OpenAI-compatible servers (rlcpp serve, vLLM, SGLang) at http://HOST:PORT[,...] "
                             "score each response through --judge-template, added as the component \"judge\" (-rt judge: alone)",
                             [](C& c) -> std::string& { return c.reward.judge.url; }));
  s.push_back(string_setting("reward.judge_template", "--judge-template",
                             "the judge's prompt, a text file in which {prompt}, {response} and {answer} (the record's "
                             "gt_answer) are filled in; sent as one user message",
                             [](C& c) -> std::string& { return c.reward.judge.template_path; }));
  s.push_back(string_setting("reward.judge_model", "--judge-model",
                             "the judge's served model name (default: each server's first of /v1/models)",
                             [](C& c) -> std::string& { return c.reward.judge.model; }));
  s.push_back(string_setting("reward.judge_pattern", "--judge-pattern",
                             "a regular expression whose first group is the score in the judge's reply (default: the "
                             "reply's last number)",
                             [](C& c) -> std::string& { return c.reward.judge.pattern; }));
  s.push_back(double_setting("reward.judge_max_score", "--judge-max-score",
                             "the judge's best score: the reward is score / this, clipped to [0, 1]",
                             [](C& c) -> double& { return c.reward.judge.max_score; }, kPositive));
  s.push_back(int_setting("reward.judge_max_tokens", "--judge-max-tokens", "the judge's reply at most, in tokens",
                          [](C& c) -> int64_t& { return c.reward.judge.max_tokens; }, 1));
  s.push_back(double_setting("reward.judge_timeout", "--judge-timeout",
                             "seconds a judge server has for one judgement before it goes to another",
                             [](C& c) -> double& { return c.reward.judge.timeout; }, kPositive, {}, true));
  s.push_back(int_setting("reward.judge_concurrency", "--judge-concurrency", "judgements in flight at one judge server",
                          [](C& c) -> int64_t& { return c.reward.judge.concurrency; }, 1, {}, true));
  s.push_back(string_setting("reward.reward_weights", "--reward-weights",
                             "the reward components' weights in the sum, NAME=W,... over accuracy (the -rt grader), "
                             "external (--reward-cmd), model (--reward-model) and judge (--judge-url); default 1 each "
                             "(--reward-cmd-weight for external)",
                             [](C& c) -> std::string& { return c.reward.weights; }));
}

}  // namespace rlcpp
