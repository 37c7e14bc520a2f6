// bench/reward: graded responses per second on one core for typical ~2,000-character responses
// (step-by-step reasoning with numbers and LaTeX ending in an answer), for each reward type.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <random>

#include "bench_util.h"
#include "reward/reward.h"

using namespace rlcpp;
using namespace rlcpp::bench;

namespace {

std::string make_response(std::mt19937_64& rng, RewardType type, const std::string& answer) {
  const char* steps[] = {"First, we compute the total: $48 + 24 = 72$ clips. ",
                         "Let $x$ be the number of apples; then $3x + 5 = 20$, so $x = 5$. ",
                         "We have \\frac{1}{2} \\cdot 36 = 18 eggs left, and each sells for \\$2. ",
                         "Since the rate is 2.5 times faster, 150 \\times 2.5 = 375 words per minute. ",
                         "Therefore the area is \\pi r^2 = 16\\pi square units. ",
                         "Checking: (1, 2) satisfies both equations, as 2(1) + 2 = 4. "};
  std::string body;
  while (body.size() < 1900) body += steps[rng() % 6];
  switch (type) {
    case RewardType::kBoxed: return body + "The answer is \\boxed{" + answer + "}.";
    case RewardType::kThinkAnswerTags: return "<think>" + body + "</think>\n<answer>" + answer + "</answer>";
    case RewardType::kAnswerLine: return body + "\nAnswer: " + answer;
  }
  return body;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 20000;
  CLI::App app{"bench/reward: grading throughput on one core"};
  app.add_option("-n", n, "responses per reward type")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const std::vector<std::pair<std::string, std::string>> answers = {
      {"72", "72"}, {"\\frac{1}{2}", "0.5"}, {"1,200", "1200"}, {"2x+1", "1+2x"}, {"(1,2]", "(1,2]"}, {"\\sqrt{8}", "2\\sqrt{2}"}, {"71", "72"}};
  for (auto type : {RewardType::kBoxed, RewardType::kThinkAnswerTags, RewardType::kAnswerLine}) {
    std::mt19937_64 rng(1);
    std::vector<std::pair<std::string, std::string>> cases;
    size_t bytes = 0;
    for (int64_t k = 0; k < 512; ++k) {
      const auto& [answer, truth] = answers[static_cast<size_t>(k) % answers.size()];
      cases.emplace_back(make_response(rng, type, answer), truth);
      bytes += cases.back().first.size();
    }
    int64_t correct = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < n; ++k) {
      const auto& c = cases[static_cast<size_t>(k) % cases.size()];
      correct += grade_response(type, c.first, c.second).correct;
    }
    const double seconds = seconds_since(start);
    std::printf("%-18s %9.0f responses/s  (%ld graded in %.2f s, mean %zu chars, %.0f%% correct)\n",
                reward_types().name(type).c_str(), n / seconds, static_cast<long>(n), seconds, bytes / cases.size(),
                100.0 * correct / n);
  }
  return 0;
}
