#include "train/zero.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "kernels/elementwise.h"
#include "model/kernel_linear.h"
#include "comm/gradient_sync.h"
#include "util/error.h"
#include "util/torch_format.h"
#include "util/trace.h"

namespace rlcpp {

namespace {

// The key torch::optim::Optimizer keeps a parameter's state under: its TensorImpl.
void* state_key(const torch::Tensor& p) { return p.unsafeGetTensorImpl(); }

std::vector<int64_t> flat_offsets(const std::vector<torch::Tensor>& params) {
  std::vector<int64_t> offsets{0};
  for (const auto& p : params) offsets.push_back(offsets.back() + p.numel());
  return offsets;
}

// fn(parameter index, offset in it, offset from a, length) over the pieces of flat [a, b).
template <class Fn>
void pieces_of(const std::vector<int64_t>& offsets, int64_t a, int64_t b, Fn&& fn) {
  auto i = static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), a) - offsets.begin());
  i = i == 0 ? 0 : i - 1;
  for (int64_t at = a; at < b && i + 1 < offsets.size(); ++i) {
    const int64_t end = std::min(b, offsets[i + 1]);
    if (end > at) fn(i, at - offsets[i], at - a, end - at);
    at = std::max(at, end);
  }
}

torch::Tensor flat_view(const torch::Tensor& t) { return t.view({-1}); }

// Σ g² over `grads` and the trainers, in double, a million elements at a time (a whole double copy
// of the embedding's gradient would be the step's largest allocation).
// A sum of squares in fp64 on the gradients' device (the CPU when there are none): each piece's
// sum stays there, one copy to the host at the end.
torch::Tensor squares_on(const std::vector<torch::Tensor>& grads) {
  const auto given = std::find_if(grads.begin(), grads.end(), [](const torch::Tensor& g) { return g.defined(); });
  const auto device = given == grads.end() ? torch::Device(torch::kCPU) : given->device();
  return torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
}

double summed_squares(Communicator& group, const std::vector<torch::Tensor>& grads) {
  auto squares = squares_on(grads);
  constexpr int64_t kChunk = 1 << 20;
  for (const auto& g : grads) {
    for (int64_t at = 0; at < g.numel(); at += kChunk) {
      squares += g.narrow(0, at, std::min(kChunk, g.numel() - at)).to(torch::kFloat64).square().sum();
    }
  }
  group.all_reduce_sum(squares);
  return squares.item<double>();
}

}  // namespace

int64_t flat_numel(const std::vector<torch::Tensor>& params) { return flat_offsets(params).back(); }

FlatAdamWState flat_adamw_state(torch::optim::AdamW& optimizer, const std::vector<torch::Tensor>& params,
                                int64_t begin, int64_t end) {
  const auto offsets = flat_offsets(params);
  RLCPP_CHECK(0 <= begin && begin <= end && end <= offsets.back(), "flat range [{}, {}) of {}", begin, end,
              offsets.back());
  FlatAdamWState out;
  out.begin = begin;
  out.end = end;
  out.total = offsets.back();
  const auto options = params.empty() ? torch::TensorOptions() : params[0].options();
  out.exp_avg = torch::zeros({end - begin}, options);
  out.exp_avg_sq = torch::zeros({end - begin}, options);
  for (const auto& p : params) {
    auto it = optimizer.state().find(state_key(p));
    if (it != optimizer.state().end()) {
      out.step = std::max(out.step, static_cast<torch::optim::AdamWParamState&>(*it->second).step());
    }
  }
  pieces_of(offsets, begin, end, [&](size_t i, int64_t in_param, int64_t at, int64_t n) {
    auto it = optimizer.state().find(state_key(params[i]));
    if (it == optimizer.state().end()) return;
    const auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
    out.exp_avg.narrow(0, at, n).copy_(flat_view(s.exp_avg()).narrow(0, in_param, n));
    out.exp_avg_sq.narrow(0, at, n).copy_(flat_view(s.exp_avg_sq()).narrow(0, in_param, n));
  });
  return out;
}

