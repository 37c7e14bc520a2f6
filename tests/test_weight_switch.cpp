// Partial rollouts in the engine: weights taken between steps reach the running sequences, and a
// checkpoint's cut (Engine::cut_generation) ends a call with its samples' tokens, which go on as
// requests of their own (PiecedSample) the same in the run and in a resumed one.
#include <torch/torch.h>

#include "engine/engine.h"
#include "engine/stop_strings.h"
#include "engine_requests.h"
#include "test_util.h"
#include "trainer_logprobs.h"

using namespace rlcpp;
using rlcpp::testing::mixed_requests;
using rlcpp::testing::small_engine;

namespace {

// The fixture's model with every weight moved a little (the next policy version), and a copy of its weights.
std::shared_ptr<Transformer> perturbed_model(const std::filesystem::path& dir) {
  auto updated = Transformer::from_pretrained(dir);
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  for (auto& [name, w] : updated->named_weights()) w.add_(torch::randn_like(w) * 0.05);
  return updated;
}

NamedTensors weights_of(Transformer& model) {
  NamedTensors weights;
  for (const auto& [name, w] : model.named_weights()) weights.emplace_back(name, w.clone());
  return weights;
}

}  // namespace

// Partial rollouts: weights taken between steps (Engine::set_step_hook) reach the running
// sequences. Each token records the version that sampled it; the tokens before the switch are
// those of a run without one; with the cache recomputed each later token's log-prob is the trainer's
// on the new weights (1e-5), and with the cache kept it is not (the old weights' keys and values).
TEST(Engine, WeightSwitchInTheMiddleOfSequences) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    torch::NoGradGuard no_grad;
    auto updated = perturbed_model(dir);
    const NamedTensors new_weights = weights_of(*updated);
    auto requests = mixed_requests(updated->config().vocab_size, 0.8, 16, 3);
    Engine plain_engine(Transformer::from_pretrained(dir), small_engine());
    const auto plain = plain_engine.generate(requests);
    for (bool recompute : {false, true}) {
      SCOPED_TRACE(recompute ? "recompute" : "keep");
      Engine engine(Transformer::from_pretrained(dir), small_engine());
      int64_t step = 0;
      engine.set_step_hook(
          [&] {
            if (step++ == 5) {
              engine.update_weights(new_weights);
              engine.set_version(1);
            }
          },
          recompute);
      const auto out = engine.generate(requests);
      ASSERT_EQ(out.size(), plain.size());
      EXPECT_EQ(engine.last_stats().scheduler.n_recomputed > 0, recompute);
      double worst = 0, largest = 0;
      for (size_t k = 0; k < out.size(); ++k) {
        const auto& s = out[k];
        EXPECT_EQ(s.policy_version, 0);
        ASSERT_EQ(s.version_changes.size(), 1u);
        const auto start = static_cast<size_t>(s.version_changes[0].start);
        EXPECT_EQ(s.version_changes[0].version, 1);
        ASSERT_GE(start, 1u);
        ASSERT_LT(start, s.token_ids.size());
        EXPECT_EQ(std::vector<int32_t>(s.token_ids.begin(), s.token_ids.begin() + static_cast<long>(start)),
                  std::vector<int32_t>(plain[k].token_ids.begin(), plain[k].token_ids.begin() + static_cast<long>(start)));
        const auto trainer = rlcpp::testing::trainer_logprobs(
            *updated, requests[static_cast<size_t>(s.request)].prompt_ids, s.token_ids, 0.8);
        for (size_t t = start; t < s.token_ids.size(); ++t) {
          const double d = std::abs(trainer[t] - s.logprobs[t]);
          (recompute ? worst : largest) = std::max(recompute ? worst : largest, d);
        }
      }
      if (recompute) {
        EXPECT_LT(worst, 1e-5);
      } else {
        EXPECT_GT(largest, 1e-4);  // the kept cache is the old weights'
      }
    }
  }
}

