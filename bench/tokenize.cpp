// bench/tokenize: encoding speed (MB/s of UTF-8 input, one thread) of a tokenizer.json on a real
// text corpus, with a cold merge cache (fresh tokenizer) and a warm one (second pass), plus decode.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "bench_util.h"
#include "text/tokenizer.h"

using namespace rlcpp;
using namespace rlcpp::bench;

int main(int argc, char** argv) {
  std::string model = "tests/data/tokenizers/qwen3";
  std::string corpus = "examples/gsm8k/train.jsonl";
  int repeats = 3;
  CLI::App app{"bench/tokenize: tokenizer encode/decode throughput on one core"};
  app.add_option("--model", model, "folder with tokenizer.json (default: the real Qwen3 tokenizer of the tests)")
      ->capture_default_str();
  app.add_option("--corpus", corpus, "JSONL with messages/solution text (GSM8K format) or plain text")
      ->capture_default_str();
  app.add_option("--repeats", repeats, "warm passes")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::vector<std::string> texts;
  std::ifstream in(corpus);
  if (!in) {
    std::fprintf(stderr, "cannot open corpus %s\n", corpus.c_str());
    return 2;
  }
  std::string line;
  size_t bytes = 0;
  while (std::getline(in, line)) {
    auto json = nlohmann::json::parse(line, nullptr, false);
    std::string text = line;
    if (json.is_object()) {
      text = json.contains("messages") ? json["messages"].dump() : "";
      if (json.contains("messages") && json["messages"].is_object()) text = json["messages"].value("content", "");
      if (json.contains("solution")) text += "\n" + json["solution"].get<std::string>();
    }
    bytes += text.size();
    texts.push_back(std::move(text));
  }
  auto start = std::chrono::steady_clock::now();
  auto tokenizer = Tokenizer::from_dir(model);
  std::printf("tokenizer %s loaded in %.2f s; corpus %s: %zu texts, %.2f MB\n", model.c_str(), seconds_since(start),
              corpus.c_str(), texts.size(), bytes / 1e6);
  size_t tokens = 0;
  start = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> encoded;
  for (const auto& t : texts) {
    encoded.push_back(tokenizer->encode(t));
    tokens += encoded.back().size();
  }
  const double cold = seconds_since(start);
  double warm = 1e30;
  for (int r = 0; r < repeats; ++r) {
    start = std::chrono::steady_clock::now();
    for (const auto& t : texts) tokenizer->encode(t);
    warm = std::min(warm, seconds_since(start));
  }
  start = std::chrono::steady_clock::now();
  size_t decoded_bytes = 0;
  for (const auto& ids : encoded) decoded_bytes += tokenizer->decode(ids).size();
  const double decode = seconds_since(start);
  std::printf("encode cold cache  %7.2f MB/s  (%.2f s, %zu tokens, %.2f bytes/token)\n", bytes / 1e6 / cold, cold,
              tokens, static_cast<double>(bytes) / tokens);
  std::printf("encode warm cache  %7.2f MB/s  (%.2f s, best of %d)\n", bytes / 1e6 / warm, warm, repeats);
  std::printf("decode             %7.2f MB/s  (%.2f s)\n", decoded_bytes / 1e6 / decode, decode);
  return 0;
}
