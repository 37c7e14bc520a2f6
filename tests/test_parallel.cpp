// The dist layer under mpirun (3 ranks: 1 trainer, 2 rollout workers): topology, collectives,
// point-to-point bytes, bucketed weight sync in both modes ending with equal weight hashes, and
// data-parallel training equal to one trainer with the whole batch.
// Run by CTest as `mpirun --oversubscribe -np 3 dist_mpi`; alone, only the world-of-one tests run.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>

#include "comm/gradient_sync.h"
#include "comm/mpi.h"
#include "comm/nccl.h"
#include "comm/self_world.h"
#include "train/pipeline.h"
#include "parallel/topology.h"
#include "parallel/weight_sync.h"
#include "rl/step/policy_update.h"
#include "rl/rollout/rollout_channel.h"
#include "test_util.h"
#include "train/trainer.h"
#include "train/zero.h"
#include "util/cuda_backend.h"
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

// The largest stage of the best split, by trying every split (for the balance's check).
int64_t best_largest_stage(const std::vector<int64_t>& layers, int64_t first_extra, int64_t last_extra, int64_t stages) {
  const auto n = static_cast<int64_t>(layers.size());
  int64_t best = INT64_MAX;
  std::vector<int64_t> starts(static_cast<size_t>(stages), 0);
  std::function<void(int64_t, int64_t)> place = [&](int64_t s, int64_t from) {
    if (s == stages) {
      int64_t largest = 0;
      for (int64_t k = 0; k < stages; ++k) {
        const int64_t end = k + 1 < stages ? starts[static_cast<size_t>(k) + 1] : n;
        int64_t w = (k == 0 ? first_extra : 0) + (k == stages - 1 ? last_extra : 0);
        for (int64_t i = starts[static_cast<size_t>(k)]; i < end; ++i) w += layers[static_cast<size_t>(i)];
        largest = std::max(largest, w);
      }
      best = std::min(best, largest);
      return;
    }
    for (int64_t j = from; j <= n - (stages - s); ++j) {
      if (s == 0 && j != 0) break;  // the first stage starts at layer 0
      starts[static_cast<size_t>(s)] = j;
      place(s + 1, j + 1);
    }
  };
  place(0, 0);
  return best;
}

TEST(Pipeline, StagesAreContiguousNonEmptyAndTheBestBalance) {
  // 24 equal layers, a large embedding on the first stage and the head on the last: the end
  // stages hold fewer layers.
  const std::vector<int64_t> qwen(24, 100);
  const auto four = balance_stages(qwen, 450, 450, 4);
  EXPECT_EQ(four, (std::vector<StageLayers>{{0, 4}, {4, 12}, {12, 20}, {20, 24}}));
  EXPECT_EQ(balance_stages(qwen, 0, 0, 1), (std::vector<StageLayers>{{0, 24}}));
  // Uneven layers, every stage count: as good as the best of all splits.
  const std::vector<int64_t> uneven{5, 1, 9, 2, 2, 7, 3};
  for (int64_t stages = 1; stages <= 7; ++stages) {
    const auto split = balance_stages(uneven, 4, 6, stages);
    ASSERT_EQ(static_cast<int64_t>(split.size()), stages);
    int64_t next = 0, largest = 0;
    for (int64_t s = 0; s < stages; ++s) {
      const auto [first, last] = split[static_cast<size_t>(s)];
      EXPECT_EQ(first, next);
      EXPECT_LT(first, last) << "stage " << s << " of " << stages << " is empty";
      int64_t w = (s == 0 ? 4 : 0) + (s == stages - 1 ? 6 : 0);
      for (int64_t i = first; i < last; ++i) w += uneven[static_cast<size_t>(i)];
      largest = std::max(largest, w);
      next = last;
    }
    EXPECT_EQ(next, 7);
    EXPECT_EQ(largest, best_largest_stage(uneven, 4, 6, stages)) << stages << " stages";
  }
  EXPECT_THROW(balance_stages(uneven, 0, 0, 8), std::invalid_argument);
}

