// The CPU kernels against plain LibTorch on odd shapes, on every SIMD target this CPU supports
// (each forced in turn), and the thread pool they run on.
#include <torch/torch.h>

#include <atomic>
#include <mutex>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/half.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"
#include "kernels/softmax.h"
#include "model/kernel_linear.h"
#include "model/rope.h"
#include "dot_instructions.h"
#include "test_util.h"
#include "util/thread_pool.h"
#include "util/threads.h"

using namespace rlcpp;

namespace {

struct RestoreTargets {
  ~RestoreTargets() { kernels::restrict_targets_for_test(0); }
};

using rlcpp::testing::DotInstructions;

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
  kernels::matmul_nt(x.data_ptr<float>(), x.size(0), x.size(1), {w.data_ptr(), type}, w.size(0),
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
  DotInstructions widened(false);  // x in fp32 throughout (the dot-product instructions: below)
  torch::manual_seed(0);
  ThreadPool pool(3);  // ranges that do not divide evenly, whatever the machine's core count
  for (int64_t target : kernels::supported_target_bits()) {
    kernels::restrict_targets_for_test(target);
    ASSERT_EQ(kernels::dispatch_target(), kernels::target_name(target));
    for (auto type : {kernels::WeightType::f32, kernels::WeightType::bf16, kernels::WeightType::f16}) {
      // Dot-product tiles up to kernels::kDotRows rows, then outer-product tiles of 1-4 vectors of
      // rows (17 and 70: partial vectors; 70: more than one tile's width on every target).
      for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 17, 33, 70}) {
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

// With AVX512-BF16, bf16 weights multiply x rounded to bf16: the result is that product summed in
// fp32, whatever the shape (every dot-tile row count; odd `in`: a masked last step, or a last pair
// of one weight; columns past a whole tile; every tile height), and differs from x in fp32 by
// x's rounding.
TEST(Kernels, Bf16DotProductsMultiplyTheRoundedInputInFp32) {
  if (!kernels::bf16_dot_products()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  torch::manual_seed(4);
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33, 64, 70}) {
    for (auto [in, out] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 3}, {64, 67}, {131, 259}, {896, 130}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " in " + std::to_string(in) + " out " + std::to_string(out));
      auto x = torch::randn({n, in});
      auto w = torch::randn({out, in}).to(torch::kBFloat16).contiguous();
      auto bias = out % 2 == 1 ? torch::randn({out}) : torch::Tensor();
      auto y = run_kernel(x, w, kernels::WeightType::bf16, bias, &pool);
      auto rounded = x.to(torch::kBFloat16).to(torch::kFloat64);  // LibTorch rounds to nearest even too
      auto ref = torch::matmul(rounded, w.to(torch::kFloat64).t());
      if (bias.defined()) ref = ref + bias.to(torch::kFloat64);
      EXPECT_LT(relative_error(y, ref, x, w, bias), 1e-5);
      if (in >= 64) {  // x's rounding shows against x in fp32 (about 2^-9 of a term)
        auto exact = torch::matmul(x.to(torch::kFloat64), w.to(torch::kFloat64).t());
        if (bias.defined()) exact = exact + bias.to(torch::kFloat64);
        EXPECT_GT(relative_error(y, exact, x, w, bias), 1e-4);
      }
    }
  }
}

