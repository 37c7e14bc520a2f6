// PPO's critic in an RL step (-a PPO): the token rewards of the step's samples, their GAE
// advantages from the critic's values, and the returns the critic regresses to.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "algo/value_loss.h"
#include "train/sample.h"

namespace rlcpp {

// Per sample and response token, the reward of each trained (model) token: the sample's reward on
// its last trained token and, with `kl_coef` != 0, −kl_coef · (old − ref) (the k1 estimate of the
// KL to the reference) on every trained token; 0 on inserted tokens. ref_logprobs may be empty
// when kl_coef is 0.
std::vector<std::vector<double>> token_rewards(const std::vector<Sample>& samples,
                                               const std::vector<std::vector<float>>& old_logprobs,
                                               const std::vector<std::vector<float>>& ref_logprobs, double kl_coef);

struct CriticTargets {
  std::vector<std::vector<double>> returns;  // per sample and response token (0 on inserted tokens)
  std::map<std::string, double> metrics;     // sums over trained tokens: values, returns, advantages, tokens
};

// Sets each sample's advantages to GAE's over its trained tokens in order (config.gamma and lam;
// inserted tokens are passed over and get 0), from `rewards` (token_rewards) and the critic's
// values before the step, and returns the returns.
CriticTargets critic_targets(std::vector<Sample>& samples, const std::vector<std::vector<float>>& values,
                             const std::vector<std::vector<double>>& rewards, const PpoConfig& config);

}  // namespace rlcpp