void set_adamw_state(torch::optim::AdamW& optimizer, const std::vector<torch::Tensor>& params,
                     const FlatAdamWState& state) {
  const auto offsets = flat_offsets(params);
  RLCPP_CHECK(state.begin == 0 && state.end == offsets.back(), "AdamW state of [{}, {}) for {} elements", state.begin,
              state.end, offsets.back());
  optimizer.state().clear();
  if (state.step == 0) return;  // nothing trained yet: LibTorch starts from no state
  for (size_t i = 0; i < params.size(); ++i) {
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(state.step);
    const int64_t n = params[i].numel();
    s->exp_avg(state.exp_avg.narrow(0, offsets[i], n).view_as(params[i]).to(params[i].options()).clone());
    s->exp_avg_sq(state.exp_avg_sq.narrow(0, offsets[i], n).view_as(params[i]).to(params[i].options()).clone());
    optimizer.state()[state_key(params[i])] = std::move(s);
  }
}

FlatAdamWState assemble_flat_state(const std::vector<FlatAdamWState>& pieces, int64_t begin, int64_t end,
                                   const std::string& where) {
  RLCPP_CHECK(!pieces.empty(), "no optimizer shards");
  FlatAdamWState out;
  out.begin = begin;
  out.end = end;
  out.total = pieces[0].total;
  out.step = pieces[0].step;
  out.exp_avg = torch::empty({end - begin}, pieces[0].exp_avg.options());
  out.exp_avg_sq = torch::empty({end - begin}, pieces[0].exp_avg.options());
  auto sorted = pieces;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  int64_t covered = begin;
  for (const auto& p : sorted) {
    if (p.total != out.total || p.step != out.step) {
      throw_user_error("{}: the optimizer shards disagree ({} elements at step {} against {} at step {}); the "
                       "checkpoint is damaged: resume from an earlier one", where, p.total, p.step, out.total, out.step);
    }
    const int64_t a = std::max(covered, p.begin), b = std::min(end, p.end);
    if (p.begin > covered || b <= a) continue;
    out.exp_avg.narrow(0, a - begin, b - a).copy_(p.exp_avg.narrow(0, a - p.begin, b - a));
    out.exp_avg_sq.narrow(0, a - begin, b - a).copy_(p.exp_avg_sq.narrow(0, a - p.begin, b - a));
    covered = b;
  }
  if (covered < end) {
    throw_user_error("{}: the optimizer shards cover elements up to {} of [{}, {}); a shard file is missing: resume "
                     "from a complete checkpoint", where, covered, begin, end);
  }
  return out;
}

void adamw_update(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v, int64_t step,
                  const torch::optim::AdamWOptions& o) {
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  const double bias1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bias2 = 1 - std::pow(beta2, static_cast<double>(step));
  auto dense_fp32 = [](const torch::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous();
  };
  if (kernels_enabled() && dense_fp32(p) && dense_fp32(g) && dense_fp32(m) && dense_fp32(v)) {
    const kernels::AdamWScalars s{static_cast<float>(1 - o.lr() * o.weight_decay()), static_cast<float>(beta1),
                                  static_cast<float>(1 - beta1),                       static_cast<float>(beta2),
                                  static_cast<float>(1 - beta2),                       static_cast<float>(o.eps()),
                                  static_cast<float>(o.lr() / bias1),                  static_cast<float>(std::sqrt(bias2))};
    kernels::adamw(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), p.numel(), s);
    // Written through raw pointers: bump the version counters as LibTorch's in-place ops do (the
    // engine's half-precision rollout copy is refreshed when the weights' versions change).
    for (const auto* t : {&p, &m, &v}) t->unsafeGetTensorImpl()->bump_version();
    return;
  }
  torch::NoGradGuard no_grad;
  if (o.weight_decay() != 0) p.mul_(1 - o.lr() * o.weight_decay());
  m.mul_(beta1).add_(g, 1 - beta1);
  v.mul_(beta2).addcmul_(g, g, 1 - beta2);
  auto denom = (v.sqrt() / std::sqrt(bias2)).add_(o.eps());
  p.addcdiv_(m, denom, -o.lr() / bias1);
}

