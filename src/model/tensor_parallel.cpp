#include "model/tensor_parallel.h"

#include <torch/autograd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "util/error.h"
#include "util/torch_format.h"

#include <fmt/ranges.h>

namespace rlcpp {

namespace {

constexpr int kGatherTag = 9401;

// Which part of the model a tensor belongs to, from its Hugging Face name.
enum class Part { kWhole, kInside, kColumnQ, kColumnKv, kColumnMlp, kRowO, kRowMlp, kVocab };

Part part_of(const std::string& module) {
  const std::string leaf = module.substr(module.rfind('.') + 1);
  if (leaf == "q_proj") return Part::kColumnQ;
  if (leaf == "k_proj" || leaf == "v_proj") return Part::kColumnKv;
  if (leaf == "gate_proj" || leaf == "up_proj") return Part::kColumnMlp;
  if (leaf == "o_proj") return Part::kRowO;
  if (leaf == "down_proj") return Part::kRowMlp;
  if (leaf == "embed_tokens" || leaf == "lm_head") return Part::kVocab;
  if (leaf == "q_norm" || leaf == "k_norm") return Part::kInside;  // per head, on every rank's heads
  return Part::kWhole;                                              // the residual stream's norms
}

// Rows [h·D, (h+1)·D) of each head h in order.
std::vector<int64_t> head_rows(const std::vector<int64_t>& heads, int64_t head_dim) {
  std::vector<int64_t> rows;
  for (int64_t h : heads) {
    for (int64_t d = 0; d < head_dim; ++d) rows.push_back(h * head_dim + d);
  }
  return rows;
}

std::vector<int64_t> range_of(int64_t begin, int64_t end) {
  std::vector<int64_t> out;
  for (int64_t i = begin; i < end; ++i) out.push_back(i);
  return out;
}

bool contiguous_run(const std::vector<int64_t>& index) {
  for (size_t i = 1; i < index.size(); ++i) {
    if (index[i] != index[0] + static_cast<int64_t>(i)) return false;
  }
  return true;
}

torch::Tensor index_tensor(const std::vector<int64_t>& index, const torch::Device& device) {
  return torch::tensor(index, torch::kInt64).to(device);
}

// `t` along `dim` at the local positions `index` (a view for a contiguous run).
torch::Tensor select_positions(const torch::Tensor& t, int dim, const std::vector<int64_t>& index) {
  if (index.empty()) return t.narrow(dim, 0, 0);
  if (contiguous_run(index)) return t.narrow(dim, index[0], static_cast<int64_t>(index.size()));
  return t.index_select(dim, index_tensor(index, t.device()));
}

// Σ t² in double, a million elements at a time (no double copy of a vocabulary-sized gradient).
double squares(const torch::Tensor& t) {
  const auto flat = t.reshape({-1});
  double sum = 0;
  constexpr int64_t kChunk = 1 << 20;
  for (int64_t at = 0; at < flat.numel(); at += kChunk) {
    sum += flat.narrow(0, at, std::min(kChunk, flat.numel() - at)).to(torch::kFloat64).square().sum().item<double>();
  }
  return sum;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct EnterFunction : public torch::autograd::Function<EnterFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = grads[0].contiguous().clone();
    reinterpret_cast<Communicator*>(ctx->saved_data["group"].toInt())->all_reduce_sum(g);
    return {g, torch::Tensor()};
  }
};

struct ReduceFunction : public torch::autograd::Function<ReduceFunction> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, int64_t group) {
    auto y = x.contiguous().clone();
    reinterpret_cast<Communicator*>(group)->all_reduce_sum(y);
    return y;
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

}  // namespace

std::pair<int64_t, int64_t> balanced_range(int64_t n, int r, int size) {
  return {n * r / size, n * (r + 1) / size};
}

TpLayout TpLayout::make(const ModelConfig& c, int size, const std::string& flag) {
  RLCPP_CHECK(size >= 1, "tensor parallelism over {} ranks", size);
  if (size > c.num_attention_heads) {
    throw_user_error("{} {}: the model has {} attention heads, and tensor parallelism gives each rank at least one; "
                     "use at most {}", flag, size, c.num_attention_heads, c.num_attention_heads);
  }
  if (size > c.intermediate_size || size > c.vocab_size) {
    throw_user_error("{} {}: more ranks than the model's {} MLP channels or {} tokens", flag, size, c.intermediate_size,
                     c.vocab_size);
  }
  TpLayout layout;
  layout.config = c;
  layout.size = size;
  const int64_t group = c.num_attention_heads / c.num_key_value_heads;  // query heads per KV head
  for (int r = 0; r < size; ++r) {
    TpRankShape s;
    std::tie(s.q_begin, s.q_end) = balanced_range(c.num_attention_heads, r, size);
    // Runs of local query heads reading the same KV head: equal runs keep grouped attention as
    // it is (one local KV head per run); unequal ones get a KV head per query head.
    std::vector<int64_t> runs;
    for (int64_t q = s.q_begin; q < s.q_end; ++q) {
      if (q == s.q_begin || q / group != (q - 1) / group) {
        s.kv_heads.push_back(q / group);
        runs.push_back(0);
      }
      ++runs.back();
    }
    if (std::adjacent_find(runs.begin(), runs.end(), std::not_equal_to<>()) != runs.end()) {
      s.kv_heads.clear();
      for (int64_t q = s.q_begin; q < s.q_end; ++q) s.kv_heads.push_back(q / group);
    }
    std::tie(s.mlp_begin, s.mlp_end) = balanced_range(c.intermediate_size, r, size);
    std::tie(s.vocab_begin, s.vocab_end) = balanced_range(c.vocab_size, r, size);
    layout.ranks.push_back(std::move(s));
  }
  return layout;
}

