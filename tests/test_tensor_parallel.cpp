// Tensor parallelism under mpirun: every rank of the world is one rank of a tensor-parallel group
// holding its part of each model, and also holds the whole model (TP = 1) to compare against.
// On every fixture and on a model of 6 query heads over 3 KV heads with an untied head (at 2
// ranks its KV heads straddle the ranks, at 3 they split): logits and token log-probs equal TP = 1,
// gradients of the chunked, fused and entropy heads equal TP = 1 (with LoRA and gradient
// checkpointing too), and the whole model gathered from the parts equals the original. The engine
// over the parts (the first rank generating, the others serving its steps) gives the tokens of the
// engine over the whole model, greedy and sampled, with and without truncation, through prefix
// sharing, chunked prefill and preemption, and reports the log-probs the parts' trainer computes.
// Run by CTest as `mpirun --oversubscribe -np 2` and `-np 3`; alone, the layout tests run only.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/engine.h"
#include "model/logprobs.h"
#include "model/tensor_parallel.h"
#include "model/transformer.h"
#include "comm/mpi.h"
#include "test_util.h"
#include "util/error.h"

using namespace rlcpp;

namespace {

std::shared_ptr<Communicator> world() { return mpi_world(); }

bool multi_rank() { return world()->size() > 1; }

// Qwen2-shaped, 6 query heads over 3 KV heads (groups of 2), q/k/v bias, untied head.
ModelConfig gqa63_config() {
  nlohmann::json j = {{"model_type", "qwen2"},          {"architectures", {"Qwen2ForCausalLM"}},
                      {"vocab_size", 211},              {"hidden_size", 48},
                      {"intermediate_size", 100},       {"num_hidden_layers", 2},
                      {"num_attention_heads", 6},       {"num_key_value_heads", 3},
                      {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-6},
                      {"rope_theta", 10000.0},          {"tie_word_embeddings", false},
                      {"hidden_act", "silu"}};
  return ModelConfig::from_json(j, "gqa63 test config");
}

struct Pair {
  std::string name;
  std::shared_ptr<Transformer> whole, part;
};

ModelOptions options(torch::ScalarType dtype, bool tp, bool checkpointing = false) {
  ModelOptions o;
  o.dtype = dtype;
  o.logprob_chunk_tokens = 5;  // several chunks per batch
  o.gradient_checkpointing = checkpointing;
  if (tp) o.tp_group = world();
  return o;
}

// Every fixture (the part loaded from the checkpoint, sliced at load) and the 6/3 model (the part
// from the whole model's weights).
std::vector<Pair> models(torch::ScalarType dtype, bool checkpointing = false) {
  std::vector<Pair> out;
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    out.push_back({dir.filename().string(), Transformer::from_pretrained(dir, options(dtype, false, checkpointing)),
                   Transformer::from_pretrained(dir, options(dtype, true, checkpointing))});
  }
  const auto c = gqa63_config();
  auto whole = std::make_shared<Transformer>(c, options(dtype, false, checkpointing));
  whole->init_weights(0.2, 11);
  auto part = std::make_shared<Transformer>(c, options(dtype, true, checkpointing));
  part->load_weights(whole->named_weights(), "the whole 6/3 model");
  out.push_back({"gqa63", whole, part});
  return out;
}

// The same random tensor on every rank (each rank's own generator would draw another).
torch::Tensor seeded_randn(at::IntArrayRef sizes, torch::ScalarType dtype, uint64_t seed) {
  auto g = at::detail::createCPUGenerator(seed);
  return at::randn(sizes, g, torch::TensorOptions().dtype(torch::kFloat64)).to(dtype);
}

torch::Tensor token_batch(const ModelConfig& c, int64_t seed) {
  auto g = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  return at::randint(c.vocab_size, {2, 11}, g, torch::TensorOptions().dtype(torch::kInt64));
}

double max_relative(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-30);
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>() / scale;
}

// The whole model's trained tensors by name (parameters, adapters).
std::map<std::string, torch::Tensor> by_name(const Transformer& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, t] : m.named_weights()) out[name] = t;
  if (m.has_adapters()) {
    for (const auto& [name, t] : m.trained_weights()) out[name] = t;
  }
  return out;
}