ZeroOptimizer::ZeroOptimizer(std::vector<torch::Tensor> params, Communicator& group, int stage, uint64_t bucket_bytes,
                             const std::vector<torch::Tensor>& resident)
    : params_(std::move(params)), offsets_(flat_offsets(params_)), group_(group), stage_(stage), bucket_bytes_(bucket_bytes) {
  RLCPP_CHECK(stage >= 1 && stage <= 3, "ZeRO stage {}", stage);
  RLCPP_CHECK(!params_.empty(), "ZeRO without trainable parameters");
  for (const auto& p : params_) {
    RLCPP_CHECK(p.is_contiguous() && p.scalar_type() == params_[0].scalar_type() && p.device() == params_[0].device(),
                "ZeRO needs contiguous parameters of one dtype and device, got {} {}", p.sizes(),
                c10::toString(p.scalar_type()));
  }
  const int64_t trainers = group_.size(), total = offsets_.back();
  shard_ = (total + trainers - 1) / trainers;
  const int64_t element = static_cast<int64_t>(params_[0].element_size());
  bucket_ = std::clamp<int64_t>(static_cast<int64_t>(bucket_bytes) / (element * trainers), 1, std::max<int64_t>(shard_, 1));
  state_.total = total;
  state_.begin = std::min(total, group_.rank() * shard_);
  state_.end = std::min(total, state_.begin + shard_);
  state_.exp_avg = torch::zeros({state_.end - state_.begin}, params_[0].options());
  state_.exp_avg_sq = torch::zeros_like(state_.exp_avg);
  if (stage_ < 2) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    shapes_.push_back(params_[i].sizes().vec());
    index_[params_[i].unsafeGetTensorImpl()] = i;
  }
  held_.assign(params_.size(), 1);
  resident_ = indices_of(resident);
  shard_grad_ = torch::zeros({state_.end - state_.begin}, params_[0].options());
  if (stage_ < 3) return;
  shard_params_ = torch::empty({state_.end - state_.begin}, params_[0].options());
  for_each_piece(state_.begin, state_.end, [&](size_t i, int64_t in_param, int64_t at, int64_t len) {
    shard_params_.narrow(0, at, len).copy_(flat_view(params_[i]).narrow(0, in_param, len));
  });
  std::vector<size_t> all(params_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  release_indices(all);
}

template <class Fn>
void ZeroOptimizer::for_each_piece(int64_t a, int64_t b, Fn&& fn) const {
  pieces_of(offsets_, a, b, std::forward<Fn>(fn));
}

void ZeroOptimizer::load_state(const FlatAdamWState& state) {
  RLCPP_CHECK(state.total == state_.total && state.begin <= state_.begin && state.end >= state_.end,
              "ZeRO state of [{}, {}) of {} for shard [{}, {}) of {}", state.begin, state.end, state.total,
              state_.begin, state_.end, state_.total);
  const int64_t n = state_.end - state_.begin, at = state_.begin - state.begin;
  state_.step = state.step;
  state_.exp_avg.copy_(state.exp_avg.narrow(0, at, n));
  state_.exp_avg_sq.copy_(state.exp_avg_sq.narrow(0, at, n));
}

void ZeroOptimizer::gather_parameters() {
  trace::Span span("allgather_parameters");
  torch::NoGradGuard no_grad;
  const int64_t trainers = group_.size();
  for (int64_t o = 0; o < shard_; o += bucket_) {
    const int64_t n = std::min(bucket_, shard_ - o);
    auto mine = torch::zeros({n}, params_[0].options());
    const int64_t a = state_.begin + o;
    for_each_piece(a, std::min(a + n, state_.end), [&](size_t i, int64_t in_param, int64_t at, int64_t len) {
      mine.narrow(0, at, len).copy_(flat_view(params_[i]).narrow(0, in_param, len));
    });
    auto all = torch::empty({trainers, n}, mine.options());
    auto flat_all = all.view({-1});
    group_.all_gather(mine, flat_all);
    for (int64_t r = 0; r < trainers; ++r) {
      const int64_t from = r * shard_ + o;
      for_each_piece(from, std::min(from + n, state_.total), [&](size_t i, int64_t in_param, int64_t at, int64_t len) {
        flat_view(params_[i]).narrow(0, in_param, len).copy_(all[r].narrow(0, at, len));
      });
    }
  }
}

