// bench/kernels: the CPU kernels' small-batch matmul against LibTorch's, on Qwen2.5-0.5B's layer
// shapes, and the machine's memory read bandwidth that a batch-1 matmul is bounded by.
//   bench_kernels [--rows 1,2,4,8,16,32,64] [--reps N]
// Prints, per shape and row count, ms per product and GB/s of weights read, for LibTorch fp32
// (BLAS, as the engine ran before) and the kernels with fp32, bf16 and fp16 weights.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "bench_util.h"
#include "kernels/matmul.h"
#include "kernels/softmax.h"
#include "util/thread_pool.h"
#include "util/threads.h"

using namespace rlcpp;
using namespace rlcpp::bench;

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

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> rows = {1, 2, 4, 8, 16, 32, 64};
  int reps = 5, threads = 0;
  CLI::App app{"bench/kernels: small-batch matmul, kernels vs LibTorch"};
  app.add_option("--rows", rows, "rows of x (sequences in a decode step)");
  app.add_option("--reps", reps, "timed repetitions (best is printed)")->capture_default_str();
  app.add_option("--threads", threads, "LibTorch intra-op threads (0: default)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  configure_threads(threads);
  std::printf("kernels: %s (CPU supports %s), %d kernel threads; LibTorch %d intra-op thread(s)\n",
              kernels::dispatch_target().c_str(), kernels::supported_targets().c_str(), ThreadPool::global().size(),
              torch::get_num_threads());
  const double bandwidth = read_bandwidth();
  std::printf("memory read bandwidth: %.1f GB/s (a vectorised pass over 1 GiB on every kernel thread)\n", bandwidth);
  struct Shape {
    const char* name;
    int64_t out, in;
  };
  torch::manual_seed(0);
  for (const Shape& shape : {Shape{"gate/up [4864x896]", 4864, 896}, Shape{"down [896x4864]", 896, 4864},
                             Shape{"lm_head [151936x896]", 151936, 896}}) {
    auto w = torch::randn({shape.out, shape.in}) * 0.02;
    auto wb = w.to(torch::kBFloat16), wh = w.to(torch::kFloat16);
    std::printf("%s\n  %4s  %22s  %22s  %22s  %22s\n", shape.name, "rows", "LibTorch fp32", "kernel fp32", "kernel bf16",
                "kernel fp16");
    for (int64_t n : rows) {
      auto x = torch::randn({n, shape.in});
      auto y = torch::empty({n, shape.out});
      const double torch_s = best_seconds(reps, [&] { y = torch::matmul(x, w.t()); });
      auto kernel = [&](const torch::Tensor& wt, kernels::WeightType type) {
        return best_seconds(reps, [&] {
          kernels::matmul_nt(x.data_ptr<float>(), n, shape.in, wt.data_ptr(), type, shape.out, nullptr, y.data_ptr<float>());
        });
      };
      const double f32 = kernel(w, kernels::WeightType::f32), bf16 = kernel(wb, kernels::WeightType::bf16),
                   f16 = kernel(wh, kernels::WeightType::f16);
      auto cell = [&](double s, double bytes_per) {
        return fmt::format("{:7.3f} ms {:5.1f} GB/s", s * 1e3, shape.out * shape.in * bytes_per / s / 1e9);
      };
      std::printf("  %4ld  %22s  %22s  %22s  %22s   (kernel fp32 x%.2f, bf16 x%.2f vs LibTorch)\n", static_cast<long>(n),
                  cell(torch_s, 4).c_str(), cell(f32, 4).c_str(), cell(bf16, 2).c_str(), cell(f16, 2).c_str(), torch_s / f32,
                  torch_s / bf16);
    }
  }
  return 0;
}