// The scalar rounding the packing uses equals LibTorch's on ties, carries, subnormals,
// infinities and NaNs.
TEST(Kernels, Bf16RoundingToNearestEvenMatchesLibTorch) {
  std::vector<float> values = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, 1.0078125f, -1.00390625f,
                               3.3895314e38f, 3.4028235e38f, 1e-40f, -1e-45f, INFINITY, -INFINITY, NAN};
  auto random = torch::randn({4096}).mul(1000);
  for (int64_t i = 0; i < random.numel(); ++i) values.push_back(random[i].item<float>());
  auto bits = torch::tensor(values).to(torch::kBFloat16).view(torch::kInt16);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t ours = kernels::bf16_bits_nearest(values[i]);
    if (std::isnan(values[i])) {
      EXPECT_EQ(ours & 0x7f80, 0x7f80);
      EXPECT_NE(ours & 0x7f, 0);
    } else {
      EXPECT_EQ(ours, static_cast<uint16_t>(bits[static_cast<int64_t>(i)].item<int16_t>())) << values[i];
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

namespace {

// Weights w32 [out, in] as 8-bit codes and row scales (kernels/quantize.h), and the fp32 weights
// they stand for.
struct Quantized {
  torch::Tensor codes, scales, dequantized;
};

Quantized quantize(const torch::Tensor& w32, kernels::WeightType type) {
  Quantized q;
  q.codes = torch::empty(w32.sizes(), type == kernels::WeightType::i8 ? torch::kChar : torch::kByte);
  q.scales = torch::empty({w32.size(0)});
  q.dequantized = torch::empty(w32.sizes());
  kernels::quantize_rows(w32.data_ptr<float>(), w32.size(0), w32.size(1), type, q.codes.data_ptr(),
                         q.scales.data_ptr<float>());
  kernels::dequantize_rows(q.codes.data_ptr(), q.scales.data_ptr<float>(), w32.size(0), w32.size(1), type,
                           q.dequantized.data_ptr<float>());
  return q;
}

torch::Tensor run_eight_bit(const torch::Tensor& x, const Quantized& q, kernels::WeightType type, ThreadPool* pool) {
  auto y = torch::empty({x.size(0), q.codes.size(0)}, torch::kFloat32);
  kernels::matmul_nt(x.data_ptr<float>(), x.size(0), x.size(1), {q.codes.data_ptr(), type, q.scales.data_ptr<float>()},
                     q.codes.size(0), nullptr, y.data_ptr<float>(), pool);
  return y;
}

}  // namespace

// An 8-bit weight read on a device (CUDA: LibTorch's operations there, fp8 codes as
// float8_e4m3fn) stands for the same fp32 weight as the kernels' widening on the CPU: every int8
// and fp8 code (the NaN codes excepted, never written), rows of their own scales, bit for bit.
TEST(Kernels, EightBitWeightsDequantizeAlikeOnTheKernelsAndInLibTorch) {
  auto codes = torch::arange(256, torch::kInt32).repeat({3, 1});
  auto scale = torch::tensor({0.5f, 0.0123f, 3.75f});
  for (auto dtype : {torch::kChar, torch::kByte}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto q = codes.to(dtype == torch::kChar ? torch::kInt8 : torch::kUInt8);
    if (dtype == torch::kByte) q.masked_fill_(q.bitwise_and(0x7f).eq(0x7f), 0);
    const auto kernels = dequantize_weight(q, scale), torch_ops = dequantize_weight_torch(q, scale);
    EXPECT_TRUE(torch::equal(kernels, torch_ops)) << (kernels - torch_ops).abs().max().item<float>();
  }
}

// Every e4m3 code decodes to its value and encodes back to itself; any float encodes to the
// nearest code (the largest finite, 448, past it). The NaN codes 0x7f/0xff are never written.
TEST(Kernels, Fp8E4m3CodesRoundTripAndFloatsRoundToTheNearest) {
  std::vector<float> values;
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    if ((c & 0x7f) == 0x7f) continue;
    const float v = kernels::fp8_e4m3_to_float(code);
    values.push_back(v);
    EXPECT_EQ(kernels::float_to_fp8_e4m3(v), c == 0x80 ? 0x80 : c) << "code " << c << " value " << v;
  }
  // Hand-checked points: the largest normal, the smallest normal and subnormal, one and a half.
  EXPECT_EQ(kernels::fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(kernels::fp8_e4m3_to_float(0x08), 1.0f / 64);
  EXPECT_EQ(kernels::fp8_e4m3_to_float(0x01), 1.0f / 512);
  EXPECT_EQ(kernels::fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(kernels::fp8_e4m3_to_float(0xbc), -1.5f);
  EXPECT_EQ(kernels::float_to_fp8_e4m3(1000.0f), 0x7e);
  EXPECT_EQ(kernels::float_to_fp8_e4m3(-1000.0f), 0xfe);
  EXPECT_EQ(kernels::float_to_fp8_e4m3(std::nanf("")), 0x7f);
  // Ties go to the even code: 1 + 1/16 is halfway between 1 (0x38) and 1.125 (0x39).
  EXPECT_EQ(kernels::float_to_fp8_e4m3(1.0625f), 0x38);
  EXPECT_EQ(kernels::float_to_fp8_e4m3(1.1875f), 0x3a);
  torch::manual_seed(4);
  const auto samples = torch::cat({torch::randn({20000}) * 40, torch::randn({5000}) * 0.01, torch::rand({2000}) * 900 - 450});
  for (int64_t i = 0; i < samples.size(0); ++i) {
    const float v = std::clamp(samples[i].item<float>(), -448.0f, 448.0f);
    const float got = kernels::fp8_e4m3_to_float(kernels::float_to_fp8_e4m3(v));
    float best = std::numeric_limits<float>::infinity();
    for (float c : values) best = std::min(best, std::fabs(c - v));
    ASSERT_EQ(std::fabs(got - v), best) << "value " << v << " encoded as " << got;
  }
}

// A row's scale is its largest |w| over 127 (int8) or 448 (fp8), worked by hand.
TEST(Kernels, EightBitRowsTakeTheirScaleFromTheLargestWeight) {
  auto w = torch::tensor({1.0f, -0.6f, 0.3f, 0.0f, 0.0f, 0.0f, 0.0f, -2.54f, 0.013f}).view({3, 3});
  auto i8 = quantize(w, kernels::WeightType::i8);
  EXPECT_FLOAT_EQ(i8.scales[0].item<float>(), 1.0f / 127);
  EXPECT_FLOAT_EQ(i8.scales[1].item<float>(), 0.0f);  // a row of zeros
  EXPECT_FLOAT_EQ(i8.scales[2].item<float>(), 0.02f);
  EXPECT_TRUE(torch::equal(i8.codes, torch::tensor({127, -76, 38, 0, 0, 0, 0, -127, 1}, torch::kChar).view({3, 3})))
      << i8.codes;  // -0.6·127 = -76.2; 0.3·127 = 38.1; 0.013/0.02 = 0.65
  auto f8 = quantize(w, kernels::WeightType::fp8);
  EXPECT_FLOAT_EQ(f8.scales[0].item<float>(), 1.0f / 448);
  // 448 → 0x7e; -268.8 → -256 (-1.05·2^8 rounds to -1.0·2^8) → 0xf8; 134.4 → 128 → 0x70.
  EXPECT_EQ(f8.codes[0][0].item<uint8_t>(), 0x7e);
  EXPECT_EQ(f8.codes[0][1].item<uint8_t>(), 0xf8);
  EXPECT_EQ(f8.codes[0][2].item<uint8_t>(), 0x70);
  EXPECT_FLOAT_EQ(f8.dequantized[0][2].item<float>(), 128.0f / 448);
}

// y = x · Wᵀ with W in 8 bits: the kernels (widening in registers on every target, dot-product and
// outer-product tiles, scalar tails) equal the product with the dequantized weights in fp32
// arithmetic, and stay within the quantization's error of the fp32 weights.
TEST(Kernels, EightBitMatmulMatchesItsDequantizedWeightsOnEveryTarget) {
  RestoreTargets restore;
  DotInstructions widened(false);  // x in fp32 throughout (int8 on the integer dot products: the next test)
  torch::manual_seed(5);
  ThreadPool pool(3);
  for (int64_t target : kernels::supported_target_bits()) {
    kernels::restrict_targets_for_test(target);
    for (auto type : {kernels::WeightType::i8, kernels::WeightType::fp8}) {
      for (int64_t n : {1, 3, 8, 9, 33, 70}) {
        for (auto [in, out] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 3}, {64, 67}, {131, 259}, {896, 130}}) {
          SCOPED_TRACE(kernels::target_name(target) + " type " + std::to_string(static_cast<int>(type)) + " n " +
                       std::to_string(n) + " in " + std::to_string(in) + " out " + std::to_string(out));
          auto x = torch::randn({n, in});
          auto w32 = torch::randn({out, in}) * 0.05;
          const auto q = quantize(w32, type);
          auto y = run_eight_bit(x, q, type, &pool);
          auto ref = torch::matmul(x.to(torch::kFloat64), q.dequantized.to(torch::kFloat64).t());
          EXPECT_LT(relative_error(y, ref, x, q.dequantized, {}), 1e-5);
          auto ref32 = torch::matmul(x.to(torch::kFloat64), w32.to(torch::kFloat64).t());
          EXPECT_LT(relative_error(y, ref32, x, w32, {}), type == kernels::WeightType::i8 ? 0.05 : 0.08);
        }
      }
    }
  }
}

