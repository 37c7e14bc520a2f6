// bench/kernels: the CPU kernels' small-batch matmul against LibTorch's, on Qwen2.5-0.5B's layer
// shapes, and the machine's memory read bandwidth that a batch-1 matmul is bounded by.
//   bench_kernels [--rows 1,2,4,8,16,32,64] [--reps N]
//   bench_kernels --peak     the machine's two ceilings only (bench/all.sh prints them)
// Prints, per shape and row count, ms per product and GB/s of weights read, for LibTorch fp32
// (BLAS, as the engine ran before) and the kernels with fp32, bf16, fp16, int8 and fp8 weights. --peak prints
// the memory read bandwidth and the fp32 FMA peak: GFLOP/s of independent vector FMAs on every
// kernel thread, compiled for each SIMD target and chosen at run time (Highway), as the kernels are.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "bench_util.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"
#include "kernels/softmax.h"
#include "util/thread_pool.h"
#include "util/threads.h"

// Highway compiles the HWY_NAMESPACE part below once per target (bench/ is on bench_kernels'
// include path for this); the rest of the file sits under HWY_ONCE.
#include "kernels/targets.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace rlcpp::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Enough independent accumulators to hide the FMA latency on every FMA port (4 cycles x 2 ports
// on x86, 4 x 4 on recent Arm), within the vector registers: 16 on AVX2 and older, 32 elsewhere.
constexpr int kChains = (HWY_TARGET & (HWY_AVX2 | HWY_SSE4 | HWY_SSSE3)) != 0 ? 12 : 16;

int64_t FmaFlopsPerIteration() { return 2 * kChains * static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>())); }

// `iterations` rounds of kChains FMAs acc = acc * m + a; acc converges to 1, so nothing over- or
// underflows. Returns the sum, so the work cannot be optimised away.
float FmaChains(int64_t iterations) {
  const hn::ScalableTag<float> df;
  const auto m = hn::Set(df, 0.999999f), a = hn::Set(df, 1e-6f);
  hn::Vec<decltype(df)> acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = hn::Set(df, static_cast<float>(j));
  for (int64_t i = 0; i < iterations; ++i) {
    for (int j = 0; j < kChains; ++j) acc[j] = hn::MulAdd(acc[j], m, a);
  }
  for (int j = 1; j < kChains; ++j) acc[0] = hn::Add(acc[0], acc[j]);
  return hn::GetLane(hn::SumOfLanes(df, acc[0]));
}

}  // namespace rlcpp::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
using namespace rlcpp;
using namespace rlcpp::bench;

namespace rlcpp::bench {
HWY_EXPORT(FmaFlopsPerIteration);
HWY_EXPORT(FmaChains);
}  // namespace rlcpp::bench

namespace {

template <class F>
double best_seconds(int reps, F f) {
  f();  // warm-up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto start = std::chrono::steady_clock::now();
    f();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

// GB/s of streaming a 1 GiB buffer through a vectorised max on every kernel thread: the read
// bandwidth weights stream at.
double read_bandwidth() {
  const int64_t n = int64_t{1} << 28;  // floats
  std::vector<float> data(static_cast<size_t>(n), 1.0f);
  auto& pool = ThreadPool::global();
  std::vector<float> maxima(static_cast<size_t>(pool.size()) * 16, 0);
  const double s = best_seconds(3, [&] {
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      maxima[static_cast<size_t>(b * pool.size() / n) * 16] = kernels::max_of(data.data() + b, e - b);
    }, 1024);
  });
  return n * 4.0 / s / 1e9;
}

