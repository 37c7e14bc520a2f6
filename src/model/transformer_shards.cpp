// The Transformer under tensor parallelism, seen from outside: how each tensor is held, whole
// shapes and weights gathered from the parts, partial gradients summed, the gradient norm's squares
// counted once over the group, the whole model gathered on one rank for writing.
#include "model/transformer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "io/checkpoint.h"
#include "model/attention.h"
#include "model/kernel_linear.h"
#include "model/logprobs.h"
#include "util/error.h"
#include "util/file.h"
#include "util/torch_format.h"

#include <fmt/ranges.h>

namespace rlcpp {

void Transformer::index_shards() {
  shards_.clear();
  if (!tp_) return;
  for (const auto& [name, t] : named_tensors()) shards_[t.unsafeGetTensorImpl()] = tp_->shard(name);
}

VocabShard Transformer::vocab_shard() const {
  if (!tp_) return {};
  return {tp_->shape().vocab_begin, &tp_->group()};
}

int64_t Transformer::kv_heads() const { return tp_ ? tp_->shape().n_kv_heads() : config_.num_key_value_heads; }

int64_t Transformer::max_kv_heads() const { return tp_ ? tp_->layout().max_kv_heads() : config_.num_key_value_heads; }

const TpShard* Transformer::shard_of(const torch::Tensor& tensor) const {
  const auto it = shards_.find(tensor.unsafeGetTensorImpl());
  return it == shards_.end() ? nullptr : &it->second;
}

std::vector<int64_t> Transformer::global_shape(const std::string& name, const torch::Tensor& local) const {
  return tp_ ? tp_->global_shape(name, local.sizes().vec()) : local.sizes().vec();
}

torch::Tensor Transformer::gather_weight(const std::string& name, const torch::Tensor& local, int root) const {
  return tp_ ? tp_->gather(local, name, root) : local;
}

torch::Tensor Transformer::local_part(const std::string& name, const torch::Tensor& whole, const torch::Tensor& local,
                                      const std::string& source) const {
  const auto expected = global_shape(name, local);
  if (whole.sizes().vec() != expected) {
    throw_user_error("{}: weight \"{}\" has shape {} but the config implies {}", source, name,
                     fmt::format("{}", whole.sizes()), fmt::format("{}", expected));
  }
  return tp_ ? tp_->slice(whole, tp_->shard(name)) : whole;
}

void Transformer::reduce_partial_gradients(const std::vector<torch::Tensor>& params) const {
  if (!tp_) return;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad());
  reduce_partial_gradients(params, grads);
}

void Transformer::reduce_partial_gradients(const std::vector<torch::Tensor>& params,
                                           std::vector<torch::Tensor>& grads) const {
  if (!tp_) return;
  RLCPP_CHECK(params.size() == grads.size(), "{} gradients for {} parameters", grads.size(), params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    const TpShard* shard = shard_of(params[k]);
    RLCPP_CHECK(shard != nullptr, "a trained tensor {} that is not one of the model's", params[k].sizes());
    if (grads[k].defined()) tp_->reduce_partial_gradient(grads[k], *shard);
  }
}

double Transformer::gradient_squares(const std::vector<torch::Tensor>& params) const {
  double sum = 0;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    if (!tp_) {
      sum += p.grad().to(torch::kFloat64).square().sum().item<double>();
    } else {
      sum += tp_->owned_squares(p.grad(), *shard_of(p));
    }
  }
  if (tp_) {
    auto total = torch::tensor({sum}, torch::kFloat64);
    tp_->group().all_reduce_sum(total);
    sum = total.item<double>();
  }
  return sum;
}

void Transformer::gather_whole(int root) {
  if (!tp_) return;
  RLCPP_CHECK(kept_parts_.empty(), "gather_whole twice");
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : named_tensors()) {
    auto whole = tp_->gather(t, name, root);
    if (tp_->rank() != root) continue;
    kept_parts_.push_back(t.data());
    torch::Tensor(t).set_data(whole);
  }
}

void Transformer::release_whole() {
  if (!tp_ || kept_parts_.empty()) return;
  torch::NoGradGuard no_grad;
  size_t k = 0;
  for (const auto& [name, t] : named_tensors()) torch::Tensor(t).set_data(kept_parts_.at(k++));
  kept_parts_.clear();
}

}  // namespace rlcpp