// With AVX512-VNNI, int8 weights multiply x quantized to int16 with a scale per row (LibTorch's
// rounding, ties to even), on both tiles: the result is that product in fp32, whatever the shape
// (odd `in`: masked last loads and a last pair of its own; 5,000: a row longer than one block of
// integer sums; 130 rows: three panels of the outer-product tiles), and within x's quantization
// of the exact product. Rows of the largest values sum far past int32's range without overflowing.
TEST(Kernels, Int8DotProductsMultiplyXQuantizedToInt16) {
  if (!kernels::int8_dot_products()) GTEST_SKIP() << "this CPU has no AVX512-VNNI";
  torch::manual_seed(6);
  ThreadPool pool(3);
  // The dot-product tiles up to kDotRows rows, the outer-product tiles past them (one panel of up
  // to 64 columns, and three).
  for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33, 64, 70, 130}) {
    for (auto [in, out] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 3}, {64, 67}, {131, 259}, {5000, 37}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " in " + std::to_string(in) + " out " + std::to_string(out));
      auto x = torch::randn({n, in});
      const auto q = quantize(torch::randn({out, in}) * 0.05, kernels::WeightType::i8);
      auto y = run_eight_bit(x, q, kernels::WeightType::i8, &pool);
      auto step = x.abs().amax(1, true).to(torch::kFloat64) / 32767;
      auto xq = (x.to(torch::kFloat64) / step).round() * step;
      auto ref = torch::matmul(xq, q.dequantized.to(torch::kFloat64).t());
      EXPECT_LT(relative_error(y, ref, x, q.dequantized, {}), 1e-5);
      auto exact = torch::matmul(x.to(torch::kFloat64), q.dequantized.to(torch::kFloat64).t());
      EXPECT_LT(relative_error(y, exact, x, q.dequantized, {}), 1e-3);
    }
  }
  {  // One element 10^5 times the others: x's quantization step (about 3) shows against x in fp32.
    auto x = torch::randn({3, 896});
    x.select(1, 5).fill_(1e5f);
    const auto q = quantize(torch::randn({64, 896}) * 0.05, kernels::WeightType::i8);
    auto y = run_eight_bit(x, q, kernels::WeightType::i8, &pool).to(torch::kFloat64);
    auto w = q.dequantized.to(torch::kFloat64);
    auto step = x.abs().amax(1, true).to(torch::kFloat64) / 32767;
    auto xq = (x.to(torch::kFloat64) / step).round() * step;
    // Sums of about 1e3: fp32's rounding is far below 0.05, x's quantization (the small elements
    // go to 0 or ±3) far above it.
    EXPECT_LT((y - torch::matmul(xq, w.t())).abs().max().item<double>(), 0.05);
    EXPECT_GT((y - torch::matmul(x.to(torch::kFloat64), w.t())).abs().max().item<double>(), 0.3);
  }
  for (int64_t n : {2, 9}) {  // sums of 20,000 maximal products, far past int32's range, on both tiles
    auto x = torch::full({n, 20000}, 3.0f);
    x[1].fill_(-3.0f);
    const auto q = quantize(torch::ones({5, 20000}), kernels::WeightType::i8);  // every code 127
    auto y = run_eight_bit(x, q, kernels::WeightType::i8, &pool);
    EXPECT_NEAR(y[0][0].item<float>(), 60000.0f, 0.05f) << n;
    EXPECT_NEAR(y[1][4].item<float>(), -60000.0f, 0.05f) << n;
  }
}