std::vector<size_t> ZeroOptimizer::indices_of(const std::vector<torch::Tensor>& params) const {
  std::vector<size_t> out;
  for (const auto& p : params) {
    const auto it = index_.find(p.unsafeGetTensorImpl());
    RLCPP_CHECK(it != index_.end(), "ZeRO: a tensor of {} that is not a trained parameter", p.sizes());
    out.push_back(it->second);
  }
  std::sort(out.begin(), out.end());
  return out;
}

template <class Fn>
void ZeroOptimizer::for_each_owned_range(const std::vector<size_t>& indices, Fn&& fn) const {
  for (size_t k = 0; k < indices.size();) {
    size_t last = k;
    while (last + 1 < indices.size() && indices[last + 1] == indices[last] + 1) ++last;
    const int64_t a = offsets_[indices[k]], b = offsets_[indices[last] + 1];
    for (int64_t owner = a / shard_; owner * shard_ < b; ++owner) {
      const int64_t x = std::max(a, owner * shard_), y = std::min(b, (owner + 1) * shard_);
      if (y > x) fn(static_cast<int>(owner), x, y);
    }
    k = last + 1;
  }
}

void ZeroOptimizer::copy_into_parameters(int64_t at, const torch::Tensor& part) {
  for_each_piece(at, at + part.numel(), [&](size_t i, int64_t in_param, int64_t from, int64_t len) {
    flat_view(params_[i]).narrow(0, in_param, len).copy_(part.narrow(0, from, len));
  });
}

void ZeroOptimizer::gather_indices(const std::vector<size_t>& indices) {
  torch::NoGradGuard no_grad;
  for (auto i : indices) {
    RLCPP_CHECK(!held_[i], "ZeRO-3: parameter {} gathered twice", i);
    params_[i].set_data(torch::empty(shapes_[i], params_[0].options()));
    held_[i] = 1;
  }
  // From each owner of a part, in pieces of at most a bucket: its shard's values to every trainer.
  const int me = group_.rank();
  for_each_owned_range(indices, [&](int owner, int64_t x, int64_t y) {
    for (int64_t at = x; at < y; at += bucket_) {
      const int64_t n = std::min(bucket_, y - at);
      torch::Tensor part = owner == me ? shard_params_.narrow(0, at - state_.begin, n) : torch::empty({n}, shard_params_.options());
      group_.broadcast(part, owner);
      copy_into_parameters(at, part);
    }
  });
}

void ZeroOptimizer::release_indices(const std::vector<size_t>& indices) {
  torch::NoGradGuard no_grad;
  for (auto i : indices) {
    params_[i].set_data(torch::empty({0}, params_[0].options()));
    params_[i].mutable_grad() = torch::Tensor();
    held_[i] = 0;
  }
}

void ZeroOptimizer::reduce_to_owners(const std::vector<size_t>& indices, const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  std::unordered_map<size_t, const torch::Tensor*> grad_of;
  for (size_t k = 0; k < indices.size(); ++k) grad_of[indices[k]] = &grads[k];
  const int me = group_.rank();
  for_each_owned_range(indices, [&](int owner, int64_t x, int64_t y) {
    for (int64_t at = x; at < y; at += bucket_) {
      const int64_t n = std::min(bucket_, y - at);
      auto part = torch::zeros({n}, shard_grad_.options());
      for_each_piece(at, at + n, [&](size_t i, int64_t in_param, int64_t from, int64_t len) {
        const auto& g = *grad_of.at(i);
        if (g.defined()) part.narrow(0, from, len).copy_(g.reshape({-1}).narrow(0, in_param, len));
      });
      group_.reduce_sum(part, owner);
      if (owner == me) shard_grad_.narrow(0, at - state_.begin, n).add_(part);
    }
  });
}

void ZeroOptimizer::gather(const std::vector<torch::Tensor>& params) { gather_indices(indices_of(params)); }

void ZeroOptimizer::release(const std::vector<torch::Tensor>& params) { release_indices(indices_of(params)); }

void ZeroOptimizer::take_gradients(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads) {
  RLCPP_CHECK(params.size() == grads.size(), "{} gradients for {} parameters", grads.size(), params.size());
  trace::Span span("reduce_layer_gradients");
  std::vector<std::pair<size_t, torch::Tensor>> order;
  for (size_t k = 0; k < params.size(); ++k) order.emplace_back(indices_of({params[k]})[0], grads[k]);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<size_t> indices;
  std::vector<torch::Tensor> sorted;
  for (auto& [i, g] : order) {
    indices.push_back(i);
    sorted.push_back(std::move(g));
  }
  reduce_to_owners(indices, sorted);
}