// A cut at a step: the call ends there, every unfinished sample with kAbort and its tokens so far
// (those of a run never cut); its continuations, run on the engine that was cut and on a fresh one
// holding the same weights (a resumed worker), give the same tokens and log-probs, and the joined
// samples record each token's version.
TEST(Engine, CutGenerationGoesOnFromItsTokens) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    const NamedTensors new_weights = weights_of(*perturbed_model(dir));
    auto requests = mixed_requests(Transformer::from_pretrained(dir)->config().vocab_size, 0.8, 16, 7);
    Engine plain_engine(Transformer::from_pretrained(dir), small_engine());
    const auto plain = plain_engine.generate(requests);
    EXPECT_FALSE(plain_engine.cut());

    Engine engine(Transformer::from_pretrained(dir), small_engine());
    int64_t step = 0;
    engine.set_step_hook([&] {
      if (step++ == 5) {
        engine.update_weights(new_weights);
        engine.set_version(1);
        engine.cut_generation();
      }
    });
    const auto cut = engine.generate(requests);
    ASSERT_TRUE(engine.cut());
    engine.set_step_hook(nullptr);
    ASSERT_EQ(cut.size(), plain.size());
    std::vector<PiecedSample> pieces(cut.size());
    std::vector<GenerationRequest> rest;
    std::vector<size_t> going_on;
    for (size_t k = 0; k < cut.size(); ++k) {
      const auto& s = cut[k];
      const auto n = s.token_ids.size();
      ASSERT_LE(n, plain[k].token_ids.size());
      EXPECT_EQ(s.token_ids, std::vector<int32_t>(plain[k].token_ids.begin(), plain[k].token_ids.begin() + static_cast<long>(n)));
      EXPECT_EQ(s.logprobs, std::vector<float>(plain[k].logprobs.begin(), plain[k].logprobs.begin() + static_cast<long>(n)));
      pieces[k].out.request = s.request;
      pieces[k].out.sample = s.sample;
      pieces[k].append(s);
      if (s.finish_reason != FinishReason::kAbort) continue;
      EXPECT_LT(n, 6u);  // five steps ran
      rest.push_back(pieces[k].continuation(requests[static_cast<size_t>(s.request)], requests[static_cast<size_t>(s.request)].params.max_new_tokens));
      going_on.push_back(k);
    }
    ASSERT_FALSE(going_on.empty());
    const auto after = engine.generate(rest);
    EXPECT_FALSE(engine.cut());
    Engine resumed(Transformer::from_pretrained(dir), small_engine());
    resumed.load_weights(new_weights, 1);
    const auto again = resumed.generate(rest);
    ASSERT_EQ(after.size(), again.size());
    for (size_t j = 0; j < after.size(); ++j) {
      EXPECT_EQ(after[j].token_ids, again[j].token_ids);
      EXPECT_EQ(after[j].logprobs, again[j].logprobs);
      EXPECT_EQ(after[j].finish_reason, again[j].finish_reason);
      EXPECT_NE(after[j].finish_reason, FinishReason::kAbort);
      PiecedSample& joined = pieces[going_on[j]];
      const auto before = static_cast<int64_t>(joined.out.token_ids.size());
      joined.append(after[j]);
      EXPECT_EQ(joined.pieces, 2);
      EXPECT_EQ(joined.out.finish_reason, after[j].finish_reason);
      EXPECT_EQ(joined.out.token_ids.size(), joined.out.logprobs.size());
      EXPECT_LE(static_cast<int64_t>(joined.out.token_ids.size()), 16);
      if (before == 0) {  // cut before its first token: every token is the new version's
        EXPECT_EQ(joined.out.policy_version, 1);
        EXPECT_TRUE(joined.out.version_changes.empty());
      } else {
        EXPECT_EQ(joined.out.policy_version, 0);
        ASSERT_EQ(joined.out.version_changes.size(), 1u);
        EXPECT_EQ(joined.out.version_changes[0].start, before);
        EXPECT_EQ(joined.out.version_changes[0].version, 1);
      }
    }
  }
}