// Each of the 254 finite e4m3 codes, widened by the vector loads (16 in a row, the dot and the
// outer-product tiles) and by the scalar tail (rows of 1), gives exactly its value; the NaN codes
// read as ±480.
TEST(Kernels, EveryFp8CodeWidensExactlyOnEveryTarget) {
  RestoreTargets restore;
  auto codes = torch::arange(256, torch::kInt32).to(torch::kByte);
  std::vector<float> expect;
  for (int c = 0; c < 256; ++c) {
    expect.push_back((c & 0x7f) == 0x7f ? ((c & 0x80) ? -480.0f : 480.0f) : kernels::fp8_e4m3_to_float(static_cast<uint8_t>(c)));
  }
  const auto want = torch::tensor(expect);
  for (int64_t target : kernels::supported_target_bits()) {
    kernels::restrict_targets_for_test(target);
    for (int64_t in : {1, 16}) {
      Quantized q;
      q.codes = codes.view({256, 1}).expand({256, in}).contiguous();
      q.scales = torch::ones({256});
      for (int64_t n : {1, 9}) {
        auto x = torch::zeros({n, in});
        x.select(1, in - 1).fill_(1.0f);
        auto y = run_eight_bit(x, q, kernels::WeightType::fp8, nullptr);
        for (int64_t j = 0; j < n; ++j) {
          EXPECT_TRUE(torch::equal(y[j], want)) << kernels::target_name(target) << " in " << in << " n " << n;
        }
      }
    }
  }
}