// The whole models' fp64 gradients by model and head, the exact values the fp32 runs are measured against.
std::map<std::string, std::map<std::string, torch::Tensor>> exact_gradients;

// Each trained tensor's gradient on the parts, summed where partial and gathered whole, against
// the whole model's. fp64: each tensor within 1e-12 relative (in norm). fp32: each within 1e-5, and
// all of them together within 1e-6 relative or twice the whole fp32 model's own distance from the
// fp64 gradients, whichever is larger (two fp32 computations summing in other orders; a tensor
// whose exact gradient is near zero, as Qwen2's k_proj bias, is all rounding noise).
void gradient_difference(const Pair& p, const std::string& what) {
  const auto trained = p.part->trainable_parameters();
  p.part->reduce_partial_gradients(trained);
  const auto whole = by_name(*p.whole);
  const bool fp64 = what.find("fp64") != std::string::npos;
  const std::string key = p.name + what.substr(what.find(' '));
  auto& exact = exact_gradients[key];
  double diff2 = 0, ref2 = 0, floor2 = 0, exact2 = 0;
  for (const auto& [name, t] : by_name(*p.part)) {
    if (!t.requires_grad()) continue;
    const auto& reference = whole.at(name);
    EXPECT_TRUE(reference.grad().defined()) << p.name << " " << what << ": " << name;
    EXPECT_TRUE(t.grad().defined()) << p.name << " " << what << ": " << name;
    if (!reference.grad().defined() || !t.grad().defined()) continue;
    const auto g = p.part->gather_weight(name, t.grad(), -1).to(torch::kFloat64);
    const auto r = reference.grad().to(torch::kFloat64);
    const double d = (g - r).norm().item<double>() / std::max(r.norm().item<double>(), 1e-30);
    EXPECT_LE(d, fp64 ? 1e-12 : 1e-5) << p.name << " " << what << ": " << name;
    diff2 += (g - r).square().sum().item<double>();
    ref2 += r.square().sum().item<double>();
    if (fp64) {
      exact[name] = r;
    } else if (exact.count(name)) {
      floor2 += (r - exact.at(name)).square().sum().item<double>();
      exact2 += exact.at(name).square().sum().item<double>();
    }
  }
  const double overall = std::sqrt(diff2 / std::max(ref2, 1e-300));
  const double floor = exact2 > 0 ? std::sqrt(floor2 / exact2) : 0.0;
  EXPECT_LE(overall, fp64 ? 1e-12 : std::max(1e-6, 2 * floor)) << p.name << " " << what << " overall";
  if (world()->rank() == 0) {
    std::printf("  %s %s: gradients within %.1e relative overall%s\n", p.name.c_str(), what.c_str(), overall,
                fp64 ? "" : fmt::format(" (the whole fp32 model's own from fp64: {:.1e})", floor).c_str());
  }
}

void zero_grads(const Pair& p) {
  for (auto* m : {p.whole.get(), p.part.get()}) {
    for (auto& t : m->trainable_parameters()) t.mutable_grad() = torch::Tensor();
  }
}

}  // namespace