// GFLOP/s of FmaChains on every kernel thread at once, the best of `reps` rounds of ~0.1 s.
double fma_peak(int reps) {
  auto& pool = ThreadPool::global();
  const int64_t iterations = int64_t{1} << 23;
  std::vector<float> sinks(static_cast<size_t>(pool.size()) * 16, 0);
  const double s = best_seconds(reps, [&] {
    pool.parallel_for(pool.size(), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) sinks[static_cast<size_t>(t) * 16] = HWY_DYNAMIC_DISPATCH(FmaChains)(iterations);
    });
  });
  const double flops = static_cast<double>(HWY_DYNAMIC_DISPATCH(FmaFlopsPerIteration)()) * iterations * pool.size();
  return flops / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  rlcpp::prepare_process(argv);  // OpenMP's wait policy (util/threads.h)
  std::vector<int64_t> rows = {1, 2, 4, 8, 16, 32, 64};
  int reps = 5, threads = 0;
  bool peak_only = false;
  CLI::App app{"bench/kernels: small-batch matmul, kernels vs LibTorch"};
  app.add_option("--rows", rows, "rows of x (sequences in a decode step)");
  app.add_option("--reps", reps, "timed repetitions (best is printed)")->capture_default_str();
  app.add_option("--threads", threads, "LibTorch intra-op threads (0: default)")->capture_default_str();
  app.add_flag("--peak", peak_only, "print the memory read bandwidth and the fp32 FMA peak only");
  CLI11_PARSE(app, argc, argv);
  configure_threads(threads);
  std::printf("kernels: %s (CPU supports %s), %d kernel threads; LibTorch %d intra-op thread(s)\n",
              kernels::dispatch_target().c_str(), kernels::supported_targets().c_str(), ThreadPool::global().size(),
              torch::get_num_threads());
  const bool dot = kernels::bf16_dot_products(), dot8 = kernels::int8_dot_products();
  std::printf("bf16 weights: %s\nint8 weights: %s\n",
              dot ? "the CPU's bf16 dot products (AVX512-BF16; x rounded to bf16), and widened to fp32 for comparison"
                  : "widened to fp32 (no AVX512-BF16, or RLCPP_DOT_INSTRUCTIONS=0)",
              dot8 ? "the CPU's integer dot products (AVX512-VNNI; x quantized to int16), and widened to "
                     "fp32 for comparison"
                   : "widened to fp32 (no AVX512-VNNI, or RLCPP_DOT_INSTRUCTIONS=0)");
  const double bandwidth = read_bandwidth();
  std::printf("memory read bandwidth: %.1f GB/s (a vectorised pass over 1 GiB on every kernel thread)\n", bandwidth);
  if (peak_only) {
    std::printf("fp32 FMA peak: %.1f GFLOP/s (independent %s FMAs on %d kernel threads)\n", fma_peak(reps),
                kernels::dispatch_target().c_str(), ThreadPool::global().size());
    return 0;
  }
  struct Shape {
    const char* name;
    int64_t out, in;
  };
  torch::manual_seed(0);
  for (const Shape& shape : {Shape{"gate/up [4864x896]", 4864, 896}, Shape{"down [896x4864]", 896, 4864},
                             Shape{"lm_head [151936x896]", 151936, 896}}) {
    auto w = torch::randn({shape.out, shape.in}) * 0.02;
    auto wb = w.to(torch::kBFloat16), wh = w.to(torch::kFloat16);
    auto scales = torch::empty({shape.out});
    auto w8 = torch::empty({shape.out, shape.in}, torch::kChar), wf8 = torch::empty({shape.out, shape.in}, torch::kByte);
    auto s8 = scales.clone(), sf8 = scales.clone();
    kernels::quantize_rows(w.data_ptr<float>(), shape.out, shape.in, kernels::WeightType::i8, w8.data_ptr(),
                           s8.data_ptr<float>());
    kernels::quantize_rows(w.data_ptr<float>(), shape.out, shape.in, kernels::WeightType::fp8, wf8.data_ptr(),
                           sf8.data_ptr<float>());
    std::printf("%s\n  %4s  %22s  %22s  %22s  %22s  %22s  %22s  %22s  %22s\n", shape.name, "rows", "LibTorch fp32",
                "kernel fp32", "kernel bf16", "bf16 widened", "kernel fp16", "kernel int8", "int8 widened", "kernel fp8");
    for (int64_t n : rows) {
      auto x = torch::randn({n, shape.in});
      auto y = torch::empty({n, shape.out});
      const double torch_s = best_seconds(reps, [&] { y = torch::matmul(x, w.t()); });
      auto kernel = [&](const torch::Tensor& wt, kernels::WeightType type, const torch::Tensor& sc = {}) {
        const kernels::StoredWeight stored{wt.data_ptr(), type, sc.defined() ? sc.data_ptr<float>() : nullptr};
        return best_seconds(reps, [&] {
          kernels::matmul_nt(x.data_ptr<float>(), n, shape.in, stored, shape.out, nullptr, y.data_ptr<float>());
        });
      };
      const double f32 = kernel(w, kernels::WeightType::f32), bf16 = kernel(wb, kernels::WeightType::bf16),
                   f16 = kernel(wh, kernels::WeightType::f16), i8 = kernel(w8, kernels::WeightType::i8, s8),
                   fp8 = kernel(wf8, kernels::WeightType::fp8, sf8);
      double widened = bf16, widened8 = i8;  // the same kernels where the CPU has no dot-product instructions
      if (dot || dot8) {
        const bool before = kernels::use_dot_instructions(false);
        widened = kernel(wb, kernels::WeightType::bf16);
        widened8 = kernel(w8, kernels::WeightType::i8, s8);
        kernels::use_dot_instructions(before);
      }
      auto cell = [&](double s, double bytes_per) {
        return fmt::format("{:7.3f} ms {:5.1f} GB/s", s * 1e3, shape.out * shape.in * bytes_per / s / 1e9);
      };
      std::printf("  %4ld  %22s  %22s  %22s  %22s  %22s  %22s  %22s  %22s   (kernel fp32 x%.2f, bf16 x%.2f, int8 x%.2f, fp8 "
                  "x%.2f vs LibTorch; bf16 x%.2f vs kernel fp32; int8 x%.2f, fp8 x%.2f vs bf16)\n",
                  static_cast<long>(n), cell(torch_s, 4).c_str(), cell(f32, 4).c_str(), cell(bf16, 2).c_str(),
                  cell(widened, 2).c_str(), cell(f16, 2).c_str(), cell(i8, 1).c_str(), cell(widened8, 1).c_str(),
                  cell(fp8, 1).c_str(),
                  torch_s / f32, torch_s / bf16, torch_s / i8, torch_s / fp8, f32 / bf16, bf16 / i8, bf16 / fp8);
    }
  }
  return 0;
}
#endif  // HWY_ONCE
