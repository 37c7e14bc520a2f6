#include "rl/run/memory_plan.h"

#include <ATen/DeviceAccelerator.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "model/attention.h"
#include "io/prompt_dataset.h"
#include "model/transformer.h"
#include "rl/rollout/rollout.h"
#include "text/prompt_builder.h"
#include "train/pipeline.h"
#include "util/cuda_backend.h"
#include "util/error.h"

namespace rlcpp {

namespace {

namespace fs = std::filesystem;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

double dtype_bytes(const std::string& name) {
  if (name.empty()) return 4;
  return static_cast<double>(c10::elementSize(dtypes().parse(name, "--dtype")));
}

// Adapter parameters of `lora` on `m` (every layer; a name scope is not narrowed here).
double lora_parameters(const LoraConfig& lora, const ModelConfig& m) {
  const double h = static_cast<double>(m.hidden_size), q = static_cast<double>(m.q_size()),
               kv = static_cast<double>(m.kv_size()), i = static_cast<double>(m.intermediate_size);
  const std::vector<std::pair<std::string, double>> fan = {{"q_proj", h + q},     {"k_proj", h + kv}, {"v_proj", h + kv},
                                                           {"o_proj", q + h},     {"gate_proj", h + i},
                                                           {"up_proj", h + i},    {"down_proj", i + h}};
  double per_layer = 0;
  for (const auto& [name, in_out] : fan) {
    if (lora.targets.empty() || std::find(lora.targets.begin(), lora.targets.end(), name) != lora.targets.end()) {
      per_layer += static_cast<double>(lora.rank) * in_out;
    }
  }
  return per_layer * static_cast<double>(m.num_hidden_layers);
}

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / kGiB); }

}  // namespace

double MemoryEstimate::total() const {
  double held = 0, backward = 0, optimizer = 0;
  for (const auto& l : lines) {
    (l.phase == MemoryPhase::kHeld ? held : l.phase == MemoryPhase::kBackward ? backward : optimizer) += l.bytes;
  }
  return held + std::max(backward, optimizer);
}

std::string MemoryEstimate::table() const {
  std::string out;
  for (const auto& l : lines) {
    const char* phase = l.phase == MemoryPhase::kHeld ? "" : l.phase == MemoryPhase::kBackward ? "[fwd/bwd] " : "[optimizer] ";
    out += fmt::format("  {:<30} {:>10}  {}{}\n", l.what, gib(l.bytes), phase, l.detail);
  }
  out += fmt::format("  {:<30} {:>10}  everything held + the larger of [fwd/bwd] and [optimizer]\n",
                     "total (peak, estimated)", gib(total()));
  return out;
}

namespace {

// Under tensor parallelism, the shape of the largest rank's part (its heads, KV heads, MLP channels
// and tokens), and under pipeline parallelism of the stage with the most layers (counted with the
// embedding and the head, which one stage holds at most: an over-estimate for the middle ones):
// what one trainer process holds.
ModelConfig largest_part(const ModelConfig& whole, int64_t tp, int64_t pp) {
  ModelConfig part = whole;
  if (pp > 1 && pp <= whole.num_hidden_layers) {
    part.num_hidden_layers = 0;
    for (int k = 0; k < pp; ++k) {
      const PipelineStage stage = pipeline_stage(whole, k, static_cast<int>(pp));
      part.num_hidden_layers = std::max(part.num_hidden_layers, stage.layer_end - stage.layer_begin);
    }
  }
  if (tp <= 1) return part;
  const TpLayout layout = TpLayout::make(whole, static_cast<int>(tp));
  part.num_attention_heads = part.num_key_value_heads = part.intermediate_size = part.vocab_size = 0;
  for (const auto& r : layout.ranks) {
    part.num_attention_heads = std::max(part.num_attention_heads, r.n_heads());
    part.num_key_value_heads = std::max(part.num_key_value_heads, r.n_kv_heads());
    part.intermediate_size = std::max(part.intermediate_size, r.mlp_end - r.mlp_begin);
    part.vocab_size = std::max(part.vocab_size, r.vocab_end - r.vocab_begin);
  }
  return part;
}

}  // namespace