// Paged attention against a dense fp64 reference: sequences of random lengths whose blocks are
// scattered over the cache in random order; each query token attends keys 0..pos.
TEST(Kernels, PagedAttentionMatchesDenseAttentionOnEveryTarget) {
  RestoreTargets restore;
  torch::manual_seed(2);
  ThreadPool pool(3);
  const int64_t block_size = 4, n_blocks = 40;
  for (int64_t target : kernels::supported_target_bits()) {
    kernels::restrict_targets_for_test(target);
    for (auto type : {kernels::WeightType::f32, kernels::WeightType::bf16, kernels::WeightType::f16}) {
      // (heads, kv heads, dim): MHA, GQA with groups of 7 and of 9 (split over passes), odd dims.
      for (auto [n_heads, n_kv, dim] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
               {4, 4, 16}, {14, 2, 64}, {9, 1, 17}, {6, 3, 3}, {2, 1, 128}}) {
        SCOPED_TRACE(kernels::target_name(target) + " type " + std::to_string(static_cast<int>(type)) + " heads " +
                     std::to_string(n_heads) + "/" + std::to_string(n_kv) + " dim " + std::to_string(dim));
        auto k_cache = torch::randn({n_blocks * block_size, n_kv, dim}).to(torch_type(type));
        auto v_cache = torch::randn({n_blocks * block_size, n_kv, dim}).to(torch_type(type));
        auto perm = torch::randperm(n_blocks, torch::kInt64);
        // Three sequences: a prefill of 7 tokens from 0, one decode token at 22, a 5-token chunk at 9..13.
        struct Seq { int64_t start, n_tokens; };
        const std::vector<Seq> seqs = {{0, 7}, {22, 1}, {9, 5}};
        std::vector<int32_t> blocks, pos;
        std::vector<int64_t> table;
        int64_t next_block = 0;
        std::vector<std::vector<int32_t>> tables;
        for (const auto& s : seqs) {
          const int64_t offset = static_cast<int64_t>(blocks.size());
          std::vector<int32_t> t;
          for (int64_t b = 0; b * block_size < s.start + s.n_tokens; ++b) t.push_back(static_cast<int32_t>(perm[next_block++].item<int64_t>()));
          blocks.insert(blocks.end(), t.begin(), t.end());
          tables.push_back(t);
          for (int64_t i = 0; i < s.n_tokens; ++i) {
            pos.push_back(static_cast<int32_t>(s.start + i));
            table.push_back(offset);
          }
        }
        const int64_t tokens = static_cast<int64_t>(pos.size());
        auto q = torch::randn({tokens, n_heads, dim});
        auto out = torch::empty({tokens, n_heads * dim});
        const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
        kernels::paged_attention(q.data_ptr<float>(), {tokens, pos.data(), table.data(), blocks.data()},
                                 {k_cache.data_ptr(), v_cache.data_ptr(), type, block_size}, n_heads, n_kv, dim, scale,
                                 out.data_ptr<float>(), &pool);
        int64_t t = 0;
        for (size_t s = 0; s < seqs.size(); ++s) {
          std::vector<int64_t> slots;
          for (int64_t p = 0; p < seqs[s].start + seqs[s].n_tokens; ++p) slots.push_back(tables[s][p / block_size] * block_size + p % block_size);
          auto index = torch::tensor(slots, torch::kInt64);
          auto keys = k_cache.index_select(0, index).to(torch::kFloat64);  // [L, Hkv, D]
          auto values = v_cache.index_select(0, index).to(torch::kFloat64);
          for (int64_t i = 0; i < seqs[s].n_tokens; ++i, ++t) {
            const int64_t n_keys = seqs[s].start + i + 1;
            for (int64_t h = 0; h < n_heads; ++h) {
              const int64_t kv = h / (n_heads / n_kv);
              auto kk = keys.narrow(0, 0, n_keys).select(1, kv), vv = values.narrow(0, 0, n_keys).select(1, kv);
              auto probs = torch::softmax(torch::mv(kk, q[t][h].to(torch::kFloat64)) * scale, 0);
              auto ref = torch::mv(vv.t(), probs);
              auto got = out[t].narrow(0, h * dim, dim).to(torch::kFloat64);
              // Each output is a convex combination of values: relative to their size.
              const double err = (got - ref).abs().max().item<double>() / vv.abs().max().item<double>();
              EXPECT_LT(err, 1e-5) << "token " << t << " head " << h;
            }
          }
        }
      }
    }
  }
}

