// bench/forward: forward and forward+backward tokens/s and peak RSS of a Qwen2.5-0.5B-shaped model
// with random weights, and the peak memory of token_logprobs (chunked head vs the plain one) for
// T = 512, 2048, 8192, and of one layer's causal attention (blocked vs T x T scores) for the same T.
// Each memory figure is measured in a fresh child process.
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <fmt/ranges.h>
#include <algorithm>
#include <cstdio>
#include <map>
#include <iostream>
#include <memory>

#include "bench_util.h"
#include "model/attention.h"
#include "model/logprobs.h"
#include "model/transformer.h"
#include "util/threads.h"

using namespace rlcpp;
using namespace rlcpp::bench;

namespace {

struct Args {
  int64_t batch = 1;
  int64_t length = 256;
  int64_t layers = 24;
  int64_t chunk = 512;
  int64_t repeats = 2;
  std::string dtype = "float32";
  std::vector<int64_t> head_lengths = {512, 2048, 8192};
  int64_t reference_max = 2048;  // the plain head needs 3 × T × 151936 × 4 bytes: skip it above this
  int64_t attention_reference_max = 4096;  // plain attention keeps 14 × T × T × 4 bytes several times
  bool skip_model = false;
  bool skip_memory = false;
  bool op_profile = false;  // LibTorch's profiler over one more forward+backward: self time per op
  bool op_profile_shapes = false;  // ... per op and input shapes
  int threads = 0;     // 0: all cores
  std::string child;  // internal: "head:<T>:<chunked|plain>" or "attention:<T>:<chunked|plain>"
};

// Self time (exclusive of nested ops) per LibTorch op over `run`, largest first: where the
// forward+backward spends what its matrix products do not.
template <class F>
void print_op_profile(F&& run, double total_s, bool by_shape) {
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO,
                                                     /*report_input_shapes=*/by_shape);
  prof::prepareProfiler(config, {ActivityType::CPU});
  prof::enableProfiler(config, {ActivityType::CPU});
  run();
  const auto result = prof::disableProfiler();
  // Each thread's ops nest by time: an op's self time is its duration less its children's.
  std::map<uint64_t, std::vector<const prof::KinetoEvent*>> by_thread;
  for (const auto& e : result->events()) {
    if (e.deviceType() == c10::DeviceType::CPU) by_thread[e.startThreadId()].push_back(&e);
  }
  std::map<std::string, std::pair<double, int64_t>> self;  // name -> (us, calls)
  for (auto& [thread, events] : by_thread) {
    std::sort(events.begin(), events.end(), [](const auto* a, const auto* b) {
      return a->startNs() != b->startNs() ? a->startNs() < b->startNs() : a->durationNs() > b->durationNs();
    });
    struct Open {
      const prof::KinetoEvent* event;
      double children_us;
    };
    std::vector<Open> stack;
    auto close = [&](const Open& open) {
      const double us = open.event->durationNs() / 1e3;
      std::string key = open.event->name();
      if (by_shape) key += " " + fmt::format("{}", std::vector<std::vector<int64_t>>(open.event->shapes().begin(),
                                                                                     open.event->shapes().end()));
      auto& entry = self[key];
      entry.first += us - open.children_us;
      entry.second += 1;
      if (!stack.empty()) stack.back().children_us += us;
    };
    for (const auto* e : events) {
      while (!stack.empty() && stack.back().event->endNs() <= e->startNs()) {
        const Open open = stack.back();
        stack.pop_back();
        close(open);
      }
      stack.push_back({e, 0.0});
    }
    while (!stack.empty()) {
      const Open open = stack.back();
      stack.pop_back();
      close(open);
    }
  }
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(self.begin(), self.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  std::printf("  LibTorch ops by self time (one more forward+backward, profiled; unprofiled it took %.2f s):\n", total_s);
  for (size_t i = 0; i < std::min<size_t>(rows.size(), 30); ++i) {
    std::printf("    %-60s %8.3f s  %6ld calls\n", rows[i].first.c_str(), rows[i].second.first / 1e6,
                static_cast<long>(rows[i].second.second));
  }
}

// One token_logprobs head measurement: hidden [T, 896] → log-probs, then backward. Prints JSON.
void run_head_child(const Args& args, int64_t length, bool chunked) {
  torch::manual_seed(0);
  const auto config = qwen25_05b_config(1);
  auto weight = (torch::randn({config.vocab_size, config.hidden_size}) * 0.02).requires_grad_();
  auto hidden = torch::randn({length, config.hidden_size}).requires_grad_();
  auto targets = torch::randint(0, config.vocab_size, {length}, torch::kInt64);
  const long before = proc_status_kib("VmRSS");
  reset_peak_rss();
  auto start = std::chrono::steady_clock::now();
  auto logp = chunked ? token_logprobs_chunked(hidden, weight, targets, 1.0, args.chunk)
                      : token_logprobs_reference(hidden, weight, targets, 1.0);
  logp.sum().backward();
  const double secs = seconds_since(start);
  const long peak = proc_status_kib("VmHWM");
  std::printf("{\"peak_mib\": %.1f, \"seconds\": %.3f}\n", mib(peak - before), secs);
}

// One attention layer of the 0.5B shape (14 query heads, 2 kv heads, head_dim 64, one sequence of
// T tokens): forward and backward, blocked (model/attention.h) or with T x T scores. Prints JSON.
void run_attention_child(int64_t length, bool blocked) {
  torch::manual_seed(0);
  auto q = torch::randn({1, 14, length, 64}).requires_grad_();
  auto k = torch::randn({1, 2, length, 64}).requires_grad_();
  auto v = torch::randn({1, 2, length, 64}).requires_grad_();
  auto mask = torch::ones({1, length}, torch::kBool);
  const long before = proc_status_kib("VmRSS");
  reset_peak_rss();
  auto start = std::chrono::steady_clock::now();
  auto out = blocked ? causal_attention(q, k, v, mask, 0.125) : causal_attention_reference(q, k, v, mask, 0.125);
  out.sum().backward();
  const double secs = seconds_since(start);
  std::printf("{\"peak_mib\": %.1f, \"seconds\": %.3f}\n", mib(proc_status_kib("VmHWM") - before), secs);
}

// Runs one child measurement (KIND head or attention) in a fresh process: its peak MiB and seconds.
double measure_child(const std::string& self, const Args& args, const char* kind, int64_t length, bool chunked,
                     double* seconds) {
  const std::string cmd = fmt::format("'{}' --child {}:{}:{} --chunk {} --threads {}", self, kind, length,
                                      chunked ? "chunked" : "plain", args.chunk, args.threads);
  FILE* pipe = ::popen(cmd.c_str(), "r");
  char buffer[512] = {0};
  std::string out;
  while (pipe && std::fgets(buffer, sizeof buffer, pipe)) out += buffer;
  const int rc = pipe ? ::pclose(pipe) : -1;
  if (rc != 0 || out.empty()) return -1;
  auto json = nlohmann::json::parse(out);
  *seconds = json["seconds"].get<double>();
  return json["peak_mib"].get<double>();
}

void run_model(const Args& args) {
  ModelOptions options;
  options.dtype = dtypes().parse(args.dtype, "--dtype");
  options.logprob_chunk_tokens = args.chunk;
  const auto config = qwen25_05b_config(args.layers);
  auto start = std::chrono::steady_clock::now();
  auto model = std::make_shared<Transformer>(config, options);
  model->init_weights(0.02, 0);
  std::printf("model: Qwen2.5-0.5B shape, %ld layers, %.1f M parameters, %s, %d threads, built in %.1f s\n",
              static_cast<long>(args.layers), config.parameter_count() / 1e6, args.dtype.c_str(),
              torch::get_num_threads(), seconds_since(start));
  const long weights_rss = proc_status_kib("VmRSS");
  auto ids = torch::randint(0, config.vocab_size, {args.batch, args.length}, torch::kInt64);
  auto targets = torch::randint(0, config.vocab_size, {args.batch, args.length}, torch::kInt64);
  const double tokens = static_cast<double>(args.batch * args.length);

  reset_peak_rss();
  double forward_s = 1e30;
  {
    torch::NoGradGuard no_grad;
    for (int64_t r = 0; r < args.repeats; ++r) {
      start = std::chrono::steady_clock::now();
      auto logp = model->token_logprobs(ids, targets);
      forward_s = std::min(forward_s, seconds_since(start));
    }
  }
  const long forward_peak = proc_status_kib("VmHWM");
  reset_peak_rss();
  double train_s = 1e30;
  for (int64_t r = 0; r < args.repeats; ++r) {
    model->zero_grad();
    start = std::chrono::steady_clock::now();
    model->token_logprobs(ids, targets).sum().backward();
    train_s = std::min(train_s, seconds_since(start));
  }
  const long train_peak = proc_status_kib("VmHWM");
  if (args.op_profile || args.op_profile_shapes) {
    print_op_profile(
        [&] {
          model->zero_grad();
          model->token_logprobs(ids, targets).sum().backward();
        },
        train_s, args.op_profile_shapes);
  }
  std::printf("batch %ld x length %ld (%.0f tokens), best of %ld\n", static_cast<long>(args.batch),
              static_cast<long>(args.length), tokens, static_cast<long>(args.repeats));
  std::printf("  forward            %8.1f tokens/s  (%.2f s)  peak RSS %.0f MiB (weights %.0f MiB)\n",
              tokens / forward_s, forward_s, mib(forward_peak), mib(weights_rss));
  std::printf("  forward+backward   %8.1f tokens/s  (%.2f s)  peak RSS %.0f MiB\n", tokens / train_s, train_s,
              mib(train_peak));
}

// One table of child measurements of KIND at each --head-lengths T: the memory-saving computation
// against the plain one (skipped above plain_max).
void print_fast_vs_plain(const std::string& exe, const Args& args, const char* kind, const std::string& title,
                         const std::string& fast_name, const std::string& plain_name, int64_t plain_max) {
  std::printf("%s, peak RSS above the inputs:\n", title.c_str());
  std::printf("  %6s  %22s  %22s\n", "T", fast_name.c_str(), plain_name.c_str());
  for (int64_t t : args.head_lengths) {
    double fast_s = 0, plain_s = 0;
    const double fast = measure_child(exe, args, kind, t, true, &fast_s);
    std::string plain_text = "skipped (too large)";
    if (t <= plain_max) {
      const double plain = measure_child(exe, args, kind, t, false, &plain_s);
      plain_text = fmt::format("{:8.0f} MiB {:6.2f} s", plain, plain_s);
    }
    std::printf("  %6ld  %12.0f MiB %6.2f s  %22s\n", static_cast<long>(t), fast, fast_s, plain_text.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  rlcpp::prepare_process(argv);  // OpenMP's wait policy (util/threads.h)
  Args args;
  CLI::App app{"bench/forward: transformer throughput and token_logprobs memory"};
  app.add_option("--batch", args.batch, "sequences per forward")->capture_default_str();
  app.add_option("--length", args.length, "tokens per sequence")->capture_default_str();
  app.add_option("--layers", args.layers, "decoder layers (Qwen2.5-0.5B has 24)")->capture_default_str();
  app.add_option("--chunk", args.chunk, "tokens per chunk of the log-prob head")->capture_default_str();
  app.add_option("--repeats", args.repeats, "timed repetitions (best is reported)")->capture_default_str();
  app.add_option("--dtype", args.dtype, "float32 | bfloat16")->capture_default_str();
  app.add_option("--head-lengths", args.head_lengths, "T values for the log-prob head memory figures");
  app.add_option("--reference-max", args.reference_max, "largest T for the plain (unchunked) head")
      ->capture_default_str();
  app.add_option("--attention-reference-max", args.attention_reference_max,
                 "largest T for the plain (T x T) attention")->capture_default_str();
  app.add_flag("--skip-model", args.skip_model, "only the head and attention memory figures");
  app.add_flag("--skip-memory", args.skip_memory, "only the model's figures (no head or attention memory tables)");
  app.add_flag("--op-profile", args.op_profile, "print LibTorch's self time per op over one more forward+backward");
  app.add_flag("--op-profile-shapes", args.op_profile_shapes, "--op-profile per op and input shapes");
  app.add_option("--threads", args.threads, "intra-op threads (0: all cores)")->capture_default_str();
  app.add_option("--child", args.child)->group("");
  CLI11_PARSE(app, argc, argv);
  configure_threads(args.threads);

  if (!args.child.empty()) {
    int64_t length = 0;
    char kind[32] = {0}, mode[32] = {0};
    std::sscanf(args.child.c_str(), "%31[^:]:%ld:%31s", kind, &length, mode);
    if (std::string(kind) == "attention") {
      run_attention_child(length, std::string(mode) == "chunked");
    } else {
      run_head_child(args, length, std::string(mode) == "chunked");
    }
    return 0;
  }
  if (!args.skip_model) run_model(args);
  if (args.skip_memory) return 0;
  const std::string self = "/proc/self/exe";
  std::string exe(4096, '\0');
  exe.resize(std::max<ssize_t>(0, ::readlink(self.c_str(), exe.data(), exe.size())));
  print_fast_vs_plain(exe, args, "head",
                      "token_logprobs head (hidden [T, 896] x vocab 151936, fp32, forward+backward)",
                      fmt::format("chunked ({} tokens)", args.chunk), "plain (full logits)", args.reference_max);
  print_fast_vs_plain(exe, args, "attention",
                      "causal attention, one layer (14 heads, 2 kv heads, head_dim 64, fp32, forward+backward)", "blocked",
                      "plain (T x T scores)", args.attention_reference_max);
  return 0;
}