// Joining pieces: versions per token (a piece's own changes shifted, a change only where the
// version differs), log-probs padded only where some piece has them, continuation seeds per piece.
TEST(PiecedSample, JoinsTokensVersionsAndLogprobs) {
  PiecedSample p;
  p.out.sample = 2;
  GeneratedSample a;
  a.token_ids = {1, 2, 3};
  a.logprobs = {-1, -2, -3};
  a.policy_version = 4;
  a.version_changes = {{2, 5}};
  a.finish_reason = FinishReason::kAbort;
  p.append(a);
  GeneratedSample b;
  b.token_ids = {7, 8};
  b.logprobs = {-7, -8};
  b.policy_version = 5;  // as the sample ended: no change
  b.version_changes = {{1, 6}};
  b.finish_reason = FinishReason::kStop;
  p.append(b);
  EXPECT_EQ(p.out.token_ids, (std::vector<int32_t>{1, 2, 3, 7, 8}));
  EXPECT_EQ(p.out.logprobs, (std::vector<float>{-1, -2, -3, -7, -8}));
  EXPECT_EQ(p.out.policy_version, 4);
  EXPECT_EQ(p.out.version_changes, (std::vector<VersionChange>{{2, 5}, {4, 6}}));
  EXPECT_EQ(p.out.finish_reason, FinishReason::kStop);
  EXPECT_EQ(p.pieces, 2);

  GenerationRequest original;
  original.prompt_ids = {9, 9};
  original.n = 4;
  original.seed = 11;
  const auto next = p.continuation(original, 8);
  EXPECT_EQ(next.prompt_ids, (std::vector<int32_t>{9, 9, 1, 2, 3, 7, 8}));
  EXPECT_EQ(next.n, 1);
  EXPECT_EQ(next.params.max_new_tokens, 3);
  EXPECT_EQ(next.seed, sample_seed(sample_seed(11, 2), 2));

  PiecedSample bare;  // a backend that gives no log-probs: none made up
  GeneratedSample c;
  c.token_ids = {1};
  bare.append(c);
  bare.append(c);
  EXPECT_TRUE(bare.out.logprobs.empty());
  EXPECT_EQ(bare.out.token_ids.size(), 2u);
}

// A stop string across two pieces, which neither piece's engine saw: the joined sample ends at the
// token completing it, as an uncut generation would (tokens, log-probs and version changes after
// it dropped, finish kStop, the text cut before it); without one the text is the whole response.
TEST(PiecedSample, StopStringAcrossPieces) {
  const auto tokenizer = rlcpp::testing::byte_tokenizer();
  auto bytes = [](const std::string& text) { return std::vector<int32_t>(text.begin(), text.end()); };
  PiecedSample p;
  GeneratedSample a;
  a.token_ids = bytes("x = 4 </an");
  a.logprobs.assign(a.token_ids.size(), -1.0F);
  a.policy_version = 1;
  a.finish_reason = FinishReason::kAbort;
  a.text = "x = 4 </an";
  p.append(a);
  GeneratedSample b;
  b.token_ids = bytes("swer> and more");
  b.logprobs.assign(b.token_ids.size(), -2.0F);
  b.policy_version = 2;
  b.version_changes = {{8, 3}};  // past the stop string: dropped with its tokens
  b.finish_reason = FinishReason::kLength;
  b.text = "swer> and more";
  p.append(b);
  ASSERT_EQ(p.out.version_changes, (std::vector<VersionChange>{{10, 2}, {18, 3}}));
  GeneratedSample unsettled = p.out;
  EXPECT_FALSE(settle_stop_strings(unsettled, *tokenizer, {"<tool>"}));
  EXPECT_EQ(unsettled.text, "x = 4 </answer> and more");  // whole, not piece by piece
  EXPECT_EQ(unsettled.token_ids.size(), 24u);
  EXPECT_TRUE(settle_stop_strings(p.out, *tokenizer, {"</answer>", "more"}));
  EXPECT_EQ(p.out.token_ids, bytes("x = 4 </answer>"));
  EXPECT_EQ(p.out.logprobs.size(), 15u);
  EXPECT_FLOAT_EQ(p.out.logprobs.back(), -2.0F);
  EXPECT_EQ(p.out.version_changes, (std::vector<VersionChange>{{10, 2}}));
  EXPECT_EQ(p.out.finish_reason, FinishReason::kStop);
  EXPECT_EQ(p.out.text, "x = 4 ");
  // Settled again (another piece's join), it stays as it is.
  GeneratedSample again = p.out;
  EXPECT_TRUE(settle_stop_strings(again, *tokenizer, {"</answer>", "more"}));
  EXPECT_EQ(again.token_ids, p.out.token_ids);
  EXPECT_EQ(again.text, p.out.text);
}
