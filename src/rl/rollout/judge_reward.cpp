#include "rl/rollout/judge_reward.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "util/error.h"
#include "util/file.h"

namespace rlcpp {

using Json = nlohmann::json;

namespace {

// The fields a template may name, in the order they are looked for.
const std::vector<std::string> kFields = {"{prompt}", "{response}", "{answer}"};

// The question the judge is shown: the last user message, else the prompt's text.
std::string question_of(const RewardInput& input) {
  for (auto it = input.messages.rbegin(); it != input.messages.rend(); ++it) {
    if (it->is_object() && it->value("role", "") == "user" && (*it)["content"].is_string()) {
      return (*it)["content"].get<std::string>();
    }
  }
  return input.prompt;
}

}  // namespace

JudgeReward::JudgeReward(const JudgeOptions& options) : options_(options) {
  if (options_.template_path.empty()) {
    throw_user_error("--judge-url {}: give the judge's prompt with --judge-template FILE ({{prompt}}, {{response}} and "
                     "{{answer}} are filled in)", options_.url);
  }
  try {
    template_ = read_file(options_.template_path);
  } catch (const std::exception& e) {
    throw_user_error("--judge-template {}: cannot read it ({})", options_.template_path, e.what());
  }
  if (template_.find("{response}") == std::string::npos) {
    throw_user_error("--judge-template {}: it has no {{response}}, so the judge would never see the response; put "
                     "{{response}} where it goes (and {{prompt}}, {{answer}} where wanted)", options_.template_path);
  }
  if (!options_.pattern.empty()) {
    try {
      pattern_.emplace(options_.pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw_user_error("--judge-pattern {}: not a regular expression ({})", options_.pattern, e.what());
    }
    if (pattern_->mark_count() < 1) {
      throw_user_error("--judge-pattern {}: put the score in a group, for example \"Score: ([0-9.]+)\"", options_.pattern);
    }
  }
  ServerPoolOptions pool;
  pool.urls = split_urls(options_.url);
  if (const char* key = std::getenv("RLCPP_JUDGE_API_KEY")) pool.api_key = key;
  pool.max_in_flight = options_.concurrency;
  pool.unavailable_timeout_s = options_.timeout;
  pool.what = "judge server";
  pool.flag = "--judge-url";
  pool_ = std::make_unique<ServerPool>(pool);
  names_.assign(pool_->size(), "");
}

std::string JudgeReward::judge_prompt(const RewardInput& input) const {
  const std::vector<std::string> values = {question_of(input), input.response, input.gt_answer};
  std::string out;
  size_t at = 0;
  for (;;) {
    // The earliest field from here; the text put in is never searched again.
    size_t best = std::string::npos, which = 0;
    for (size_t f = 0; f < kFields.size(); ++f) {
      const size_t found = template_.find(kFields[f], at);
      if (found < best) {
        best = found;
        which = f;
      }
    }
    if (best == std::string::npos) break;
    out.append(template_, at, best - at);
    out += values[which];
    at = best + kFields[which].size();
  }
  out.append(template_, at, std::string::npos);
  return out;
}

std::optional<double> JudgeReward::parse_score(const std::string& reply) const {
  std::string number;
  if (pattern_) {
    std::smatch m;
    if (!std::regex_search(reply, m, *pattern_) || !m[1].matched) return std::nullopt;
    number = m[1].str();
  } else {
    static const std::regex kNumber(R"(-?[0-9]+(\.[0-9]+)?)");
    for (std::sregex_iterator it(reply.begin(), reply.end(), kNumber), end; it != end; ++it) number = it->str();
    if (number.empty()) return std::nullopt;
  }
  try {
    size_t used = 0;
    const double x = std::stod(number, &used);
    if (used != number.size() || !std::isfinite(x)) return std::nullopt;
    return x;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<std::string> JudgeReward::model_name(size_t k) {
  if (!options_.model.empty()) return options_.model;
  {
    std::lock_guard<std::mutex> lock(names_mutex_);
    if (!names_[k].empty()) return names_[k];
  }
  const HttpReply r = pool_->exchange(k, "GET", "/v1/models", "", std::min(30.0, options_.timeout));
  if (r.status < 0 || r.status >= 500) return std::nullopt;  // the server is set aside, the judgement goes elsewhere
  if (r.status != 200) {
    throw_user_error("{}/v1/models answered {}: {}; give the judge's name with --judge-model", pool_->url(k), r.status,
                     reply_message(r));
  }
  const Json j = Json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() || !j["data"][0].contains("id")) {
    throw_user_error("{}/v1/models: expected {{\"data\": [{{\"id\": ...}}]}}, got {}; give the judge's name with --judge-model",
                     pool_->url(k), r.body.substr(0, 200));
  }
  std::lock_guard<std::mutex> lock(names_mutex_);
  names_[k] = j["data"][0]["id"].get<std::string>();
  return names_[k];
}

std::string JudgeReward::judge(const std::string& prompt, const std::atomic<bool>& abort) {
  for (;;) {
    const size_t k = pool_->acquire(abort);
    struct Release {
      ServerPool& pool;
      size_t k;
      ~Release() { pool.release(k); }
    } release_guard{*pool_, k};
    const auto name = model_name(k);
    if (!name) {
      pool_->mark_down(k, "/v1/models did not answer");
      continue;
    }
    const Json body = {{"model", *name},
                       {"messages", Json::array({{{"role", "user"}, {"content", prompt}}})},
                       {"temperature", 0},
                       {"max_tokens", options_.max_tokens}};
    const HttpReply r = pool_->exchange(k, "POST", "/v1/chat/completions", body.dump(), options_.timeout);
    if (r.status < 0 || r.status >= 500 || r.status == 408 || r.status == 429) {
      pool_->mark_down(k, r.status < 0 ? r.error : fmt::format("{}: {}", r.status, reply_message(r)));
      continue;
    }
    if (r.status != 200) {
      throw_user_error("{}/v1/chat/completions answered {}: {} (the judge refuses the request: check --judge-model and "
                       "--judge-max-tokens)", pool_->url(k), r.status, reply_message(r));
    }
    const Json j = Json::parse(r.body, nullptr, false);
    if (j.is_discarded() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty() ||
        !j["choices"][0].contains("message") || !j["choices"][0]["message"].contains("content")) {
      pool_->mark_down(k, "an answer that is not a chat completion: " + r.body.substr(0, 100));
      continue;
    }
    pool_->mark_up(k);
    const auto& content = j["choices"][0]["message"]["content"];
    return content.is_string() ? content.get<std::string>() : "";
  }
}

std::vector<ComponentScore> JudgeReward::score(const std::vector<RewardInput>& inputs) {
  std::vector<ComponentScore> out(inputs.size());
  pool_->restart_clock();
  for_each_request(inputs.size(), pool_->size() * static_cast<size_t>(options_.concurrency),
                   [&](size_t k, const std::atomic<bool>& abort) {
                     const auto raw = parse_score(judge(judge_prompt(inputs[k]), abort));
                     ComponentScore& s = out[k];
                     s.parts["no_score"] = raw ? 0.0 : 1.0;  // its mean: the share of replies without one
                     s.reason = raw ? "judged" : "no score";
                     if (!raw) return;
                     s.value = std::clamp(*raw / options_.max_score, 0.0, 1.0);
                     s.parts["raw"] = *raw;
                   });
  return out;
}

}  // namespace rlcpp