TEST(Pipeline, OneForwardOneBackwardRunsEveryStageWithoutDeadlockAndItsBubble) {
  // Every stage's passes in its order, each starting once the pass it needs has ended (the
  // previous stage's forward of the micro-batch, the next stage's backward of it), forwards one
  // unit and backwards two: all finish, each stage holds at most stages - stage micro-batches,
  // and the idle share is (p - 1) / (m + p - 1).
  for (int64_t p : {1, 2, 3, 4}) {
    for (int64_t m : {1, 2, 3, 8}) {
      std::vector<std::vector<PipelinePass>> passes;
      for (int64_t s = 0; s < p; ++s) passes.push_back(one_forward_one_backward(s, p, m));
      for (const auto& list : passes) ASSERT_EQ(static_cast<int64_t>(list.size()), 2 * m);
      std::vector<std::vector<int64_t>> fwd_end(p, std::vector<int64_t>(m, -1)), bwd_end(p, std::vector<int64_t>(m, -1));
      std::vector<size_t> next(p, 0);
      std::vector<int64_t> free_at(p, 0), held(p, 0), most_held(p, 0);
      for (bool moved = true; moved;) {
        moved = false;
        for (int64_t s = 0; s < p; ++s) {
          if (next[s] == passes[s].size()) continue;
          const PipelinePass pass = passes[s][next[s]];
          const int64_t needed = pass.forward ? (s == 0 ? 0 : fwd_end[s - 1][pass.micro])
                                              : (s == p - 1 ? fwd_end[s][pass.micro] : bwd_end[s + 1][pass.micro]);
          if (needed < 0) continue;  // not run yet
          const int64_t start = std::max(free_at[s], needed);
          free_at[s] = start + (pass.forward ? 1 : 2);
          (pass.forward ? fwd_end : bwd_end)[s][pass.micro] = free_at[s];
          held[s] += pass.forward ? 1 : -1;
          most_held[s] = std::max(most_held[s], held[s]);
          ++next[s];
          moved = true;
        }
      }
      int64_t makespan = 0;
      for (int64_t s = 0; s < p; ++s) {
        ASSERT_EQ(next[s], passes[s].size()) << "stage " << s << " of " << p << " stalled with " << m << " micro-batches";
        EXPECT_LE(most_held[s], p - s);
        makespan = std::max(makespan, free_at[s]);
      }
      const double idle = 1.0 - static_cast<double>(3 * m) / static_cast<double>(makespan);
      EXPECT_NEAR(idle, one_forward_one_backward_bubble(p, m), 1e-12) << p << " stages, " << m << " micro-batches";
    }
  }
}

// The NCCL plugin: built, loadable (NCCL and LibTorch's CUDA libraries resolve) and its entry point
// found. Without a GPU it names the missing device; with one, the collectives of a world of one.
TEST(Nccl, PluginLoadsAndRunsOrNamesTheMissingDevice) {
  if (mpi_world()->size() > 1) GTEST_SKIP() << "one process";
  if (std::getenv("RLCPP_NCCL_PLUGIN") == nullptr) GTEST_SKIP() << "no NCCL plugin was built (CMake found no NCCL)";
  if (!load_cuda_backend().empty()) {
    try {
      nccl_communicator(self_world(), 0);
      FAIL() << "a NCCL communicator on a machine without a CUDA device";
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("no CUDA device on this machine"), std::string::npos) << what;
      EXPECT_EQ(what.find("does not load"), std::string::npos) << what;
    }
    return;
  }
  auto comm = nccl_communicator(self_world(), 0);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA, 0);
  auto t = torch::arange(6, cuda.dtype(torch::kFloat32));
  comm->all_reduce_sum(t);
  EXPECT_TRUE(torch::equal(t.cpu(), torch::arange(6, torch::kFloat32)));
  auto gathered = torch::empty({6}, cuda.dtype(torch::kFloat32));
  comm->all_gather(t, gathered);
  comm->broadcast(gathered, 0);
  auto part = torch::empty({6}, cuda.dtype(torch::kFloat32));
  comm->reduce_scatter_sum(gathered, part);
  EXPECT_TRUE(torch::equal(part.cpu(), torch::arange(6, torch::kFloat32)));
  EXPECT_EQ(comm->bytes().all_reduce, 24u);
}

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
    const auto sent = torch::arange(12, torch::kFloat32).view({3, 4}).t();  // not contiguous
    if (r == 0) world->send(sent, 1, 8);
    if (r == 1) {
      auto received = torch::zeros({4, 3});
      world->recv(received, 0, 8);
      EXPECT_TRUE(torch::equal(received, sent));
    }
  }
  world->barrier();
}