TEST(TensorParallel, LayoutSplitsHeadsAndKeepsEachRanksKvHeads) {
  // 6 heads / 3 KV heads over 2 ranks: query heads 0-2 and 3-5 straddle KV head 1, so each rank
  // holds one copy of its KV head per query head.
  auto two = TpLayout::make(gqa63_config(), 2);
  EXPECT_EQ(two.ranks[0].kv_heads, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(two.ranks[1].kv_heads, (std::vector<int64_t>{1, 2, 2}));
  EXPECT_TRUE(two.kv_duplicated());
  // Over 3 ranks they split.
  auto three = TpLayout::make(gqa63_config(), 3);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(three.ranks[r].kv_heads, (std::vector<int64_t>{r}));
  EXPECT_FALSE(three.kv_duplicated());
  // 4 heads / 1 KV head over 3 ranks: heads 1, 1, 2 and the one KV head replicated.
  auto c = gqa63_config();
  c.num_attention_heads = 4;
  c.num_key_value_heads = 1;
  c.head_dim = 12;
  auto mq = TpLayout::make(c, 3);
  EXPECT_EQ(mq.ranks[2].q_end - mq.ranks[2].q_begin, 2);
  for (const auto& r : mq.ranks) EXPECT_EQ(r.kv_heads, (std::vector<int64_t>{0}));
  // Balanced, and covering the vocabulary and MLP channels exactly.
  EXPECT_EQ(three.ranks[0].vocab_begin, 0);
  EXPECT_EQ(three.ranks[2].vocab_end, 211);
  EXPECT_EQ(three.ranks[1].vocab_begin, three.ranks[0].vocab_end);
  EXPECT_EQ(three.ranks[2].mlp_end, 100);
  EXPECT_THROW_MSG(TpLayout::make(c, 5, "--rollout-tp"), UserError, "--rollout-tp 5", "4 attention heads");
}

TEST(TensorParallel, LogitsAndTokenLogprobsEqualOneRank) {
  if (!multi_rank()) GTEST_SKIP() << "needs mpirun -np 2 or more";
  torch::NoGradGuard no_grad;
  for (const auto& p : models(torch::kFloat32)) {
    const auto ids = token_batch(p.whole->config(), 5);
    auto mask = torch::ones_like(ids);
    mask[1].narrow(0, 0, 3).fill_(0);  // left padding
    const auto whole = p.whole->forward(ids, mask), part = p.part->forward(ids, mask);
    ASSERT_EQ(part.sizes(), whole.sizes()) << p.name;
    // fp32 with the sums over the group in another order: 1e-5 (the bound).
    EXPECT_LE((part - whole).abs().max().item<double>(), 1e-5) << p.name;
    auto targets = ids.roll(-1, 1);
    targets.select(1, 10).fill_(-1);
    for (double temperature : {1.0, 0.7}) {
      const auto a = p.whole->token_logprobs_entropy(ids, targets, temperature, mask);
      const auto b = p.part->token_logprobs_entropy(ids, targets, temperature, mask);
      // allclose's form: 1e-5 (the bound) + 1e-6 relative (8 fp32 steps). These random
      // fixtures give log-probs down to -48, where one fp32 step is 3.8e-6 and the two orders of the
      // log-sum-exp and the target's logit differ by up to 4 steps (1.5e-5 measured).
      const auto bound = b.logprobs.abs() * 1e-6 + 1e-5;
      EXPECT_TRUE(((a.logprobs - b.logprobs).abs() <= bound).all().item<bool>())
          << p.name << ": " << (a.logprobs - b.logprobs).abs().max().item<double>() << " at log-probs down to "
          << b.logprobs.min().item<double>();
      // The entropy, a metric, sums p·z over the vocabulary in fp32 on either side: 1e-4.
      EXPECT_LE((a.entropy - b.entropy).abs().max().item<double>(), 1e-4) << p.name;
    }
  }
}

TEST(TensorParallel, GradientsOfEveryHeadEqualOneRank) {
  if (!multi_rank()) GTEST_SKIP() << "needs mpirun -np 2 or more";
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const std::string tag = dtype == torch::kFloat64 ? "fp64" : "fp32";
    for (const auto& p : models(dtype)) {
      for (auto* m : {p.whole.get(), p.part.get()}) m->train();
      const auto ids = token_batch(p.whole->config(), 7);
      auto targets = ids.roll(-1, 1);
      targets.select(1, 10).fill_(-1);
      targets[0].narrow(0, 0, 4).fill_(-1);  // a prompt
      auto weights = seeded_randn(ids.sizes(), dtype, 21);
      // The chunked head (backward recomputes each chunk).
      for (auto* m : {p.whole.get(), p.part.get()}) (m->token_logprobs(ids, targets, 0.8) * weights).sum().backward();
      gradient_difference(p, tag + " chunked head");
      zero_grads(p);
      // The fused head: log-probs, the loss gradient and the head's gradients in one pass.
      for (auto* m : {p.whole.get(), p.part.get()}) {
        auto h = m->hidden_states(ids).reshape({-1, m->config().hidden_size});
        const auto flat = targets.reshape({-1});
        const auto rows = flat.ge(0).nonzero().squeeze(-1);
        const auto w = weights.reshape({-1}).index_select(0, rows);
        auto head = fused_token_loss_head(h.index_select(0, rows), m->output_weight(), flat.index_select(0, rows), 0.8, 5,
                                          [&](const torch::Tensor& logp) { return (logp * w.to(logp.scalar_type())).sum(); },
                                          false, m->vocab_shard());
        head.loss.backward();
      }
      gradient_difference(p, tag + " fused head");
      zero_grads(p);
      // The entropy bonus's head (differentiable entropy over the whole vocabulary).
      std::vector<torch::Tensor> entropies;
      for (auto* m : {p.whole.get(), p.part.get()}) {
        auto out = m->token_logprobs_with_entropy(ids, targets, 0.8);
        entropies.push_back(out.entropy.detach());
        (out.logprobs * weights + out.entropy * weights.flip(1)).sum().backward();
      }
      // fp32: 1e-5 of the largest entropy, plus 2e-6 absolute. In a peaked row the entropy is near 0
      // but computed from terms of the logits' size (~40 for the Qwen fixtures at T = 0.8), of which
      // fp32 keeps ~4e-6: where every row is peaked (qwen2-tiny's largest entropy here is 0.005)
      // the two sides differ by 1e-6 absolute, 2e-4 of the largest.
      const double entropy_diff = (entropies[1] - entropies[0]).abs().max().item<double>();
      const double entropy_scale = entropies[0].abs().max().item<double>();
      EXPECT_LE(entropy_diff, dtype == torch::kFloat64 ? 1e-12 * entropy_scale : 2e-6 + 1e-5 * entropy_scale) << p.name;
      gradient_difference(p, tag + " entropy head");
      zero_grads(p);
    }
  }
}

