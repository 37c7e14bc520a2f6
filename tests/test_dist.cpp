// The dist layer under mpirun (3 ranks: 1 trainer, 2 rollout workers): topology, collectives,
// point-to-point bytes, bucketed weight sync in both modes ending with equal weight hashes, and
// data-parallel training equal to one trainer with the whole batch.
// Run by CTest as `mpirun --oversubscribe -np 3 dist_mpi`; alone, only the world-of-one tests run.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/gradient_sync.h"
#include "dist/mpi.h"
#include "dist/topology.h"
#include "dist/weight_sync.h"
#include "test_util.h"
#include "train/trainer.h"
#include "util/error.h"

using namespace rlcpp;

namespace {

NamedTensors model_like(uint64_t seed) {
  torch::manual_seed(seed);
  return {{"embed.weight", torch::randn({300, 64})},
          {"layers.0.q.weight", torch::randn({64, 64}).to(torch::kBFloat16)},
          {"layers.0.q.bias", torch::randn({64})},
          {"layers.0.scale", torch::randn({})},
          {"layers.1.big", torch::randn({512, 256}, torch::kFloat64)},
          {"counts", torch::arange(17, torch::kInt64)}};
}

}  // namespace

TEST(Dist, BucketsHoldAtMostTheirBytesUnlessATensorIsBigger) {
  const auto tensors = model_like(1);
  const auto plan = plan_buckets(tensors, 64 * 1024);
  size_t seen = 0;
  for (const auto& bucket : plan) {
    uint64_t bytes = 0;
    for (size_t k : bucket) {
      bytes += tensors[k].second.nbytes();
      EXPECT_EQ(k, seen++);
    }
    EXPECT_TRUE(bytes <= 64 * 1024 || bucket.size() == 1) << bytes;
  }
  EXPECT_EQ(seen, tensors.size());
  EXPECT_EQ(plan_buckets(tensors, 1ULL << 30).size(), 1u);
  EXPECT_EQ(plan_buckets(tensors, 1).size(), tensors.size());
  EXPECT_NE(weights_hash(model_like(1)), weights_hash(model_like(2)));
  EXPECT_EQ(weights_hash(model_like(1)), weights_hash(model_like(1)));
}

TEST(Dist, TopologyNeedsTheWorldItAsksFor) {
  auto world = mpi_world();
  EXPECT_THROW(Topology::create(world, 2, world->size()), UserError);
  try {
    Topology::create(world, 1, world->size());
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("were started"), std::string::npos) << e.what();
  }
}

TEST(Dist, CollectivesAndBytes) {
  auto world = mpi_world();
  const int n = world->size(), r = world->rank();
  auto t = torch::full({5}, static_cast<float>(r + 1));
  world->all_reduce_sum(t);
  EXPECT_TRUE(torch::equal(t, torch::full({5}, static_cast<float>(n * (n + 1) / 2))));
  auto half = torch::full({3}, 1.5, torch::kBFloat16);
  world->all_reduce_sum(half);
  EXPECT_EQ(half[0].item<float>(), 1.5f * static_cast<float>(n));
  auto b = r == 0 ? torch::arange(10, torch::kFloat64) : torch::zeros({10}, torch::kFloat64);
  world->broadcast(b, 0);
  EXPECT_TRUE(torch::equal(b, torch::arange(10, torch::kFloat64)));
  std::string text = r == 0 ? std::string(3'000'001, 'x') + "end" : "";
  world->broadcast_bytes(text, 0);
  EXPECT_EQ(text.size(), 3'000'004u);
  EXPECT_EQ(text.substr(text.size() - 3), "end");
  if (n > 1) {  // a ring of messages
    world->send_bytes("from " + std::to_string(r), (r + 1) % n, 7);
    EXPECT_EQ(world->recv_bytes((r + n - 1) % n, 7), "from " + std::to_string((r + n - 1) % n));
  }
  world->barrier();
}

