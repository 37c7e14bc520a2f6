// The CPU kernels against plain LibTorch on odd shapes, on every SIMD target this CPU supports
// (each forced in turn), and the thread pool they run on.
#include <torch/torch.h>

#include <atomic>
#include <mutex>

#include "kernels/matmul.h"
#include "test_util.h"
#include "util/thread_pool.h"

using namespace rlcpp;

namespace {

struct RestoreTargets {
  ~RestoreTargets() { kernels::restrict_targets_for_test(0); }
};

torch::ScalarType torch_type(kernels::WeightType t) {
  switch (t) {
    case kernels::WeightType::bf16: return torch::kBFloat16;
    case kernels::WeightType::f16: return torch::kFloat16;
    default: return torch::kFloat32;
  }
}

// max over outputs of |y - ref| / (sum_k |x_k w_k| + |b|): the error relative to the size of the terms summed.
double relative_error(const torch::Tensor& y, const torch::Tensor& ref, const torch::Tensor& x, const torch::Tensor& w,
                      const torch::Tensor& bias) {
  auto scale = torch::matmul(x.abs().to(torch::kFloat64), w.abs().to(torch::kFloat64).t());
  if (bias.defined()) scale = scale + bias.abs().to(torch::kFloat64);
  scale = scale.clamp_min(1e-30);
  return ((y.to(torch::kFloat64) - ref.to(torch::kFloat64)).abs() / scale).max().item<double>();
}

torch::Tensor run_kernel(const torch::Tensor& x, const torch::Tensor& w, kernels::WeightType type,
                         const torch::Tensor& bias, ThreadPool* pool = nullptr) {
  auto y = torch::empty({x.size(0), w.size(0)}, torch::kFloat32);
  kernels::matmul_nt(x.data_ptr<float>(), x.size(0), x.size(1), w.data_ptr(), type, w.size(0),
                     bias.defined() ? bias.data_ptr<float>() : nullptr, y.data_ptr<float>(), pool);
  return y;
}

}  // namespace

TEST(Kernels, DispatchNamesATargetThisCpuSupports) {
  const auto targets = kernels::supported_target_bits();
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(kernels::dispatch_target(), kernels::target_name(targets.front()));
  EXPECT_NE(kernels::supported_targets().find(kernels::dispatch_target()), std::string::npos);
}

TEST(Kernels, MatmulMatchesLibTorchOnOddShapesOnEveryTarget) {
  RestoreTargets restore;
  torch::manual_seed(0);
  ThreadPool pool(3);  // ranges that do not divide evenly, whatever the machine's core count
  for (int64_t target : kernels::supported_target_bits()) {
    kernels::restrict_targets_for_test(target);
    ASSERT_EQ(kernels::dispatch_target(), kernels::target_name(target));
    for (auto type : {kernels::WeightType::f32, kernels::WeightType::bf16, kernels::WeightType::f16}) {
      for (int64_t n : {1, 2, 3, 4, 5, 9, 17}) {
        for (auto [in, out] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 3}, {64, 67}, {131, 259}, {896, 130}}) {
          SCOPED_TRACE(kernels::target_name(target) + " type " + std::to_string(static_cast<int>(type)) + " n " +
                       std::to_string(n) + " in " + std::to_string(in) + " out " + std::to_string(out));
          auto x = torch::randn({n, in});
          auto w32 = torch::randn({out, in});
          auto w = w32.to(torch_type(type)).contiguous();  // stored
          auto bias = out % 2 == 1 ? torch::randn({out}) : torch::Tensor();
          auto y = run_kernel(x, w, type, bias, &pool);
          auto stored = w.to(torch::kFloat64);
          auto ref = torch::matmul(x.to(torch::kFloat64), stored.t());
          if (bias.defined()) ref = ref + bias.to(torch::kFloat64);
          // Against the weights as stored: fp32 arithmetic.
          EXPECT_LT(relative_error(y, ref, x, w32, bias), 1e-5);
          // Against the fp32 weights: within the storage type's rounding (2^-8 bf16, 2^-11 f16).
          if (type != kernels::WeightType::f32) {
            auto ref32 = torch::matmul(x.to(torch::kFloat64), w32.to(torch::kFloat64).t());
            if (bias.defined()) ref32 = ref32 + bias.to(torch::kFloat64);
            EXPECT_LT(relative_error(y, ref32, x, w32, bias), type == kernels::WeightType::bf16 ? 1.0 / 256 : 1.0 / 2048);
          }
        }
      }
    }
  }
}

TEST(Kernels, MatmulIsTheSameOnAnyThreadCount) {
  torch::manual_seed(1);
  auto x = torch::randn({5, 300});
  auto w = torch::randn({1029, 300});
  ThreadPool one(1), four(4);
  EXPECT_TRUE(torch::equal(run_kernel(x, w, kernels::WeightType::f32, {}, &one),
                           run_kernel(x, w, kernels::WeightType::f32, {}, &four)));
}

TEST(Kernels, HalfPrecisionSpecialValuesConvertExactly) {
  RestoreTargets restore;
  // One-element rows take the scalar tail: subnormal, infinite and signed-zero f16 weights.
  auto w32 = torch::tensor({6.0e-8f, -3.0e-5f, 65504.0f, -0.0f, 1.0f}).view({5, 1});
  auto x = torch::ones({1, 1});
  for (int64_t target : kernels::supported_target_bits()) {
    kernels::restrict_targets_for_test(target);
    auto w = w32.to(torch::kFloat16).contiguous();
    auto y = run_kernel(x, w, kernels::WeightType::f16, {});
    EXPECT_TRUE(torch::equal(y.view({-1}), w.to(torch::kFloat32).view({-1}))) << kernels::target_name(target);
  }
}

TEST(ThreadPool, EveryIndexRunsOnceInAlignedRanges) {
  ThreadPool pool(3);
  for (int64_t n : {1, 5, 63, 64, 1000, 1001}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::mutex m;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    pool.parallel_for(
        n,
        [&](int64_t b, int64_t e) {
          {
            std::lock_guard<std::mutex> lock(m);
            ranges.emplace_back(b, e);
          }
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        },
        4);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << n << " " << i;
    for (auto [b, e] : ranges) {
      EXPECT_EQ(b % 4, 0);
      EXPECT_TRUE(e % 4 == 0 || e == n);
    }
    EXPECT_LE(ranges.size(), 3u);
  }
}

TEST(ThreadPool, NestedCallsRunSeriallyOnTheWorker) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.parallel_for(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) pool.parallel_for(10, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
  });
  EXPECT_EQ(total.load(), 40);
}