MemoryEstimate estimate_run_memory(const RunConfig& c, const ModelConfig& whole, int64_t prompt_tokens) {
  MemoryEstimate est;
  const ModelConfig m = largest_part(whole, c.parallel.tp, c.parallel.pp);  // every line below is of one trainer process
  const double e = dtype_bytes(c.runtime.dtype);  // compute dtype
  const double frozen = c.model.frozen_dtype.empty() ? e : dtype_bytes(c.model.frozen_dtype);
  const double params = static_cast<double>(m.parameter_count());
  const double h = static_cast<double>(m.hidden_size), q = static_cast<double>(m.q_size()),
               kv = static_cast<double>(m.kv_size()), inter = static_cast<double>(m.intermediate_size),
               vocab = static_cast<double>(m.vocab_size), layers = static_cast<double>(m.num_hidden_layers),
               heads = static_cast<double>(m.num_attention_heads);
  const bool lora = c.model.lora.enabled();
  std::string prompt_note;
  if (prompt_tokens <= 0) {
    prompt_tokens = c.rollout.max_prompt_tokens > 0 ? c.rollout.max_prompt_tokens : 512;
    prompt_note = c.rollout.max_prompt_tokens > 0 ? "-mpt" : "prompts of 512 tokens assumed (set -mpt)";
  } else if (c.rollout.max_prompt_tokens <= 0) {
    prompt_note = "the dataset's longest prompt";
  }
  const double t = static_cast<double>(prompt_tokens + c.rollout.sampling.max_new_tokens);
  est.sequence_tokens = prompt_tokens + c.rollout.sampling.max_new_tokens;
  const double b = static_cast<double>(c.train.train_microbatch_size);
  // The tokens one forward runs on: -tmbs whole sequences, or the token budget (a longer sequence alone).
  const int64_t budget = c.train.max_tokens_per_micro_batch;
  const double micro_tokens = budget > 0 ? std::max(static_cast<double>(budget), t) : b * t;

  est.lines.push_back({"runtime", 0.35 * kGiB, "LibTorch, BLAS, tokenizer, dataset"});
  if (lora) {
    est.lines.push_back({"base weights (frozen)", params * frozen,
                         fmt::format("{:.0f} M parameters in {}", params / 1e6, c.model.frozen_dtype.empty() ? c.runtime.dtype : c.model.frozen_dtype)});
    const double trained = lora_parameters(c.model.lora, m);
    est.lines.push_back({"LoRA adapters + grads + AdamW", trained * e * 4,
                         fmt::format("{:.1f} M parameters (rank {}, {})", trained / 1e6, c.model.lora.rank, lora_targets_text(c.model.lora.targets))});
  } else if (c.parallel.zero == 3) {  // train/zero.h: shards, the resident parameters whole, one layer gathered
    const double n = static_cast<double>(c.parallel.replicas());
    const double resident = vocab * h * (m.tie_word_embeddings ? 1 : 2) + h;
    const double layer = (params - resident) / layers;
    est.lines.push_back({"policy weights", (params / n + resident) * e,
                         fmt::format("ZeRO-3: this trainer's 1/{} of {:.0f} M parameters in {}, the embedding{} whole",
                                     c.parallel.replicas(), params / 1e6, c.runtime.dtype, m.tie_word_embeddings ? "" : " and head")});
    est.lines.push_back({"gradients", (params / n + resident) * e, "the shard's, and the embedding's whole"});
    est.lines.push_back({"AdamW moments", params * e * 2 / n,
                         fmt::format("exp_avg and exp_avg_sq: this trainer's 1/{}", c.parallel.replicas())});
    est.lines.push_back({"gathered layer", 2 * layer * e, "one decoder layer's weights and gradients at a time",
                         MemoryPhase::kBackward});
    est.lines.push_back({"whole model (sync, checkpoint)", params * e,
                         "gathered to send the weights to the rollout workers and to write checkpoints",
                         MemoryPhase::kOptimizer});
  } else {
    est.lines.push_back({"policy weights", params * e,
                         fmt::format("{:.0f} M parameters in {}{}", params / 1e6, c.runtime.dtype,
                                     c.parallel.tp > 1 ? fmt::format(" (this rank's part of {:.0f} M, --train-tp {})",
                                                            static_cast<double>(whole.parameter_count()) / 1e6, c.parallel.tp)
                                              : "")});
    if (c.parallel.zero == 2) {  // train/zero.h: the shard's sum, the embedding's whole, one layer's at a time
      const double resident = vocab * h * (m.tie_word_embeddings ? 1 : 2) + h;
      est.lines.push_back({"gradients", (params / static_cast<double>(c.parallel.replicas()) + resident) * e,
                           "ZeRO-2: the shard's sum and the embedding's whole"});
      est.lines.push_back({"layer gradients", (params - resident) / layers * e,
                           "one decoder layer's at a time, summed into the shards in backward", MemoryPhase::kBackward});
    } else {
      est.lines.push_back({"gradients", params * e, "every weight is trained"});
    }
    if (c.parallel.zero > 0) {  // train/zero.h: the moments of one shard
      est.lines.push_back({"AdamW moments", params * e * 2 / static_cast<double>(c.parallel.replicas()),
                           fmt::format("exp_avg and exp_avg_sq: ZeRO-{} keeps this trainer's 1/{}", c.parallel.zero, c.parallel.replicas())});
    } else {
      est.lines.push_back({"AdamW moments", params * e * 2, "exp_avg and exp_avg_sq"});
    }
  }
  if (c.algo.loss.kl_coef != 0 && !lora) {
    est.lines.push_back({"reference model", params * frozen, fmt::format("-kl {}: a frozen copy", c.algo.loss.kl_coef)});
  }
  // Models beside the policy, read from their config.json when there is one (else the policy's shape).
  auto other_model = [&](const std::string& dir) {
    const fs::path config = fs::path(dir) / "config.json";
    return dir != c.model.path && fs::is_regular_file(config) ? static_cast<double>(ModelConfig::load(dir).parameter_count())
                                                              : static_cast<double>(whole.parameter_count());
  };
  if (c.algo.uses_critic()) {  // every weight trained; its activations come at another moment than the policy's
    const double shards = c.parallel.zero > 0 ? static_cast<double>(c.parallel.replicas()) : 1.0;
    est.lines.push_back({"critic + grads + AdamW", other_model(c.critic_model()) * e * (2 + 2 / shards),
                         fmt::format("-a PPO: the value model ({}), every weight trained{}", c.critic_model(),
                                     c.parallel.zero > 0 ? fmt::format(", its moments sharded by ZeRO-{}", c.parallel.zero) : "")});
  }
  if (!c.reward.model.path.empty() && !c.parallel.distributed()) {  // scores in the process that computes rewards
    const double rm_bytes = c.reward.model.dtype.empty() ? e : dtype_bytes(c.reward.model.dtype);
    est.lines.push_back({"reward model", other_model(c.reward.model.path) * rm_bytes,
                         fmt::format("--reward-model {}", c.reward.model.path)});
  }
  if (!c.parallel.distributed()) {
    // A KV block's pages become resident when first written (engine/kv_cache.cpp): the budget, or
    // what a round's sequences fill if less (a prompt's blocks shared by its G samples).
    const double budget = static_cast<double>(c.rollout.engine.kv_cache_mb) * kMiB;
    // The KV cache's dtype: --kv-cache-dtype, else the engine's compute dtype (its copy's: fp32 on
    // the CPU for half and 8-bit rollout weights, which the kernels compute in fp32).
    const bool copy = !c.rollout.dtype.empty() && c.rollout.dtype != c.runtime.dtype;
    const bool cpu = c.runtime.device.rfind("cpu", 0) == 0, eight = copy && rollout_dtype_bytes(c.rollout.dtype) == 1;
    double kv_dtype = e;
    if (!c.rollout.kv_cache_dtype.empty()) {
      kv_dtype = dtype_bytes(c.rollout.kv_cache_dtype);
    } else if (copy && cpu) {
      kv_dtype = 4;
    } else if (copy && !eight) {
      kv_dtype = static_cast<double>(rollout_dtype_bytes(c.rollout.dtype));
    }
    const double block = static_cast<double>(c.rollout.engine.block_size);
    auto blocks = [&](double tokens) { return std::ceil(tokens / block) * block; };
    const double prompts = static_cast<double>(c.round_prompts());
    const double seqs = std::min(prompts * static_cast<double>(c.rollout.num_generations),
                                 static_cast<double>(c.rollout.engine.scheduler.max_num_seqs));
    const double filled = (prompts * blocks(static_cast<double>(prompt_tokens)) +
                           seqs * blocks(static_cast<double>(c.rollout.sampling.max_new_tokens) + block)) *
                          2 * layers * kv * kv_dtype;
    est.lines.push_back({"KV cache", std::min(budget, filled),
                         filled < budget ? fmt::format("what a round's {:.0f} sequences fill, of --kv-cache-mb {}", seqs,
                                                       c.rollout.engine.kv_cache_mb)
                                         : std::string("--kv-cache-mb")});
    if (!c.rollout.dtype.empty() && c.rollout.dtype != c.runtime.dtype) {
      est.lines.push_back({"rollout weights", params * static_cast<double>(rollout_dtype_bytes(c.rollout.dtype)),
                           fmt::format("--rollout-dtype {}: the engine's own copy", c.rollout.dtype)});
    }
  }
  // Training activations: per token and layer the norms, projections, rotary copies and MLP
  // intermediates. Attention keeps no T x T tensor (model/attention.h): one block of query rows'
  // scores, probabilities and their gradients exist at a time, in fp32.
  const double per_token_layer = (6 * h + 3 * (q + 2 * kv) + 4 * inter) * e;
  // Padding-free, a block's rows read at most one sequence's keys (t).
  const int64_t input_rows = c.train.padding_free ? 1 : c.train.train_microbatch_size;
  const double rows = static_cast<double>(attention_block_rows(
      input_rows, m.num_attention_heads, c.train.padding_free ? static_cast<int64_t>(micro_tokens) : est.sequence_tokens));
  const double attention_block = 3 * static_cast<double>(input_rows) * heads * rows * t * 4;
  // Calibrated on measured peaks (tests/test_memory_estimate.sh): autograd keeps about 1.4 times
  // the tensors counted above (dtype casts, views copied by reshape; the fused RMSNorm, rotary and
  // SiLU·mul keep only their inputs).
  const double layer_act = 1.4 * micro_tokens * per_token_layer;
  double activations = 0;
  std::string how;
  if (c.train.gradient_checkpointing || c.parallel.zero == 3) {
    // The recomputed layer's activations, and their gradients in its backward: backward frees each
    // activation as it makes its gradient, and the block cache gives that memory to the next
    // gradient (util/threads.h), so together they peak at about one layer's (measured, 0.5B shape
    // with LoRA: 2.07 GiB against 2.09 estimated).
    activations = layers * micro_tokens * h * e + layer_act + attention_block;
    how = c.train.gradient_checkpointing ? "--gradient-checkpointing: layer inputs, one layer recomputed"
                                   : "ZeRO-3 recomputes each layer in backward: layer inputs, one layer recomputed";
  } else {
    activations = layers * layer_act + attention_block;
    how = "every layer's activations kept for backward";
  }
  est.lines.push_back({"training activations", activations,
                       fmt::format("{} ({}{}); {}",
                                   budget > 0 ? fmt::format("micro-batch of {:.0f} tokens", micro_tokens)
                                              : fmt::format("micro-batch {} x {} tokens", c.train.train_microbatch_size,
                                                            est.sequence_tokens),
                                   prompt_tokens, prompt_note.empty() ? "" : ": " + prompt_note, how),
                       MemoryPhase::kBackward});
  // A chunk's logits and their gradient; a trained head also keeps its [V, H] gradient in the
  // backward. A frozen head (LoRA) builds no such gradient (model/logprobs.cpp).
  const double chunk = std::min(512.0, micro_tokens);
  double head = (lora ? 1 : 3) * chunk * vocab * e + micro_tokens * h * e * 2;
  if (!c.model.frozen_dtype.empty()) head += vocab * h * e;  // the output weight converted for the head
  est.lines.push_back({"log-prob head", head, "chunks of 512 tokens x vocabulary", MemoryPhase::kBackward});
  if (!lora) {
    // Measured: the gradient of the (tied) vocabulary matrix is built and summed from the head and
    // the embedding, and AdamW's update makes temporaries of each parameter's size.
    const double largest = vocab * h * e;
    est.lines.push_back({"step temporaries", 5 * largest, "vocabulary-sized gradients and AdamW temporaries",
                         MemoryPhase::kOptimizer});
  }
  return est;
}