TEST(TensorParallel, LoraAndGradientCheckpointingEqualOneRank) {
  if (!multi_rank()) GTEST_SKIP() << "needs mpirun -np 2 or more";
  LoraConfig lora;
  lora.rank = 3;
  lora.alpha = 6;
  for (bool checkpointing : {false, true}) {
    for (const auto& p : models(torch::kFloat64, checkpointing)) {
      p.whole->add_adapters(lora, 17);
      p.part->add_adapters(lora, 17);
      // The same fresh A on every layout (drawn whole, then cut); B made non-zero alike.
      NamedTensors b;
      for (const auto& [name, t] : p.whole->trained_weights()) {
        const auto mine = by_name(*p.part).at(name);
        EXPECT_TRUE(torch::equal(p.part->gather_weight(name, mine, -1), t)) << p.name << " " << name;
        if (name.find("lora_B") != std::string::npos) b.emplace_back(name, seeded_randn(t.sizes(), t.scalar_type(), b.size() + 1) * 0.1);
      }
      p.whole->update_weights(b, "test");
      p.part->update_weights(b, "test");
      for (auto* m : {p.whole.get(), p.part.get()}) m->train();
      const auto ids = token_batch(p.whole->config(), 9);
      auto targets = ids.roll(-1, 1);
      targets.select(1, 10).fill_(-1);
      {
        torch::NoGradGuard no_grad;
        EXPECT_LE((p.whole->forward(ids) - p.part->forward(ids)).abs().max().item<double>(), 1e-12) << p.name;
      }
      for (auto* m : {p.whole.get(), p.part.get()}) m->token_logprobs(ids, targets).sum().backward();
      gradient_difference(p, std::string("fp64 LoRA") + (checkpointing ? " checkpointed" : ""));
    }
  }
}

TEST(TensorParallel, GatheredWholeModelEqualsTheOriginal) {
  if (!multi_rank()) GTEST_SKIP() << "needs mpirun -np 2 or more";
  for (const auto& p : models(torch::kFloat32)) {
    const auto whole = by_name(*p.whole);
    for (const auto& [name, t] : p.part->named_weights()) {
      const auto g = p.part->gather_weight(name, t, 0);
      if (world()->rank() == 0) {
        EXPECT_TRUE(torch::equal(g, whole.at(name))) << p.name << " " << name;
      } else {
        EXPECT_FALSE(g.defined());
      }
    }
    {
      WholeModel gathered(*p.part, 0);
      if (world()->rank() == 0) {
        for (const auto& [name, t] : p.part->named_weights()) EXPECT_TRUE(torch::equal(t, whole.at(name))) << name;
      }
    }
    // Released: the parts again, still equal to the whole model's.
    torch::NoGradGuard no_grad;
    const auto ids = token_batch(p.whole->config(), 3);
    EXPECT_LE((p.whole->forward(ids) - p.part->forward(ids)).abs().max().item<double>(), 1e-5) << p.name;
  }
}

