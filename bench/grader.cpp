// bench/grader: how often the boxed grader accepts a wrong answer (false positives) and rejects a
// right one (false negatives). For every GSM8K ground truth it grades written-out variants of the
// right answer (units, thousands separators, LaTeX wrappers, an equation naming it) and near misses
// (off by one, by a factor of ten, digits swapped, a comma-space split "41, 250", a variable
// attached, another problem's answer), each inside a boxed response; then the hand-labelled table
// tests/data/math_equal_cases.txt. A wrong answer graded right is the worse error: the policy
// learns to produce it.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <random>

#include "bench_util.h"
#include "reward/math_equal.h"
#include "reward/reward.h"

using namespace rlcpp;

namespace {

struct Counts {
  int64_t positives = 0, rejected = 0, negatives = 0, accepted = 0;
  void add(bool should, bool graded) {
    if (should) {
      ++positives;
      rejected += !graded;
    } else {
      ++negatives;
      accepted += graded;
    }
  }
  void print(const char* what) const {
    std::printf("%-34s false positives %5ld / %6ld = %.4f%%   false negatives %5ld / %6ld = %.4f%%\n", what,
                static_cast<long>(accepted), static_cast<long>(negatives), negatives ? 100.0 * accepted / negatives : 0.0,
                static_cast<long>(rejected), static_cast<long>(positives), positives ? 100.0 * rejected / positives : 0.0);
  }
};

std::string with_thousands(const std::string& digits, const std::string& sep) {
  std::string out;
  const size_t n = digits.size();
  for (size_t k = 0; k < n; ++k) {
    if (k > 0 && (n - k) % 3 == 0) out += sep;
    out += digits[k];
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dataset = "examples/gsm8k/test.jsonl", table = "tests/data/math_equal_cases.txt";
  CLI::App app{"bench/grader: false-positive and false-negative rates of the boxed grader"};
  app.add_option("--dataset", dataset, "JSONL with gt_answer")->capture_default_str();
  app.add_option("--table", table, "hand-labelled cases")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::vector<std::string> truths;
  std::ifstream in(dataset);
  if (!in) {
    std::fprintf(stderr, "bench/grader: cannot read %s (give --dataset)\n", dataset.c_str());
    return 1;
  }
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) truths.push_back(nlohmann::json::parse(line).at("gt_answer").get<std::string>());
  }
  std::mt19937_64 rng(17);
  Counts gsm;
  auto grade = [](const std::string& answer, const std::string& truth) {
    return grade_response(RewardType::kBoxed, "We work it out step by step. The answer is $\\boxed{" + answer + "}$.", truth)
        .correct;
  };
  for (const auto& t : truths) {
    const bool integer = !t.empty() && t.find_first_not_of("-0123456789") == std::string::npos;
    // Right answers written out.
    for (const std::string& right : {t, t + " \\text{ dollars}", "\\$" + t, t + " apples", "x = " + t, t + ".0",
                                     "\\text{" + t + "}", "\\textbf{" + t + "}"}) {
      gsm.add(true, grade(right, t));
    }
    if (integer && t.size() > 3 && t[0] != '-') {
      for (const char* sep : {",", "{,}", ",\\!"}) gsm.add(true, grade(with_thousands(t, sep), t));
      gsm.add(false, grade(with_thousands(t, ", "), t));  // "41, 250": two numbers
    }
    // Wrong answers.
    if (integer) {
      const long long v = std::stoll(t);
      for (long long wrong : {v + 1, v - 1, v * 10, v == 0 ? 1 : -v}) gsm.add(false, grade(std::to_string(wrong), t));
      if (v % 10 == 0 && v != 0) gsm.add(false, grade(std::to_string(v / 10), t));
      std::string swapped = t;
      if (swapped.size() >= 2 && swapped[swapped.size() - 1] != swapped[swapped.size() - 2]) {
        std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
        if (swapped[0] != '0') gsm.add(false, grade(swapped, t));
      }
      gsm.add(false, grade(t + "x", t));
      gsm.add(false, grade(t + " + y", t));
      gsm.add(false, grade("p + 2q = " + t, t));
      gsm.add(false, grade(t + ", " + std::to_string(v + 3), t));
    }
    const std::string& other = truths[rng() % truths.size()];
    if (other != t && !math_equal(other, t)) gsm.add(false, grade(other, t));
  }
  gsm.print("GSM8K test truths, boxed variants");

  Counts hand;
  std::ifstream cases(table);
  for (std::string line; std::getline(cases, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t a = line.find(" ||| "), b = line.rfind(" ||| ");
    if (a == b) continue;
    hand.add(line.substr(b + 5) == "1", math_equal(line.substr(0, a), line.substr(a + 5, b - a - 5)));
  }
  hand.print("hand-labelled table");
  return 0;
}