namespace {

// The longest prompt of the run's dataset in tokens, over its first 2,000 records (tokenizing all of
// GSM8K's 7,473 takes 7 s here; a preflight should take about one).
int64_t longest_prompt_tokens(const RunConfig& c, const ModelConfig& m) {
  const auto tokenizer = Tokenizer::from_dir(c.model.path);
  DatasetOptions dataset_options;
  dataset_options.skip_bad_lines = c.runtime.skip_bad_lines;
  dataset_options.kind = grades_answers(c.reward) ? DatasetKind::kPrompts : DatasetKind::kOpenPrompts;
  const auto dataset = load_prompt_dataset(c.runtime.dataset, dataset_options);
  PromptOptions options = run_prompt_options(c, m);
  options.max_prompt_tokens = 0;             // the longest as written: -mpt is unset here
  options.overflow = PromptOverflow::kDrop;  // the run itself reports prompts that do not fit
  PromptBuilder builder(*tokenizer, options);
  int64_t longest = 0;
  const size_t n = std::min<size_t>(dataset.records.size(), 2000);
  for (size_t i = 0; i < n; ++i) {
    if (auto built = builder.build(dataset.records[i])) longest = std::max<int64_t>(longest, built->ids.size());
  }
  return longest;
}

}  // namespace

MemoryEstimate estimate_run_memory(const RunConfig& c) {
  const auto model = ModelConfig::load(c.model.path);
  return estimate_run_memory(c, model, c.rollout.max_prompt_tokens > 0 ? 0 : longest_prompt_tokens(c, model));
}