namespace {

std::vector<GenerationRequest> requests_for(int64_t vocab, const SamplingParams& params, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<GenerationRequest> out;
  for (int64_t len : {1, 6, 19, 9}) {
    GenerationRequest r;
    for (int64_t k = 0; k < len; ++k) r.prompt_ids.push_back(static_cast<int32_t>(rng() % vocab));
    r.params = params;
    r.n = len % 2 == 1 ? 3 : 1;  // groups share their prompt's blocks
    r.seed = rng();
    out.push_back(r);
  }
  return out;
}

// The samples on the group's first rank (empty on the others, which serve).
std::vector<GeneratedSample> generate_on_group(Engine& engine, const std::vector<GenerationRequest>& requests) {
  std::vector<GeneratedSample> out;
  if (engine.leads()) {
    out = engine.generate(requests);
    engine.release_followers();
  } else {
    engine.serve();
  }
  return out;
}

EngineConfig engine_config(int64_t n_blocks) {
  EngineConfig c;
  c.block_size = 4;
  c.n_blocks = n_blocks;
  c.scheduler.max_num_batched_tokens = 16;  // prompts in chunks beside the decodes
  return c;
}

}  // namespace

TEST(TensorParallel, EngineGeneratesTheWholeModelsTokens) {
  if (!multi_rank()) GTEST_SKIP() << "needs mpirun -np 2 or more";
  std::vector<SamplingParams> settings(4);
  settings[0].temperature = 0;  // greedy
  settings[1].temperature = 1.0;
  settings[2].temperature = 0.8;
  settings[2].top_k = 7;
  settings[2].top_p = 0.9;
  settings[3].temperature = 1.2;
  settings[3].min_p = 0.05;
  settings[3].top_p = 0.7;
  for (auto& p : settings) p.max_new_tokens = 10;
  for (const auto& p : models(torch::kFloat32)) {
    for (int64_t n_blocks : {256, 12}) {  // 12 blocks of 4: preemption and recomputation
      for (size_t k = 0; k < settings.size(); ++k) {
        SCOPED_TRACE(p.name + " setting " + std::to_string(k) + " blocks " + std::to_string(n_blocks));
        const auto requests = requests_for(p.whole->config().vocab_size, settings[k], 100 + k);
        Engine whole(p.whole, engine_config(n_blocks)), part(p.part, engine_config(n_blocks));
        const auto expected = whole.generate(requests);
        const auto got = generate_on_group(part, requests);
        if (!part.leads()) continue;
        ASSERT_EQ(got.size(), expected.size());
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_EQ(got[i].token_ids, expected[i].token_ids) << "sample " << i;
          ASSERT_EQ(got[i].logprobs.size(), expected[i].logprobs.size());
          for (size_t t = 0; t < got[i].logprobs.size(); ++t) EXPECT_NEAR(got[i].logprobs[t], expected[i].logprobs[t], 1e-5);
        }
        if (n_blocks == 12 && k == 1) EXPECT_GT(part.last_stats().scheduler.n_preemptions, 0);
      }
    }
  }
}

TEST(TensorParallel, EngineOnAHalfPrecisionCopyOfThePartsGeneratesTheWholeCopysTokens) {
  if (!multi_rank()) GTEST_SKIP() << "needs mpirun -np 2 or more";
  SamplingParams params;
  params.temperature = 0;
  params.max_new_tokens = 10;
  for (const auto& p : models(torch::kFloat32)) {
    SCOPED_TRACE(p.name);
    auto config = engine_config(256);
    config.weights_dtype = torch::kBFloat16;  // the engine's own copy, of this rank's part
    config.kv_dtype = torch::kBFloat16;
    Engine whole(p.whole, config), part(p.part, config);
    const auto requests = requests_for(p.whole->config().vocab_size, params, 5);
    const auto expected = whole.generate(requests);
    const auto got = generate_on_group(part, requests);
    if (!part.leads()) continue;
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].token_ids, expected[i].token_ids) << "sample " << i;
  }
}