bool TpLayout::kv_duplicated() const {
  std::set<int64_t> seen;
  for (const auto& s : ranks) {
    for (int64_t h : s.kv_heads) {
      if (!seen.insert(h).second) return true;
    }
  }
  return false;
}

int64_t TpLayout::max_kv_heads() const {
  int64_t n = 0;
  for (const auto& s : ranks) n = std::max(n, s.n_kv_heads());
  return n;
}

TensorParallel::TensorParallel(std::shared_ptr<Communicator> group, const ModelConfig& config)
    : group_(std::move(group)), layout_(TpLayout::make(config, group_->size())) {}

TpShard TensorParallel::shard(const std::string& name, int r) const {
  if (r < 0) r = rank();
  // "<module>.weight", "<module>.bias", "<module>.lora_A.weight", "<module>.lora_B.weight"
  std::string module = name.substr(0, name.rfind('.'));
  std::string what = name.substr(name.rfind('.') + 1);
  for (const char* factor : {"lora_A", "lora_B"}) {
    if (module.ends_with(std::string(".") + factor)) {
      module = module.substr(0, module.size() - std::strlen(factor) - 1);
      what = factor;
    }
  }
  const Part part = part_of(module);
  const int64_t head_dim = layout_.config.head_dim;
  // The positions along `dim` rank q holds, for this tensor.
  auto index_on = [&](int q) -> std::vector<int64_t> {
    const TpRankShape& s = layout_.ranks[static_cast<size_t>(q)];
    switch (part) {
      case Part::kColumnQ:
      case Part::kRowO: return head_rows(range_of(s.q_begin, s.q_end), head_dim);
      case Part::kColumnKv: return head_rows(s.kv_heads, head_dim);
      case Part::kColumnMlp:
      case Part::kRowMlp: return range_of(s.mlp_begin, s.mlp_end);
      case Part::kVocab: return range_of(s.vocab_begin, s.vocab_end);
      default: return {};
    }
  };
  TpShard out;
  const bool column = part == Part::kColumnQ || part == Part::kColumnKv || part == Part::kColumnMlp;
  const bool row = part == Part::kRowO || part == Part::kRowMlp;
  if (column) {
    // Output rows: the weight, its bias and B; A is unsplit and inside the region.
    if (what == "lora_A") {
      out.partial_gradient = true;
    } else {
      out.dim = 0;
    }
  } else if (row) {
    // Input columns: the weight and A; the bias (added after the sum) and B are unsplit.
    if (what == "weight" || what == "lora_A") out.dim = 1;
    if (what == "lora_B") out.partial_gradient = true;
  } else if (part == Part::kVocab) {
    out.dim = 0;
  } else {
    out.partial_gradient = part == Part::kInside;
  }
  if (out.whole()) {
    if (r == 0) out.owned = {0};
    return out;
  }
  const ModelConfig& c = layout_.config;
  out.global_size = part == Part::kColumnQ || part == Part::kRowO ? c.q_size()
                    : part == Part::kColumnKv                      ? c.kv_size()
                    : part == Part::kVocab                         ? c.vocab_size
                                                                   : c.intermediate_size;
  out.index = index_on(r);
  // First holders own; a position held more than once has a partial gradient (KV heads only).
  std::vector<int> holders(static_cast<size_t>(out.global_size), 0);
  for (int q = 0; q < size(); ++q) {
    for (int64_t g : index_on(q)) ++holders[static_cast<size_t>(g)];
  }
  std::vector<uint8_t> seen(static_cast<size_t>(out.global_size), 0);
  for (int q = 0; q < r; ++q) {
    for (int64_t g : index_on(q)) seen[static_cast<size_t>(g)] = 1;
  }
  for (size_t i = 0; i < out.index.size(); ++i) {
    auto& s = seen[static_cast<size_t>(out.index[i])];
    if (!s) out.owned.push_back(static_cast<int64_t>(i));
    s = 1;
  }
  for (int h : holders) out.partial_gradient = out.partial_gradient || h > 1;
  return out;
}