void ZeroOptimizer::gather_resident() {
  if (stage_ < 3 || resident_held_) return;
  gather_indices(resident_);
  resident_held_ = true;
}

void ZeroOptimizer::release_resident() {
  if (stage_ < 3 || !resident_held_) return;
  release_indices(resident_);
  resident_held_ = false;
}

void ZeroOptimizer::gather_all(int root) {
  RLCPP_CHECK(stage_ == 3, "gather_all at ZeRO stage {}", stage_);
  std::vector<size_t> missing;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!held_[i]) missing.push_back(i);
  }
  if (root < 0) return gather_indices(missing);
  // Point to point: each owner sends its parts to root in ascending order, as root takes them.
  constexpr int kGatherTag = 9302;
  torch::NoGradGuard no_grad;
  const int me = group_.rank();
  if (me == root) {
    for (auto i : missing) {
      params_[i].set_data(torch::empty(shapes_[i], params_[0].options()));
      held_[i] = 1;
    }
  }
  for_each_owned_range(missing, [&](int owner, int64_t x, int64_t y) {
    if (me != root && me != owner) return;
    for (int64_t at = x; at < y; at += bucket_) {
      const int64_t n = std::min(bucket_, y - at);
      torch::Tensor part = me == owner ? shard_params_.narrow(0, at - state_.begin, n) : torch::empty({n}, shard_params_.options());
      if (me != root) {
        group_.send(part, root, kGatherTag);
        continue;
      }
      if (owner != me) group_.recv(part, owner, kGatherTag);
      copy_into_parameters(at, part);
    }
  });
}

void ZeroOptimizer::release_all() {
  std::vector<size_t> held;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (held_[i] && !(resident_held_ && std::binary_search(resident_.begin(), resident_.end(), i))) held.push_back(i);
  }
  release_indices(held);
}

const std::vector<int64_t>& ZeroOptimizer::shape_of(const torch::Tensor& param) const {
  RLCPP_CHECK(stage_ == 3, "shape_of at ZeRO stage {}", stage_);
  return shapes_[indices_of({param})[0]];
}

LayerByLayer::LayerByLayer(ZeroOptimizer& zero, std::vector<std::vector<torch::Tensor>> layers)
    : zero_(zero), layers_(std::move(layers)) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (const auto& p : layers_[i]) layer_of_[p.unsafeGetTensorImpl()] = i;
  }
  zero_.gather_resident();
}

LayerByLayer::~LayerByLayer() {
  if (current_ >= 0 && current_ < static_cast<int64_t>(layers_.size())) zero_.release(layers_[static_cast<size_t>(current_)]);
  zero_.release_resident();
}

void LayerByLayer::advance() {
  if (current_ >= 0) zero_.release(layers_[static_cast<size_t>(current_)]);
  ++current_;
  if (current_ < static_cast<int64_t>(layers_.size())) zero_.gather(layers_[static_cast<size_t>(current_)]);
}

const torch::Tensor& LayerByLayer::get(const torch::Tensor& param) {
  const auto it = layer_of_.find(param.unsafeGetTensorImpl());
  if (it != layer_of_.end()) {
    const auto layer = static_cast<int64_t>(it->second);
    RLCPP_CHECK(layer >= current_, "ZeRO-3 stream: layer {} asked for after layer {}", layer, current_);
    while (current_ < layer) advance();
  }
  return param;
}

void LayerByLayer::finish() {
  while (current_ < static_cast<int64_t>(layers_.size())) advance();
  zero_.release_resident();
}

void ZeroOptimizer::set_model_parallel(Communicator& group, std::vector<torch::Tensor> owned) {
  RLCPP_CHECK(owned.size() == params_.size(), "{} owned masks for {} parameters", owned.size(), params_.size());
  owned_.resize(params_.size());
  for (size_t i = 0; i < owned.size(); ++i) {
    if (owned[i].defined()) owned_[i] = owned_[i].defined() ? owned_[i] * owned[i] : std::move(owned[i]);
  }
  model_groups_.push_back(&group);
}