// RMSNorm, SiLU·mul and rotary embedding against the model's LibTorch formulas, odd sizes
// included (vector remainders), on every target and a 3-thread pool.
TEST(Kernels, ElementwiseMatchesLibTorchOnEveryTarget) {
  RestoreTargets restore;
  torch::manual_seed(3);
  ThreadPool pool(3);
  auto close = [](const torch::Tensor& got, const torch::Tensor& want) {
    return ((got - want).abs() / (want.abs() + 1e-3)).max().item<double>();
  };
  for (int64_t target : kernels::supported_target_bits()) {
    kernels::restrict_targets_for_test(target);
    SCOPED_TRACE(kernels::target_name(target));
    for (auto [rows, dim] : std::vector<std::pair<int64_t, int64_t>>{{1, 896}, {3, 17}, {70, 64}, {5, 1}}) {
      auto x = torch::randn({rows, dim}) * 3;
      auto w = torch::rand({dim}) + 0.5;
      auto out = torch::empty_like(x);
      kernels::rms_norm(x.data_ptr<float>(), w.data_ptr<float>(), rows, dim, 1e-6f, out.data_ptr<float>(), &pool);
      auto want = w * (x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6));
      EXPECT_LT(close(out, want), 1e-5) << "rms_norm " << rows << "x" << dim;
    }
    for (int64_t n : {1, 7, 4864, 100003}) {
      auto gate = torch::randn({n}) * 4, up = torch::randn({n});
      auto out = torch::empty_like(gate);
      kernels::silu_mul(gate.data_ptr<float>(), up.data_ptr<float>(), n, out.data_ptr<float>(), &pool);
      EXPECT_LT(close(out, torch::silu(gate) * up), 1e-5) << "silu_mul " << n;
    }
    for (auto [tokens, heads, dim] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 14, 64}, {9, 3, 18}, {40, 2, 128}}) {
      auto x = torch::randn({tokens, heads, dim});
      auto angles = torch::rand({tokens, dim / 2}) * 100;
      auto emb = torch::cat({angles, angles}, -1);
      auto cos = emb.cos(), sin = emb.sin();
      auto out = torch::empty_like(x);
      kernels::rope(x.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(), tokens, heads, dim,
                    out.data_ptr<float>(), &pool);
      EXPECT_LT((out - Rope::apply(x, cos, sin)).abs().max().item<double>(), 1e-5) << "rope " << tokens << "x" << heads << "x" << dim;
    }
  }
}

// The autograd functions training runs (model/kernel_linear.h): forward and the backward kernels'
// gradients against LibTorch's autograd of the plain expressions in fp64, on odd shapes, on every
// target; a weight that needs no gradient (LoRA's frozen norms) gets none.
TEST(Kernels, ElementwiseGradientsMatchLibTorchAutogradOnEveryTarget) {
  RestoreTargets restore;
  torch::manual_seed(5);
  // Largest deviation relative to the reference's largest magnitude.
  auto close = [](const torch::Tensor& got, const torch::Tensor& want) {
    return ((got.to(torch::kFloat64) - want).abs().max() / want.abs().max().clamp_min(1e-30)).item<double>();
  };
  auto leaf = [](const torch::Tensor& t) { return t.detach().clone().requires_grad_(true); };
  for (int64_t target : kernels::supported_target_bits()) {
    kernels::restrict_targets_for_test(target);
    SCOPED_TRACE(kernels::target_name(target));
    for (auto [rows, dim] : std::vector<std::pair<int64_t, int64_t>>{{1, 896}, {3, 17}, {70, 64}, {300, 896}}) {
      for (bool weight_grad : {true, false}) {
        auto x = leaf(torch::randn({rows, dim}) * 3), w = torch::rand({dim}) + 0.5;
        if (weight_grad) w = leaf(w);
        auto g = torch::randn({rows, dim});
        auto out = kernel_rms_norm(x, w, 1e-6);
        ASSERT_TRUE(out.defined());
        out.backward(g);
        auto x64 = leaf(x.to(torch::kFloat64)), w64 = leaf(w.to(torch::kFloat64));
        auto want = w64 * (x64 * torch::rsqrt(x64.pow(2).mean(-1, true) + 1e-6));
        want.backward(g.to(torch::kFloat64));
        EXPECT_LT(close(out, want), 1e-6) << "rms_norm " << rows << "x" << dim;
        EXPECT_LT(close(x.grad(), x64.grad()), 1e-5) << "rms_norm dx " << rows << "x" << dim;
        if (weight_grad) {
          EXPECT_LT(close(w.grad(), w64.grad()), 1e-5) << "rms_norm dweight " << rows << "x" << dim;
        } else {
          EXPECT_FALSE(w.grad().defined());
        }
      }
    }
    for (int64_t n : {1, 7, 4864, 100003}) {
      auto gate = leaf(torch::randn({n}) * 4), up = leaf(torch::randn({n}));
      auto g = torch::randn({n});
      auto out = kernel_silu_mul(gate, up);
      ASSERT_TRUE(out.defined());
      out.backward(g);
      auto gate64 = leaf(gate.to(torch::kFloat64)), up64 = leaf(up.to(torch::kFloat64));
      auto want = torch::silu(gate64) * up64;
      want.backward(g.to(torch::kFloat64));
      EXPECT_LT(close(out, want), 1e-6) << "silu_mul " << n;
      EXPECT_LT(close(gate.grad(), gate64.grad()), 1e-5) << "silu_mul dgate " << n;
      EXPECT_LT(close(up.grad(), up64.grad()), 1e-5) << "silu_mul dup " << n;
    }
    for (auto [tokens, heads, dim] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 14, 64}, {9, 3, 18}, {40, 2, 128}}) {
      auto x = leaf(torch::randn({tokens, heads, dim}));
      auto angles = torch::rand({tokens, dim / 2}) * 100;
      auto emb = torch::cat({angles, angles}, -1);
      auto g = torch::randn({tokens, heads, dim});
      auto out = kernel_rope(x, emb.cos(), emb.sin());
      ASSERT_TRUE(out.defined());
      out.backward(g);
      auto x64 = leaf(x.to(torch::kFloat64));
      auto emb64 = emb.to(torch::kFloat64);
      auto want = Rope::apply(x64, emb64.cos(), emb64.sin());
      want.backward(g.to(torch::kFloat64));
      EXPECT_LT(close(out, want), 1e-5) << "rope " << tokens << "x" << heads << "x" << dim;
      EXPECT_LT(close(x.grad(), x64.grad()), 1e-5) << "rope dx " << tokens << "x" << heads << "x" << dim;
    }
  }
}

