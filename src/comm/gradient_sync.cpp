#include "comm/gradient_sync.h"
#include "util/trace.h"

#include <torch/torch.h>

namespace rlcpp {

void all_reduce_gradients(Communicator& comm, const std::vector<torch::Tensor>& params, uint64_t bucket_bytes) {
  trace::Span span("allreduce_gradients");
  if (comm.size() == 1) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> bucket;
  uint64_t used = 0;
  auto flush = [&] {
    if (bucket.empty()) return;
    std::vector<torch::Tensor> flat;
    for (auto& p : bucket) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      flat.push_back(p.grad().reshape({-1}));
    }
    auto joined = torch::cat(flat);
    comm.all_reduce_sum(joined);
    int64_t offset = 0;
    for (auto& p : bucket) {
      const int64_t n = p.numel();
      p.mutable_grad().copy_(joined.narrow(0, offset, n).view_as(p));
      offset += n;
    }
    bucket.clear();
    used = 0;
  };
  for (const auto& p : params) {
    if (!p.requires_grad()) continue;
    const uint64_t bytes = static_cast<uint64_t>(p.numel()) * p.element_size();
    if (used > 0 && used + bytes > bucket_bytes) flush();
    bucket.push_back(p);
    used += bytes;
  }
  flush();
}

}  // namespace rlcpp
