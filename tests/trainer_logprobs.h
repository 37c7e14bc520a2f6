// The trainer's view of a generated response, for the engine tests: the log-prob of each response
// token under `model` at `temperature`, from one full forward pass over prompt + response (what
// the sampler's own log-probs must equal, the RL invariant of docs/architecture.md).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "model/transformer.h"

namespace rlcpp::testing {

inline std::vector<double> trainer_logprobs(Transformer& model, const std::vector<int32_t>& prompt,
                                            const std::vector<int32_t>& response, double temperature) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> all(prompt.begin(), prompt.end());
  all.insert(all.end(), response.begin(), response.end());
  auto ids = torch::tensor(all, torch::kInt64).unsqueeze(0);
  auto targets = torch::full_like(ids, -1);
  targets.narrow(1, 0, ids.size(1) - 1).copy_(ids.narrow(1, 1, ids.size(1) - 1));
  auto logp = model.token_logprobs(ids, targets, temperature)[0].to(torch::kFloat64).contiguous();
  const double* p = logp.data_ptr<double>();
  return {p + prompt.size() - 1, p + all.size() - 1};
}

}  // namespace rlcpp::testing