// The training head's row passes (kernels/softmax.h) against LibTorch on odd widths, every target.
TEST(Kernels, HeadRowPassesMatchLibTorchOnEveryTarget) {
  RestoreTargets restore;
  torch::manual_seed(6);
  ThreadPool pool(3);
  for (int64_t target : kernels::supported_target_bits()) {
    kernels::restrict_targets_for_test(target);
    SCOPED_TRACE(kernels::target_name(target));
    for (auto [rows, n] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 17}, {7, 1000}, {5, 151936}}) {
      auto x = torch::randn({rows, n}) * 6;
      auto lse = torch::empty({rows});
      kernels::row_logsumexp(x.data_ptr<float>(), rows, n, lse.data_ptr<float>(), &pool);
      auto want = x.to(torch::kFloat64).logsumexp(-1);
      EXPECT_LT((lse.to(torch::kFloat64) - want).abs().max().item<double>(), 2e-6 * (1 + want.abs().max().item<double>()))
          << rows << "x" << n;
      auto coef = torch::randn({rows});
      auto y = x.clone();
      kernels::exp_scale_rows(y.data_ptr<float>(), rows, n, lse.data_ptr<float>(), coef.data_ptr<float>(), &pool);
      auto expect = (x - lse.unsqueeze(-1)).exp() * coef.unsqueeze(-1);
      EXPECT_LT(((y - expect).abs() / (expect.abs() + 1e-30)).max().item<double>(), 1e-5) << rows << "x" << n;
    }
  }
}

