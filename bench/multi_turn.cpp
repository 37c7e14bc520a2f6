// bench/multi_turn: the engine's multi-turn generation against single-turn generation of the same
// sampled tokens, in one run, on a random-weight model (Qwen2.5-0.5B's shape, --layers deep):
//   1. single turn: each of P x G sequences samples T x L tokens in one go (no stop token);
//   2. multi-turn, continued: each samples L tokens per turn for T turns, and after each turn but
//      the last I tokens are inserted (a tool's answer) and the sequence goes on from its KV blocks
//      (Engine::generate_turns);
//   3. multi-turn, turn by turn: the same trajectories through RolloutBackend's default, each turn a
//      new request carrying the whole sequence so far (what a backend without continuation does).
// Printed: wall time, sampled tokens/s, prompt tokens prefilled, and the ratios to run 1.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <random>

#include "bench_util.h"
#include "engine/engine.h"
#include "util/threads.h"

using namespace rlcpp;
using namespace rlcpp::bench;

namespace {

// Continues each sample for `turns` turns of `turn_len` tokens, inserting `insert` seeded tokens.
class Turns : public TurnHandler {
 public:
  Turns(int64_t turns, int64_t turn_len, int64_t insert, int64_t vocab)
      : turns_(turns), turn_len_(turn_len), insert_(insert), vocab_(vocab) {}
  int64_t first_turn_limit(int64_t /*request*/) const override { return turn_len_; }
  std::shared_future<TurnOutcome> turn_ended(const TurnEnd& end) override {
    TurnOutcome outcome;
    const int64_t turn = (end.response_tokens + insert_) / (turn_len_ + insert_);  // turns done so far
    if (turn < turns_) {
      outcome.go_on = true;
      std::mt19937_64 rng(static_cast<uint64_t>(1000003 * end.request + 1009 * end.sample + turn));
      for (int64_t k = 0; k < insert_; ++k) outcome.inserted.push_back(static_cast<int32_t>(rng() % vocab_));
      outcome.turn_limit = turn_len_;
    }
    return ready_outcome(outcome);
  }

 private:
  int64_t turns_, turn_len_, insert_, vocab_;
};

// A backend that only generates whole requests: generate_turns is RolloutBackend's turn-by-turn default.
class WholeRequests : public RolloutBackend {
 public:
  explicit WholeRequests(Engine& engine) : engine_(engine) {}
  std::vector<GeneratedSample> generate(const std::vector<GenerationRequest>& requests) override {
    auto out = engine_.generate(requests);
    prefilled_ += engine_.last_stats().scheduler.n_prefill_tokens;
    return out;
  }
  int64_t prefilled() const { return prefilled_; }

 private:
  Engine& engine_;
  int64_t prefilled_ = 0;
};

std::vector<GenerationRequest> requests_of(int64_t prompts, int64_t group, int64_t prompt_len, int64_t new_tokens,
                                           int64_t vocab) {
  std::mt19937_64 rng(7);
  std::vector<GenerationRequest> out;
  for (int64_t r = 0; r < prompts; ++r) {
    GenerationRequest request;
    for (int64_t k = 0; k < prompt_len; ++k) request.prompt_ids.push_back(static_cast<int32_t>(rng() % vocab));
    request.params.temperature = 1.0;
    request.params.max_new_tokens = new_tokens;
    request.n = group;
    request.seed = rng();
    out.push_back(request);
  }
  return out;
}

int64_t sampled_tokens(const std::vector<GeneratedSample>& samples) {
  int64_t n = 0;
  for (const auto& s : samples) {
    n += static_cast<int64_t>(s.token_ids.size());
    for (const auto& run : s.inserted) n -= run.length;
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  rlcpp::prepare_process(argv);  // OpenMP's wait policy (util/threads.h)
  int64_t layers = 4, prompts = 4, group = 8, prompt_len = 64, turns = 3, turn_len = 32, insert = 16;
  int threads = 0;
  CLI::App app{"bench/multi_turn: multi-turn generation against single-turn on the same sampled tokens"};
  app.add_option("--layers", layers, "decoder layers of the Qwen2.5-0.5B shape")->capture_default_str();
  app.add_option("--prompts", prompts, "prompts")->capture_default_str();
  app.add_option("--group", group, "samples per prompt")->capture_default_str();
  app.add_option("--prompt-len", prompt_len, "prompt tokens")->capture_default_str();
  app.add_option("--turns", turns, "model turns per trajectory")->capture_default_str();
  app.add_option("--turn-len", turn_len, "tokens sampled per turn")->capture_default_str();
  app.add_option("--insert", insert, "tokens inserted after each turn but the last")->capture_default_str();
  app.add_option("--threads", threads, "compute threads (0: the machine's cores)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  configure_threads(threads);
  auto model = std::make_shared<Transformer>(qwen25_05b_config(layers), ModelOptions{});
  model->init_weights(0.02, 0);
  const int64_t vocab = model->config().vocab_size;
  EngineConfig config;
  config.n_blocks = 4096;
  config.block_size = 16;
  Engine engine(model, config);
  const int64_t sampled_per_trajectory = turns * turn_len;
  const int64_t total = sampled_per_trajectory + (turns - 1) * insert;
  std::printf("Qwen2.5-0.5B shape, %ld layers, random weights; %ld prompts x %ld samples, prompt %ld tokens\n", layers,
              prompts, group, prompt_len);
  std::printf("each trajectory: %ld turns of %ld sampled tokens, %ld inserted after each turn but the last\n\n", turns,
              turn_len, insert);
  engine.generate(requests_of(1, 2, 8, 4, vocab));  // warm-up

  struct Row {
    const char* name;
    double seconds;
    int64_t sampled, prefilled;
  };
  std::vector<Row> rows;
  {
    const auto requests = requests_of(prompts, group, prompt_len, sampled_per_trajectory, vocab);
    const auto start = std::chrono::steady_clock::now();
    const auto out = engine.generate(requests);
    rows.push_back({"single turn", seconds_since(start), sampled_tokens(out), engine.last_stats().scheduler.n_prefill_tokens});
  }
  {
    const auto requests = requests_of(prompts, group, prompt_len, total, vocab);
    Turns handler(turns, turn_len, insert, vocab);
    const auto start = std::chrono::steady_clock::now();
    const auto out = engine.generate_turns(requests, handler);
    rows.push_back({"multi-turn, continued", seconds_since(start), sampled_tokens(out),
                    engine.last_stats().scheduler.n_prefill_tokens});
  }
  {
    const auto requests = requests_of(prompts, group, prompt_len, total, vocab);
    Turns handler(turns, turn_len, insert, vocab);
    WholeRequests backend(engine);
    const auto start = std::chrono::steady_clock::now();
    const auto out = backend.generate_turns(requests, handler);
    rows.push_back({"multi-turn, turn by turn", seconds_since(start), sampled_tokens(out), backend.prefilled()});
  }
  std::printf("%-26s %9s %9s %12s %11s %9s\n", "run", "seconds", "sampled", "sampled/s", "prefilled", "vs single");
  for (const auto& r : rows) {
    std::printf("%-26s %9.2f %9ld %12.1f %11ld %8.2fx\n", r.name, r.seconds, r.sampled, r.sampled / r.seconds,
                r.prefilled, (r.sampled / r.seconds) / (rows[0].sampled / rows[0].seconds));
  }
  return 0;
}
