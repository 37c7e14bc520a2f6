#include "algo/preference_loss.h"

#include <torch/torch.h>

namespace rlcpp {

torch::Tensor bradley_terry_loss(const torch::Tensor& chosen, const torch::Tensor& rejected, const torch::Tensor& margin,
                                 const PreferenceLossConfig& config) {
  // log σ(x) = -softplus(-x): exact for large |x| on both sides.
  auto loss = torch::softplus(-(chosen - rejected - margin));
  if (config.center_coef != 0) loss = loss + config.center_coef * (chosen + rejected).square();
  return loss;
}

}  // namespace rlcpp
