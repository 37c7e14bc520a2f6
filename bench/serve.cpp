// bench/serve: `rlcpp serve` throughput against the engine's own on the same workload, and the time
// of weight updates while serving.
//   1. For each client count C: C prompts of --prompt-tokens random ids, --new-tokens each (no stop
//      token), through Engine::generate at once (the engine's figure), then through the server:
//      C clients on loopback, each sending --rounds requests one after another (non-streamed, or
//      streamed with --stream); generated tokens per second of wall time, and the ratio.
//   2. An adapter push (a rank --adapter-rank PEFT directory written, POST /v1/load_lora_adapter,
//      and the first request with it, which reads it) and a full-weight reload (the model
//      written, POST /update_weights_from_disk), with the writing timed apart.
// The server runs in this process (its engine thread and HTTP threads); clients are threads too.
#include <httplib.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <future>
#include <random>
#include <sstream>
#include <thread>

#include "bench_util.h"
#include "engine/engine.h"
#include "openai/server.h"
#include "text/tokenizer.h"

using namespace rlcpp;
using namespace rlcpp::bench;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<int32_t> random_prompt(int64_t length, int64_t vocab, std::mt19937_64& rng) {
  std::vector<int32_t> ids;
  for (int64_t k = 0; k < length; ++k) ids.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
  return ids;
}