TEST(Dist, NonBlockingTransfersCrossWithoutDeadlock) {
  // Ranks 0 and 1 each send the other 64 MiB (past any eager limit: two blocking sends would both
  // wait) and receive into a tensor that is not contiguous; the values arrive by wait().
  auto world = mpi_world();
  if (world->size() < 2) GTEST_SKIP() << "needs mpirun -np >= 2";
  const int r = world->rank();
  if (r < 2) {
    const int other = 1 - r;
    auto mine = torch::full({4096, 4096}, static_cast<double>(r + 1), torch::kFloat32);
    mine[7][9] = -3.0f;
    auto into = torch::zeros({4096, 4096}).t();  // not contiguous
    const auto before = world->bytes().send;
    auto received = world->irecv(into, other, 11);
    auto sent = world->isend(mine, other, 11);
    mine.fill_(0);  // the send kept its own copy
    sent->wait();
    received->wait();
    EXPECT_EQ(into[0][0].item<float>(), static_cast<float>(other + 1));
    EXPECT_EQ(into[7][9].item<float>(), -3.0f);  // in the view's own order
    EXPECT_EQ(into.t().contiguous()[9][7].item<float>(), -3.0f);
    EXPECT_EQ(world->bytes().send - before, 4096u * 4096u * 4u);
    received->wait();  // waiting again is harmless
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
  std::vector<Sample> samples = {model_sample({5, 6, 7}, {8, 9, 10, 11}, 1.0), model_sample({12}, {13, 14}, -1.0),
                                 model_sample({3, 4, 5}, {9}, 0.5),           model_sample({1, 2}, {3, 4, 5, 6, 7}, -0.25),
                                 model_sample({9, 9}, {1, 2, 3}, 0.75),       model_sample({4}, {4, 4, 4, 4, 4, 4}, -0.5),
                                 model_sample({7, 1, 2, 3}, {5, 6}, 1.5),     model_sample({2, 8}, {8, 2, 8}, -1.25)};
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
  const std::vector<Sample> half(samples.begin() + 4 * trainers->rank(), samples.begin() + 4 * (trainers->rank() + 1));
  for (int step = 0; step < 3; ++step) {
    single->step({samples, single->policy_logprobs(samples), {}, {}});
    auto tokens = torch::tensor({dp->loss_tokens(half)}, torch::kFloat64);
    trainers->all_reduce_sum(tokens);
    dp->step({half, dp->policy_logprobs(half), {}, {}, tokens.item<double>(), static_cast<double>(samples.size())});
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

// The same through the run's own step (update_policy): a fixed source of 4 groups, one trainer
// with -tbs 4 -tMbs 2 against two with -tbs 2 -tMbs 1 each (group g on trainer g % 2, so each
// global mini-batch holds the same groups), 3 steps, the last with every group on trainer 0. The
// two trainers all-reduce their gradients, or shard them under ZeRO-2 (summed into the shards in
// backward) or everything under ZeRO-3: there trainer 1's empty last step runs empty passes for
// trainer 0's micro-batches.
TEST(Dist, RunStepOnTwoTrainersEqualsOneWithTheWholeBatch) {
  auto world = mpi_world();
  if (world->size() < 2) GTEST_SKIP() << "needs mpirun -np >= 2";
  auto trainers = world->split(world->rank() < 2 ? 0 : 1, world->rank());
  if (world->rank() >= 2) return;
  std::vector<SampleGroup> source(4);
  const std::vector<std::vector<int32_t>> responses = {{8, 9, 10, 11}, {13, 14}, {9}, {3, 4, 5, 6, 7}, {1, 2, 3},
                                                       {4, 4, 4, 4, 4, 4}, {5, 6}, {8, 2, 8}};
  for (size_t k = 0; k < responses.size(); ++k) {
    auto& g = source[k / 2];
    g.samples.push_back(model_sample({5, 6, static_cast<int32_t>(k)}, responses[k], k % 2 == 0 ? 1.0 - 0.1 * k : -0.5 + 0.05 * k));
  }
  ModelOptions options;
  options.dtype = torch::kFloat64;
  RunConfig c;
  c.rollout.num_generations = 2;
  c.train.train_microbatch_size = 3;
  c.algo.loss.kl_coef = 0;
  c.algo.loss.aggregation = LossAggregation::kTokenLevel;
  c.train.optimizer.lr = 1e-2;
  auto make = [&](std::shared_ptr<Transformer>& model, const RunConfig& config) {
    model = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"), options);
    return std::make_unique<Trainer>(model, nullptr, rl_trainer_config(config, 3));
  };
  RunConfig whole = c, half = c;
  whole.train.train_batch_size = 4;
  whole.train.train_minibatch_size = 2;
  half.train.train_batch_size = 2;
  half.train.train_minibatch_size = 1;
  for (int stage : {0, 2, 3}) {
  SCOPED_TRACE(fmt::format("ZeRO stage {}", stage));
  std::shared_ptr<Transformer> single_model, dp_model;
  auto single = make(single_model, whole);
  auto dp = make(dp_model, half);
  if (stage == 0) {
    dp->set_gradient_reducer([&](const std::vector<torch::Tensor>& params) { all_reduce_gradients(*trainers, params, 4096); });
  } else {
    dp->enable_zero(*trainers, stage, 4096);
    EXPECT_EQ(dp_model->parameters()[1].numel() == 0, stage == 3);  // stage 3: only the shard is kept
  }
  const int me = trainers->rank();
  // Balanced (group g on trainer g % 2) for two steps, then a step where trainer 1 holds nothing
  // (a partial step under dynamic batching): it must still take part in every collective.
  const std::vector<SampleGroup> balanced = {source[static_cast<size_t>(me)], source[static_cast<size_t>(me + 2)]};
  const std::vector<SampleGroup> lopsided = me == 0 ? source : std::vector<SampleGroup>{};
  RunConfig lopsided_config = half;
  lopsided_config.train.train_batch_size = 4;
  lopsided_config.train.train_minibatch_size = 2;
  for (int step = 0; step < 3; ++step) {
    const bool last = step == 2;
    const auto& mine = last ? lopsided : balanced;
    const auto a = update_policy(*single, whole, source);
    const auto b = update_policy(*dp, last ? lopsided_config : half, mine, trainers.get());
    EXPECT_EQ(a.metrics.at("optimizer_updates"), 2);
    EXPECT_EQ(b.metrics.at("optimizer_updates"), 2);
    EXPECT_NEAR(a.metrics.at("loss"), b.metrics.at("loss"), 1e-9) << "step " << step;  // the whole step's loss on both
  }
  GatheredParameters gathered(dp->zero());
  const auto a = single_model->parameters(), b = dp_model->parameters();
  double max_diff = 0, moved = 0;
  auto fresh = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"), options)->parameters();
  for (size_t k = 0; k < a.size(); ++k) {
    max_diff = std::max(max_diff, (a[k] - b[k]).abs().max().item<double>());
    moved = std::max(moved, (a[k] - fresh[k]).abs().max().item<double>());
  }
  EXPECT_LT(max_diff, 1e-10);
  EXPECT_GT(moved, 1e-3);
  }
}

TEST(Dist, GroupsGoToTrainersInEqualCountsWithBalancedTokens) {
  // 6 groups over 3 trainers that hold nothing: 2 each; the heaviest never share a trainer.
  const auto to = assign_groups({100, 90, 80, 10, 20, 30}, {0, 0, 0}, {0, 0, 0});
  std::vector<int64_t> count(3, 0), tokens(3, 0);
  const std::vector<int64_t> weight = {100, 90, 80, 10, 20, 30};
  for (size_t g = 0; g < to.size(); ++g) {
    ++count[static_cast<size_t>(to[g])];
    tokens[static_cast<size_t>(to[g])] += weight[g];
  }
  EXPECT_EQ(count, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(tokens, (std::vector<int64_t>{110, 110, 110}));
  // What a trainer already holds counts: the one holding fewer groups is filled first.
  const auto refill = assign_groups({5, 5}, {3, 1}, {30, 10});
  EXPECT_EQ(refill, (std::vector<int>{1, 1}));
  const auto tie = assign_groups({7}, {2, 2}, {50, 20});
  EXPECT_EQ(tie, (std::vector<int>{1}));
}

TEST(Dist, GroupsSurviveTheirMessageForm) {
  SampleGroup g;
  g.prompt = "2 + 2 = ?";
  g.gt_answer = "4";
  g.line = 7;
  g.id = 11;
  Sample s = model_sample({1, 2, 3}, {4, 5}, -0.125, {-0.5f, -1.25f}, /*policy_version=*/3, /*truncated=*/true);
  s.reward = 0.75;
  s.reward_parts = {{"accuracy", 0.5}, {"external", 0.25}};
  s.correct = true;
  s.response = "4";
  s.group_id = g.id;
  s.append(SegmentKind::kInserted, {6, 7}, {}, 3);  // a tool's output
  s.append(SegmentKind::kModel, {8}, {-0.75f}, 4);  // sampled after a weight update
  g.samples.push_back(s);
  const auto back = decode_groups(encode_groups({g, g}));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(to_json(back[1]), to_json(g));
  EXPECT_THROW(decode_groups("\xc1 not msgpack"), InternalError);
}

// reduce_scatter, all_gather and reduce, then ZeRO stages 1 to 3 on every rank of the world against
// LibTorch's AdamW on the all-reduced, clipped gradients (fp64, 1e-12): parameters whose sizes do
// not divide by the ranks, shards that cut through parameters, a parameter without a gradient,
// buckets smaller than a shard, clipping on and off, and the state moved between layouts. Stages 2
// and 3 go through the model's side (ParameterHolder): two "layers" whose gradients are taken in
// any order (at stage 3 gathered before, released after); one resident parameter.
TEST(Dist, ZeroStagesTakeTheUnshardedAdamWStep) {
  auto world = mpi_world();
  const int n = world->size(), r = world->rank();
  auto in = torch::arange(6 * n, torch::kFloat64) * (r + 1);
  auto part = torch::empty({6}, torch::kFloat64);
  world->reduce_scatter_sum(in, part);
  EXPECT_TRUE(torch::equal(part, (torch::arange(6, torch::kFloat64) + 6 * r) * (n * (n + 1) / 2)));
  auto all = torch::empty({4 * n}, torch::kFloat32);
  world->all_gather(torch::full({4}, static_cast<float>(r)), all);
  EXPECT_TRUE(torch::equal(all, torch::arange(n, torch::kFloat32).repeat_interleave(4)));
  auto summed = torch::full({3}, static_cast<double>(r + 1));
  world->reduce_sum(summed, n - 1);
  EXPECT_EQ(summed[0].item<double>(), r == n - 1 ? n * (n + 1) / 2 : r + 1);

  // fp32 takes the kernels' AdamW (adamw_update) against LibTorch's own step: rounding only.
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double rtol = dtype == torch::kFloat64 ? 1e-12 : 2e-5, atol = dtype == torch::kFloat64 ? 1e-14 : 1e-6;
    auto make_params = [dtype] {
      torch::manual_seed(11);
      std::vector<torch::Tensor> ps;
      for (auto shape : std::vector<std::vector<int64_t>>{{7, 5}, {13}, {3, 3, 2}, {1}, {29}}) {
        ps.push_back(torch::randn(shape, torch::kFloat64).to(dtype).requires_grad_());
      }
      return ps;
    };
    for (int stage : {1, 2, 3}) {
      for (double max_norm : {0.0, 0.5}) {
        SCOPED_TRACE(fmt::format("{}, stage {}, max_norm {}", c10::toString(dtype), stage, max_norm));
        auto sharded = make_params(), whole = make_params();
        torch::optim::AdamWOptions options(0.05);
        options.weight_decay(0.1);
        torch::optim::AdamW reference(whole, options);
        const int64_t element = dtype == torch::kFloat64 ? 8 : 4;
        // 5 elements per rank and bucket
        ZeroOptimizer zero(sharded, *world, stage, /*bucket_bytes=*/element * 5 * n, /*resident=*/{sharded[4]});
        if (stage == 3) {
          EXPECT_EQ(sharded[0].numel(), 0);
        }
        const std::vector<std::vector<size_t>> layers = {{1, 0}, {2, 3}};
        for (int step = 0; step < 3; ++step) {
          torch::manual_seed(100 + step);
          std::vector<torch::Tensor> summed;
          std::vector<torch::Tensor> mine(whole.size());
          for (size_t i = 0; i < whole.size(); ++i) summed.push_back(torch::zeros_like(whole[i]));
          for (int k = 0; k < n; ++k) {  // rank k's gradient; rank r keeps its own
            for (size_t i = 0; i < whole.size(); ++i) {
              auto g = torch::randn_like(whole[i]) * (k + 1);
              if (i == 3) continue;  // no gradient for this parameter
              summed[i] += g;
              if (k == r) mine[i] = g.clone();
            }
          }
          if (stage == 1) {
            for (size_t i = 0; i < whole.size(); ++i) {
              if (mine[i].defined()) sharded[i].mutable_grad() = mine[i];
            }
          } else {
            zero.gather_resident();
            EXPECT_TRUE(torch::allclose(sharded[4], whole[4], rtol, atol));
            sharded[4].mutable_grad() = mine[4];
            for (const auto& layer : layers) {
              std::vector<torch::Tensor> params, grads;
              for (auto i : layer) {
                params.push_back(sharded[i]);
                grads.push_back(mine[i]);
              }
              if (stage == 3) {
                zero.gather(params);
              }
              for (auto i : layer) EXPECT_TRUE(torch::allclose(sharded[i], whole[i], rtol, atol)) << i;
              zero.take_gradients(params, grads);
              if (stage == 3) {
                zero.release(params);
                for (auto i : layer) EXPECT_EQ(sharded[i].numel(), 0) << i;
              }
            }
          }
          // The reference gets zeros where no rank has a gradient, as all_reduce_gradients gives it.
          for (size_t i = 0; i < whole.size(); ++i) whole[i].mutable_grad() = summed[i];
          double want_norm = 0;
          if (max_norm > 0) {
            want_norm = torch::nn::utils::clip_grad_norm_(whole, max_norm);
          } else {
            for (size_t i = 0; i < whole.size(); ++i) {
              if (i != 3) want_norm += summed[i].pow(2).sum().item<double>();
            }
            want_norm = std::sqrt(want_norm);
          }
          reference.step();
          const double norm = zero.step(options, max_norm);
          EXPECT_NEAR(norm, want_norm, rtol * want_norm);
          GatheredParameters gathered(&zero);  // stage 3: every parameter whole again
          for (size_t i = 0; i < whole.size(); ++i) {
            if (stage >= 2) {  // the shard's sum is the only gradient
              EXPECT_FALSE(sharded[i].grad().defined()) << i;
            }
            EXPECT_TRUE(torch::allclose(sharded[i], whole[i], rtol, atol)) << i;
          }
        }
        // This rank's state is the reference's over its range; the whole state assembles from the
        // ranks' shards and sets a fresh LibTorch AdamW to the same state.
        const auto mine = flat_adamw_state(reference, whole, zero.begin(), zero.end());
        EXPECT_EQ(zero.state().step, 3);
        EXPECT_EQ(mine.step, 3);
        EXPECT_TRUE(torch::allclose(zero.state().exp_avg, mine.exp_avg, rtol, atol));
        EXPECT_TRUE(torch::allclose(zero.state().exp_avg_sq, mine.exp_avg_sq, rtol, atol));
        const int64_t total = flat_numel(whole);
        std::vector<FlatAdamWState> pieces{flat_adamw_state(reference, whole, 0, total / 3),
                                           flat_adamw_state(reference, whole, total / 3, total)};
        auto copy = make_params();
        torch::optim::AdamW resumed(copy, options);
        set_adamw_state(resumed, copy, assemble_flat_state(pieces, 0, total, "test"));
        const auto back = flat_adamw_state(resumed, copy, 0, total);
        EXPECT_TRUE(torch::equal(back.exp_avg, flat_adamw_state(reference, whole, 0, total).exp_avg));
        EXPECT_THROW(assemble_flat_state({pieces[1]}, 0, total, "test"), UserError);
      }
    }
  }
}
