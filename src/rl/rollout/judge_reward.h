// Rewards from an LLM judge (-rt judge, or --judge-url beside other rewards): each response is put
// into the judge's prompt template ({prompt}: the last user message, or the prompt's text;
// {response}; {answer}: the record's gt_answer) and sent as one user message, temperature 0, to an
// OpenAI-compatible server's /v1/chat/completions (rlcpp serve, vLLM, SGLang) through the openai
// layer's server pool: several servers, the least loaded first, a failed or slow one set aside and
// its judgement sent to another. The score is read from the reply (--judge-pattern's first group,
// else the reply's last number) and scaled to [0, 1] by --judge-max-score. A reply with no score
// is reward 0 with reason "no score", never an error; a judge that cannot be reached, or that
// refuses the request (4xx), is a UserError naming it.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "openai/server_pool.h"
#include "reward/reward_function.h"

namespace rlcpp {

class JudgeReward : public RewardComponent {
 public:
  // Reads the template (a UserError names a missing file, or one without {response}).
  explicit JudgeReward(const JudgeOptions& options);
  std::vector<ComponentScore> score(const std::vector<RewardInput>& inputs) override;

  // The judge's prompt for one input: the template with its fields filled in, once each.
  std::string judge_prompt(const RewardInput& input) const;
  // The score a reply gives, if any (not yet scaled).
  std::optional<double> parse_score(const std::string& reply) const;

 private:
  // The served model name to ask server k for (--judge-model, else its first of /v1/models);
  // nothing when the server does not answer.
  std::optional<std::string> model_name(size_t server);
  // One judgement: the reply's text, from whichever server answers.
  std::string judge(const std::string& prompt, const std::atomic<bool>& abort);

  JudgeOptions options_;
  std::string template_;
  std::optional<std::regex> pattern_;
  std::unique_ptr<ServerPool> pool_;
  std::mutex names_mutex_;
  std::vector<std::string> names_;  // per server ("": not asked yet)
};

}  // namespace rlcpp