torch::Tensor TensorParallel::slice(const torch::Tensor& whole, const TpShard& shard) const {
  if (shard.whole()) return whole;
  RLCPP_CHECK(whole.size(shard.dim) == shard.global_size, "slicing {} along dim {} of global size {}", whole.sizes(),
              shard.dim, shard.global_size);
  return select_positions(whole, shard.dim, shard.index).contiguous();
}

std::vector<int64_t> TensorParallel::global_shape(const std::string& name, const std::vector<int64_t>& local) const {
  const TpShard s = shard(name);
  auto out = local;
  if (!s.whole()) {
    RLCPP_CHECK(static_cast<size_t>(s.dim) < out.size(), "tensor {} of shape {} split along dim {}", name,
                fmt::format("{}", local), s.dim);
    out[static_cast<size_t>(s.dim)] = s.global_size;
  }
  return out;
}

torch::Tensor TensorParallel::gather(const torch::Tensor& local, const std::string& name, int root) const {
  const int me = rank(), writer = root < 0 ? 0 : root;
  const TpShard mine = shard(name, me);
  const auto global = global_shape(name, local.sizes().vec());
  torch::Tensor out;
  if (mine.whole()) {
    out = local;
  } else {
    // Each rank's owned positions, point to point to the writer, which puts them in place.
    auto owned_part = [&](const TpShard& s, const torch::Tensor& t) { return select_positions(t, s.dim, s.owned); };
    if (me != writer) {
      group_->send(owned_part(mine, local.detach()).contiguous(), writer, kGatherTag);
    } else {
      out = torch::empty(global, local.options().requires_grad(false));
      for (int r = 0; r < size(); ++r) {
        const TpShard s = shard(name, r);
        std::vector<int64_t> at;
        for (int64_t i : s.owned) at.push_back(s.index[static_cast<size_t>(i)]);
        torch::Tensor part;
        if (r == me) {
          part = owned_part(s, local.detach());
        } else {
          auto sizes = global;
          sizes[static_cast<size_t>(s.dim)] = static_cast<int64_t>(s.owned.size());
          part = torch::empty(sizes, out.options());
          group_->recv(part, r, kGatherTag);
        }
        if (!at.empty()) out.index_copy_(s.dim, index_tensor(at, out.device()), part);
      }
    }
    if (root < 0) {
      if (me != writer) out = torch::empty(global, local.options().requires_grad(false));
      group_->broadcast(out, writer);
    }
  }
  if (root >= 0 && me != root) return {};
  return out;
}

void TensorParallel::reduce_partial_gradient(torch::Tensor& grad, const TpShard& shard) const {
  if (!shard.partial_gradient) return;
  torch::NoGradGuard no_grad;
  if (shard.whole()) {
    group_->all_reduce_sum(grad);
    return;
  }
  auto sizes = grad.sizes().vec();
  sizes[static_cast<size_t>(shard.dim)] = shard.global_size;
  auto total = torch::zeros(sizes, grad.options());
  const auto index = index_tensor(shard.index, grad.device());
  total.index_add_(shard.dim, index, grad);
  group_->all_reduce_sum(total);
  grad.copy_(total.index_select(shard.dim, index));
}

double TensorParallel::owned_squares(const torch::Tensor& grad, const TpShard& shard) const {
  if (shard.owned.empty()) return 0.0;
  if (shard.owns_all()) return squares(grad);
  return squares(select_positions(grad, shard.dim, shard.owned));
}

torch::Tensor TensorParallel::owned_mask(const torch::Tensor& local, const TpShard& shard) const {
  if (shard.owns_all()) return {};
  auto mask = torch::zeros(local.sizes(), local.options().dtype(torch::kFloat32).requires_grad(false));
  if (!shard.owned.empty()) mask.index_fill_(shard.dim, index_tensor(shard.owned, mask.device()), 1.0);
  return mask.reshape({-1});
}

torch::Tensor tp_enter(const torch::Tensor& x, Communicator& group) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return x;
  return EnterFunction::apply(x, reinterpret_cast<int64_t>(&group));
}

torch::Tensor tp_reduce(const torch::Tensor& x, Communicator& group) {
  if (torch::GradMode::is_enabled() && x.requires_grad()) return ReduceFunction::apply(x, reinterpret_cast<int64_t>(&group));
  auto y = x.is_contiguous() ? x : x.contiguous();
  group.all_reduce_sum(y);
  return y;
}

torch::Tensor TensorParallel::enter(const torch::Tensor& x) const { return tp_enter(x, *group_); }

torch::Tensor TensorParallel::reduce(const torch::Tensor& x) const { return tp_reduce(x, *group_); }

}  // namespace rlcpp