TEST(Dist, WeightSyncReachesEveryRolloutWorkerInBothModes) {
  auto world = mpi_world();
  if (world->size() < 2) GTEST_SKIP() << "needs mpirun -np >= 2";
  const Topology topo = Topology::create(world, 1, world->size() - 1);
  ASSERT_NE(topo.sync_group, nullptr);
  const auto source = model_like(42);
  for (auto mode : {SyncMode::kBroadcast, SyncMode::kP2p}) {
    for (uint64_t bucket : {uint64_t{4096}, uint64_t{64 * 1024}, uint64_t{100} << 20}) {
      NamedTensors received;
      WeightSync sync(topo.sync_group, bucket, mode);
      const auto stats = sync.sync(topo.role == Role::kTrainer ? source : NamedTensors{}, 7,
                                   [&](const NamedTensors& part) {
                                     for (const auto& item : part) received.push_back(item);
                                   });
      EXPECT_EQ(stats.version, 7);
      EXPECT_EQ(stats.buckets, static_cast<int64_t>(plan_buckets(source, bucket).size()));
      // Every rank compares its hash with the trainer's.
      auto hash = torch::tensor({static_cast<int64_t>(weights_hash(topo.role == Role::kTrainer ? source : received))});
      auto expected = hash.clone();
      world->broadcast(expected, 0);
      EXPECT_EQ(hash.item<int64_t>(), expected.item<int64_t>()) << topo.describe() << " bucket " << bucket;
    }
  }
}

// DP invariance: 2 trainers with half the samples each (global token and sample counts, gradients
// summed in buckets) take the same 3 steps as 1 trainer with all of them.
TEST(Dist, TwoTrainersWithHalfTheSamplesEqualOneWithAll) {
  auto world = mpi_world();
  if (world->size() < 2) GTEST_SKIP() << "needs mpirun -np >= 2";
  auto trainers = world->split(world->rank() < 2 ? 0 : 1, world->rank());
  if (world->rank() >= 2) return;
  std::vector<TrainSample> samples = {{{5, 6, 7}, {8, 9, 10, 11}, 1.0, false, {}},  {{12}, {13, 14}, -1.0, false, {}},
                                      {{3, 4, 5}, {9}, 0.5, false, {}},            {{1, 2}, {3, 4, 5, 6, 7}, -0.25, false, {}},
                                      {{9, 9}, {1, 2, 3}, 0.75, false, {}},        {{4}, {4, 4, 4, 4, 4, 4}, -0.5, false, {}},
                                      {{7, 1, 2, 3}, {5, 6}, 1.5, false, {}},      {{2, 8}, {8, 2, 8}, -1.25, false, {}}};
  ModelOptions options;
  options.dtype = torch::kFloat64;
  auto make = [&](std::shared_ptr<Transformer>& model) {
    model = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"), options);
    TrainerConfig config;
    config.optimizer.lr = 1e-2;
    config.train_microbatch_size = 3;
    config.loss.aggregation = LossAggregation::kTokenLevel;
    return std::make_unique<Trainer>(model, nullptr, config);
  };
  std::shared_ptr<Transformer> single_model, dp_model;
  auto single = make(single_model);
  auto dp = make(dp_model);
  dp->set_gradient_reducer([&](const std::vector<torch::Tensor>& params) { all_reduce_gradients(*trainers, params, 4096); });
  const std::vector<TrainSample> half(samples.begin() + 4 * trainers->rank(), samples.begin() + 4 * (trainers->rank() + 1));
  for (int step = 0; step < 3; ++step) {
    single->step(samples, single->policy_logprobs(samples), {});
    auto tokens = torch::tensor({dp->loss_tokens(half)}, torch::kFloat64);
    trainers->all_reduce_sum(tokens);
    dp->step(half, dp->policy_logprobs(half), {}, tokens.item<double>(), static_cast<double>(samples.size()));
  }
  const auto a = single_model->parameters(), b = dp_model->parameters();
  double max_diff = 0;
  for (size_t k = 0; k < a.size(); ++k) max_diff = std::max(max_diff, (a[k] - b[k]).abs().max().item<double>());
  EXPECT_LT(max_diff, 1e-10);
  double moved = 0;
  auto fresh = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"), options)->parameters();
  for (size_t k = 0; k < a.size(); ++k) moved = std::max(moved, (a[k] - fresh[k]).abs().max().item<double>());
  EXPECT_GT(moved, 1e-3);  // the steps did change the weights
}