int64_t tokens_of_answer(const std::string& body, bool stream) {
  if (!stream) {
    const Json j = Json::parse(body);
    return j["usage"]["completion_tokens"].get<int64_t>();
  }
  int64_t n = 0;
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: {", 0) == 0) n += static_cast<int64_t>(Json::parse(line.substr(6))["choices"][0]["token_ids"].size());
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("rlcpp serve throughput and weight-update times");
  std::string model_dir;
  std::vector<int64_t> clients = {1, 8, 64};
  int64_t prompt_tokens = 64, new_tokens = 32, rounds = 2, adapter_rank = 8, kv_cache_mb = 2048;
  bool stream = false;
  app.add_option("--model", model_dir, "a model directory with its tokenizer")->required();
  app.add_option("--clients", clients, "concurrent clients")->delimiter(',');
  app.add_option("--prompt-tokens", prompt_tokens);
  app.add_option("--new-tokens", new_tokens);
  app.add_option("--rounds", rounds, "requests each client sends one after another");
  app.add_option("--adapter-rank", adapter_rank);
  app.add_option("--kv-cache-mb", kv_cache_mb);
  app.add_flag("--stream", stream, "clients stream (server-sent events)");
  CLI11_PARSE(app, argc, argv);

  auto tokenizer = Tokenizer::from_dir(model_dir);
  auto model = Transformer::from_pretrained(model_dir);
  model->eval();
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  const int64_t vocab = model->config().vocab_size;
  EngineConfig engine_config;
  engine_config.kv_cache_mb = kv_cache_mb;
  std::mt19937_64 rng(7);

  // 1. The engine alone, then through the server.
  std::vector<double> engine_rate;
  {
    Engine engine(model, engine_config, tokenizer);
    GenerationRequest warm_up;
    warm_up.prompt_ids = random_prompt(prompt_tokens, vocab, rng);
    warm_up.params.max_new_tokens = 2;
    engine.generate({warm_up});
    for (int64_t c : clients) {
      std::vector<GenerationRequest> requests;
      for (int64_t k = 0; k < c; ++k) {
        GenerationRequest g;
        g.prompt_ids = random_prompt(prompt_tokens, vocab, rng);
        g.params.temperature = 1.0;
        g.params.max_new_tokens = new_tokens;
        g.seed = rng();
        requests.push_back(std::move(g));
      }
      const auto start = Clock::now();
      const auto samples = engine.generate(requests);
      int64_t n = 0;
      for (const auto& s : samples) n += static_cast<int64_t>(s.token_ids.size());
      engine_rate.push_back(static_cast<double>(n) / seconds_since(start));
    }
  }
  ServeOptions options;
  options.port = 0;
  options.model_name = "bench";
  Server server(model, tokenizer, engine_config, options);
  std::promise<int> listening;
  std::thread serving([&] { server.serve([&](int port) { listening.set_value(port); }); });
  const int port = listening.get_future().get();
  auto post = [&](const std::string& path, const Json& body) {
    httplib::Client client("127.0.0.1", port);
    client.set_read_timeout(3600, 0);
    auto res = client.Post(path.c_str(), body.dump(), "application/json");
    if (!res || res->status != 200) {
      std::fprintf(stderr, "%s failed: %s\n", path.c_str(), res ? res->body.c_str() : httplib::to_string(res.error()).c_str());
      std::exit(1);
    }
    return res->body;
  };
  std::printf("serve throughput: %s, prompts of %ld random tokens, %ld new tokens each, %ld request(s) per client%s\n",
              model_dir.c_str(), static_cast<long>(prompt_tokens), static_cast<long>(new_tokens), static_cast<long>(rounds),
              stream ? ", streamed" : "");
  std::printf("%8s %16s %16s %8s\n", "clients", "engine tok/s", "serve tok/s", "ratio");
  post("/v1/completions", {{"prompt", random_prompt(prompt_tokens, vocab, rng)}, {"max_tokens", 1}});  // warm-up
  for (size_t i = 0; i < clients.size(); ++i) {
    const int64_t c = clients[i];
    std::vector<std::vector<Json>> bodies(static_cast<size_t>(c));
    for (auto& b : bodies) {
      for (int64_t r = 0; r < rounds; ++r) {
        b.push_back({{"prompt", random_prompt(prompt_tokens, vocab, rng)}, {"max_tokens", new_tokens}, {"ignore_eos", true},
                     {"seed", static_cast<int64_t>(rng() >> 1)}, {"stream", stream}});
      }
    }
    std::vector<int64_t> generated(static_cast<size_t>(c), 0);
    const auto start = Clock::now();
    std::vector<std::thread> threads;
    for (int64_t k = 0; k < c; ++k) {
      threads.emplace_back([&, k] {
        for (const auto& body : bodies[static_cast<size_t>(k)]) {
          generated[static_cast<size_t>(k)] += tokens_of_answer(post("/v1/completions", body), stream);
        }
      });
    }
    for (auto& t : threads) t.join();
    const double seconds = seconds_since(start);
    int64_t n = 0;
    for (int64_t g : generated) n += g;
    const double rate = static_cast<double>(n) / seconds;
    std::printf("%8ld %16.1f %16.1f %7.2fx\n", static_cast<long>(c), engine_rate[i], rate, rate / engine_rate[i]);
  }

  // 2. Weight updates while serving.
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() / fmt::format("rlcpp-bench-serve-{}", ::getpid());
  std::filesystem::create_directories(tmp);
  auto adapted = Transformer::from_pretrained(model_dir);
  LoraConfig lora;
  lora.rank = adapter_rank;
  adapted->add_adapters(lora, 1);
  auto t0 = Clock::now();
  adapted->save_adapter(tmp / "adapter", model_dir);
  const double adapter_write = seconds_since(t0);
  t0 = Clock::now();
  post("/v1/load_lora_adapter", {{"lora_name", "a"}, {"lora_path", (tmp / "adapter").string()}});
  const double adapter_load = seconds_since(t0);
  t0 = Clock::now();
  post("/v1/completions", {{"model", "a"}, {"prompt", random_prompt(8, vocab, rng)}, {"max_tokens", 1}});
  const double adapter_first = seconds_since(t0);
  auto trained = Transformer::from_pretrained(model_dir);  // as a trainer holds it: no adapters
  t0 = Clock::now();
  trained->save_pretrained(tmp / "full");
  const double full_write = seconds_since(t0);
  t0 = Clock::now();
  post("/update_weights_from_disk", {{"model_path", (tmp / "full").string()}});
  const double full_load = seconds_since(t0);
  t0 = Clock::now();
  post("/v1/completions", {{"prompt", random_prompt(8, vocab, rng)}, {"max_tokens", 1}});
  const double full_first = seconds_since(t0);
  uintmax_t adapter_bytes = 0, full_bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(tmp / "adapter")) adapter_bytes += e.is_regular_file() ? e.file_size() : 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(tmp / "full")) full_bytes += e.is_regular_file() ? e.file_size() : 0;
  std::printf("\nweight updates while serving     write    endpoint  first request   size\n");
  std::printf("adapter push (rank %3ld)        %6.3f s  %6.3f s  %8.3f s  %6.1f MB\n", static_cast<long>(adapter_rank),
              adapter_write, adapter_load, adapter_first, adapter_bytes / 1e6);
  std::printf("full-weight reload              %6.3f s  %6.3f s  %8.3f s  %6.1f MB\n", full_write, full_load, full_first,
              full_bytes / 1e6);
  std::filesystem::remove_all(tmp);
  server.stop();
  serving.join();
  return 0;
}