// Training attention's row passes (kernels/softmax.h) against LibTorch's masked softmax: two
// batch elements (one left-padded), two heads, a block of query rows that starts mid-sequence.
TEST(Kernels, CausalSoftmaxRowsMatchLibTorchOnEveryTarget) {
  RestoreTargets restore;
  torch::manual_seed(7);
  ThreadPool pool(3);
  const int64_t batch = 2, heads = 2, length = 37, first = 20, block = 17;
  const float scale = 0.3f;
  auto key_mask = torch::ones({batch, length}, torch::kBool);
  key_mask[1].narrow(0, 0, 9).fill_(false);
  auto x = torch::randn({batch, heads, block, length}) * 5;
  // The reference: position p = first + i reads keys j <= p that are unmasked, and always itself.
  auto i = torch::arange(first, first + block).view({block, 1});
  auto j = torch::arange(length).view({1, length});
  auto allowed = (j.le(i).unsqueeze(0) & key_mask.unsqueeze(1)) | j.eq(i).unsqueeze(0);  // [B, block, T]
  auto masked = (x.to(torch::kFloat64) * scale).masked_fill(allowed.unsqueeze(1).logical_not(), -INFINITY);
  auto want_lse = masked.logsumexp(-1);
  auto want = (masked - want_lse.unsqueeze(-1)).exp();
  auto dp = torch::randn_like(x), delta = torch::randn({batch, heads, block});
  kernels::CausalRows c;
  c.rows = batch * heads * block;
  c.n = length;
  c.block = block;
  c.first = first;
  c.per_batch = heads * block;
  c.key_mask = key_mask.data_ptr<bool>();
  c.mask_stride = length;
  c.scale = scale;
  for (int64_t target : kernels::supported_target_bits()) {
    kernels::restrict_targets_for_test(target);
    SCOPED_TRACE(kernels::target_name(target));
    auto probs = x.clone();
    auto lse = torch::empty({batch, heads, block});
    kernels::causal_softmax_rows(probs.data_ptr<float>(), c, lse.data_ptr<float>(), &pool);
    EXPECT_LT((lse.to(torch::kFloat64) - want_lse).abs().max().item<double>(), 1e-5);
    EXPECT_LT((probs.to(torch::kFloat64) - want).abs().max().item<double>(), 1e-6);
    EXPECT_EQ(probs[1][0][0].narrow(0, 0, 9).abs().sum().item<float>(), 0.0f);  // padding keys read nothing
    auto again = x.clone();
    kernels::causal_probs_rows(again.data_ptr<float>(), c, lse.data_ptr<float>(), &pool);
    EXPECT_LT((again - probs).abs().max().item<float>(), 1e-6f);
    auto ds = dp.clone();
    kernels::softmax_grad_rows(probs.data_ptr<float>(), ds.data_ptr<float>(), delta.data_ptr<float>(), c.rows, length,
                               scale, &pool);
    auto want_ds = probs * (dp - delta.unsqueeze(-1)) * scale;
    EXPECT_LT((ds - want_ds).abs().max().item<float>(), 1e-5f);
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

// The CPU block cache (util/threads.h): a freed large block serves the next tensor that fits it
// (and holds what that tensor writes), one more than an eighth smaller takes the block's head, and
// small tensors bypass the cache.
TEST(CpuBlockCache, ReusesAFreedBlockForTheNextTensorThatFits) {
  install_cpu_block_cache();
  auto a = torch::empty({1 << 20});  // 4 MiB
  void* p = a.data_ptr();
  const size_t before = cpu_block_cache_bytes();
  a = torch::Tensor();
  EXPECT_EQ(cpu_block_cache_bytes(), before + (size_t{4} << 20));
  auto b = torch::empty({(1 << 20) - 1000});  // within an eighth: the same block
  EXPECT_EQ(b.data_ptr(), p);
  EXPECT_EQ(cpu_block_cache_bytes(), before);
  b.fill_(1.0f);
  EXPECT_EQ(b.sum().item<double>(), static_cast<double>((1 << 20) - 1000));
  b = torch::Tensor();
  auto c = torch::empty({1 << 19});  // half the size: the block's head, its tail left unused
  EXPECT_EQ(c.data_ptr(), p);
  const size_t after = cpu_block_cache_bytes();
  EXPECT_EQ(after, before + (size_t{2} << 20));
  auto small = torch::empty({1000});
  small = torch::Tensor();
  EXPECT_EQ(cpu_block_cache_bytes(), after);
}

// A tensor with no unused block within an eighth of its size takes the head of a larger one (no new
// memory), and a freed block merges with its unused neighbours, so a later tensor as large as
// both takes them whole.
TEST(CpuBlockCache, CarvesALargerBlockAndMergesFreedNeighbours) {
  install_cpu_block_cache();
  const int64_t whole = (10 << 20) + 1024;  // 40 MiB + 4 KiB of floats
  auto big = torch::empty({whole});
  void* p = big.data_ptr();
  big = torch::Tensor();
  auto fresh = cpu_allocation_counts().fresh;
  auto head = torch::empty({6 << 20});  // 24 MiB: the head of that block
  EXPECT_EQ(cpu_allocation_counts().fresh, fresh);
  EXPECT_EQ(head.data_ptr(), p);
  head.fill_(3.0f);
  EXPECT_EQ(head.sum().item<double>(), 3.0 * (6 << 20));
  head = torch::Tensor();  // merges with the tail left unused
  fresh = cpu_allocation_counts().fresh;
  auto again = torch::empty({whole});
  EXPECT_EQ(cpu_allocation_counts().fresh, fresh);
  EXPECT_EQ(again.data_ptr(), p);
  again.fill_(1.0f);
  EXPECT_EQ(again.sum().item<double>(), static_cast<double>(whole));
}