double ZeroOptimizer::gradient_squares(const std::vector<torch::Tensor>& grads) const {
  if (model_groups_.empty()) return summed_squares(group_, grads);
  // The shard's pieces, each weighted by the elements of it this rank owns.
  auto squares = squares_on(stage_ == 1 ? grads : std::vector<torch::Tensor>{shard_grad_});
  size_t k = 0;
  for_each_piece(state_.begin, state_.end, [&](size_t i, int64_t in_param, int64_t at, int64_t len) {
    const auto g = (stage_ == 1 ? grads[k++] : shard_grad_.narrow(0, at, len)).to(torch::kFloat64).square();
    const auto& mask = owned_[i];
    squares += mask.defined() ? (g * mask.narrow(0, in_param, len).to(torch::kFloat64)).sum() : g.sum();
  });
  group_.all_reduce_sum(squares);
  for (auto* group : model_groups_) group->all_reduce_sum(squares);
  return squares.item<double>();
}

void ZeroOptimizer::reduce_resident_gradients() {
  trace::Span span("reduce_resident_gradients");
  std::vector<torch::Tensor> grads;  // undefined (zero) where this trainer has none or holds none
  for (auto i : resident_) grads.push_back(params_[i].grad());
  reduce_to_owners(resident_, grads);
  for (auto i : resident_) params_[i].mutable_grad() = torch::Tensor();
  for (size_t i = 0; i < params_.size(); ++i) {
    RLCPP_CHECK(!params_[i].grad().defined(), "ZeRO-{}: parameter {} {} still has a gradient at the step: a layer's "
                "gradients were not taken in backward", stage_, i, params_[i].sizes());
  }
}

double ZeroOptimizer::step(const torch::optim::AdamWOptions& options, double max_norm) {
  torch::NoGradGuard no_grad;
  // This shard's summed gradient, piece by piece (stage 1: views of the all-reduced .grad tensors).
  std::vector<torch::Tensor> grads;
  if (stage_ == 1) {
    trace::Span span("allreduce_gradients");
    for (auto& p : params_) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);  // every trainer issues the same collectives
    }
    all_reduce_gradients(group_, params_, bucket_bytes_);
    for_each_piece(state_.begin, state_.end, [&](size_t i, int64_t in_param, int64_t, int64_t len) {
      grads.push_back(flat_view(params_[i].grad()).narrow(0, in_param, len));
    });
  } else {
    reduce_resident_gradients();  // the layers' were taken in backward
    if (stage_ == 3) release_resident();
    grads.push_back(shard_grad_);
  }
  const double norm = std::sqrt(gradient_squares(grads));
  if (std::isfinite(norm)) {  // every trainer sees the same norm: none updates on a non-finite one
    if (max_norm > 0) {
      const double coef = max_norm / (norm + 1e-6);  // as torch::nn::utils::clip_grad_norm_
      if (coef < 1) {
        for (auto& g : grads) g.mul_(coef);
      }
    }
    ++state_.step;
    trace::Span span("optimizer_shard");
    if (stage_ == 3) {
      adamw_update(shard_params_, shard_grad_, state_.exp_avg, state_.exp_avg_sq, state_.step, options);
    } else {
      size_t k = 0;
      for_each_piece(state_.begin, state_.end, [&](size_t i, int64_t in_param, int64_t at, int64_t len) {
        auto p = flat_view(params_[i]).narrow(0, in_param, len);
        auto m = state_.exp_avg.narrow(0, at, len), v = state_.exp_avg_sq.narrow(0, at, len);
        auto g = stage_ == 1 ? grads[k++] : shard_grad_.narrow(0, at, len);
        adamw_update(p, g, m, v, state_.step, options);
      });
    }
  }
  if (std::isfinite(norm) && stage_ < 3) gather_parameters();
  if (shard_grad_.defined()) shard_grad_.zero_();
  // Stage 1 keeps the gradients the next backward accumulates into, zeroed by the trainer, as
  // without ZeRO (a released one comes back in backward with vocabulary-sized temporaries for the
  // tied embedding).
  return norm;
}

}  // namespace rlcpp