double available_memory_bytes(const std::string& device) {
  if (!device.empty() && device != "cpu") {
    const torch::Device d(device);
    if (!d.is_cuda() || !load_cuda_backend().empty()) return 0;  // no device here: loading the model says why
    return static_cast<double>(at::accelerator::getMemoryInfo(d.has_index() ? d.index() : 0).first);
  }
  std::ifstream in("/proc/meminfo");
  std::string key;
  double value = 0;
  std::string unit;
  while (in >> key >> value >> unit) {
    if (key == "MemAvailable:") return value * 1024.0;
  }
  return 0;
}

void check_run_memory(const RunConfig& c, const MemoryEstimate& est, double available) {
  if (available <= 0 || est.total() <= available) return;
  std::vector<std::string> fixes;
  if (!c.model.lora.enabled()) fixes.push_back("--lora-rank 16 (train adapters: no gradients, optimizer state or reference copy of the full model)");
  if (!c.model.lora.enabled() && c.parallel.zero < 3 && c.parallel.distributed() && c.parallel.replicas() > 1) {
    fixes.push_back(fmt::format("-zero {} (shard {} over the {} data-parallel replicas)", c.parallel.zero == 0 ? 1 : 3,
                                c.parallel.zero == 0 ? "the AdamW moments" : "the parameters and gradients too", c.parallel.replicas()));
  }
  fixes.push_back(fmt::format("--train-tp {} (each trainer holds 1/{} of the model's layers, vocabulary and moments; "
                              "under mpirun)", c.parallel.tp * 2, c.parallel.tp * 2));
  if (!c.train.gradient_checkpointing) fixes.push_back("--gradient-checkpointing (keep one layer's activations, not every layer's)");
  if (c.train.max_tokens_per_micro_batch > 0) {
    fixes.push_back(fmt::format("--max-tokens-per-micro-batch {} (a smaller micro-batch)", c.train.max_tokens_per_micro_batch / 2));
  } else if (c.train.train_microbatch_size > 1) {
    fixes.push_back(fmt::format("-tmbs {} (a smaller micro-batch)", std::max<int64_t>(1, c.train.train_microbatch_size / 2)));
  }
  if (c.model.frozen_dtype.empty() && (c.model.lora.enabled() || c.algo.loss.kl_coef != 0)) {
    fixes.push_back("--frozen-dtype bfloat16 (frozen weights in half the memory)");
  }
  // The KV line counts what a round fills, up to the budget: a lower budget helps only past 256 MiB of it.
  for (const auto& line : est.lines) {
    if (line.what == "KV cache" && line.bytes > 256 * kMiB) fixes.push_back("--kv-cache-mb 256");
  }
  std::string list;
  for (const auto& f : fixes) list += "\n  " + f;
  throw_user_error("this run needs about {} but the machine has {} available:\n{}Settings that lower it:{}\n(--dry-run "
                   "prints the estimate; --skip-memory-check runs anyway)",
                   gib(est.total()), gib(available), est.table(), list);
}

}  // namespace rlcpp