TEST(TensorParallel, EngineLogprobsEqualTheTrainersOverTheParts) {
  if (!multi_rank()) GTEST_SKIP() << "needs mpirun -np 2 or more";
  SamplingParams params;
  params.temperature = 0.9;
  params.top_k = 20;  // truncation does not change the reported log-prob
  params.max_new_tokens = 12;
  for (const auto& p : models(torch::kFloat32)) {
    SCOPED_TRACE(p.name);
    Engine engine(p.part, engine_config(256));
    auto samples = generate_on_group(engine, requests_for(p.whole->config().vocab_size, params, 7));
    // The first rank's samples to every rank, which score them with the parts of the trainer.
    std::string bytes;
    if (engine.leads()) {
      for (const auto& s : samples) {
        const auto n = static_cast<int32_t>(s.token_ids.size());
        bytes.append(reinterpret_cast<const char*>(&n), sizeof(n));
        bytes.append(reinterpret_cast<const char*>(s.token_ids.data()), sizeof(int32_t) * s.token_ids.size());
        bytes.append(reinterpret_cast<const char*>(s.logprobs.data()), sizeof(float) * s.logprobs.size());
      }
    }
    world()->broadcast_bytes(bytes, 0);
    const auto requests = requests_for(p.whole->config().vocab_size, params, 7);
    size_t at = 0, k = 0;
    for (const auto& r : requests) {
      for (int64_t j = 0; j < r.n; ++j, ++k) {
        int32_t n = 0;
        std::memcpy(&n, bytes.data() + at, sizeof(n));
        at += sizeof(n);
        std::vector<int32_t> response(static_cast<size_t>(n));
        std::vector<float> reported(static_cast<size_t>(n));
        std::memcpy(response.data(), bytes.data() + at, sizeof(int32_t) * n);
        at += sizeof(int32_t) * n;
        std::memcpy(reported.data(), bytes.data() + at, sizeof(float) * n);
        at += sizeof(float) * n;
        std::vector<int64_t> ids(r.prompt_ids.begin(), r.prompt_ids.end());
        ids.insert(ids.end(), response.begin(), response.end());
        auto input = torch::tensor(ids, torch::kInt64).unsqueeze(0);
        auto targets = torch::full_like(input, -1);
        const int64_t prompt = static_cast<int64_t>(r.prompt_ids.size());
        for (int32_t t = 0; t < n; ++t) targets[0][prompt - 1 + t] = response[static_cast<size_t>(t)];
        torch::NoGradGuard no_grad;
        const auto logp = p.part->token_logprobs(input, targets, params.temperature);
        for (int32_t t = 0; t < n; ++t) {
          // The RL invariant (docs/architecture.md): the sampler's log-prob is the trainer's, fp32 within 1e-5.
          EXPECT_NEAR(logp[0][prompt - 1 + t].item<float>(), reported[static_cast<size_t>(t)], 1e-5) << "sample " << k;
        }
      }
    }
    EXPECT_EQ(at, bytes.size());
  }
}

TEST(TensorParallel, EagerReferenceOverThePartsEqualsTheWhole) {
  if (!multi_rank()) GTEST_SKIP() << "needs mpirun -np 2 or more";
  SamplingParams params;
  params.temperature = 1.0;
  params.top_p = 0.8;
  params.max_new_tokens = 6;
  for (const auto& p : models(torch::kFloat32)) {
    const auto requests = requests_for(p.whole->config().vocab_size, params, 3);
    const auto expected = generate_eager(*p.whole, requests, nullptr);
    const auto got = generate_eager(*p.part, requests, nullptr);  // every rank, in step
    ASSERT_EQ(got.size(), expected.size()) << p.name;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].token_ids, expected[i].token_ids) << p.name << " " << i;
  }
}
