#include "train/sample.h"

#include <algorithm>

#include "util/error.h"

namespace rlcpp {

void Sample::append(SegmentKind kind, const std::vector<int32_t>& ids, const std::vector<float>& logprobs,
                    int64_t version) {
  if (ids.empty()) return;
  RLCPP_CHECK(logprobs.empty() || logprobs.size() == ids.size(), "{} log-probs for {} tokens", logprobs.size(), ids.size());
  // Log-probs are kept for every token or none: inserted tokens hold 0, and a sample that had
  // none keeps none.
  const bool keep_logprobs = response_ids.empty() ? !logprobs.empty() : !rollout_logprobs.empty();
  if (keep_logprobs) {
    if (logprobs.empty()) rollout_logprobs.insert(rollout_logprobs.end(), ids.size(), 0.0f);
    else rollout_logprobs.insert(rollout_logprobs.end(), logprobs.begin(), logprobs.end());
  }
  response_ids.insert(response_ids.end(), ids.begin(), ids.end());
  if (!segments.empty() && segments.back().kind == kind && segments.back().policy_version == version) {
    segments.back().length += static_cast<int64_t>(ids.size());
  } else {
    segments.push_back({kind, static_cast<int64_t>(ids.size()), version});
  }
}

std::vector<uint8_t> Sample::loss_mask() const {
  std::vector<uint8_t> mask;
  mask.reserve(response_ids.size());
  for (const auto& s : segments) mask.insert(mask.end(), static_cast<size_t>(s.length), s.kind == SegmentKind::kModel);
  return mask;
}

std::vector<int64_t> Sample::token_versions() const {
  std::vector<int64_t> versions;
  versions.reserve(response_ids.size());
  for (const auto& s : segments) versions.insert(versions.end(), static_cast<size_t>(s.length), s.policy_version);
  return versions;
}

int64_t Sample::trained_tokens() const {
  int64_t n = 0;
  for (const auto& s : segments) n += s.kind == SegmentKind::kModel ? s.length : 0;
  return n;
}

int64_t Sample::policy_version() const {
  int64_t oldest = INT64_MAX;
  for (const auto& s : segments) {
    if (s.kind == SegmentKind::kModel) oldest = std::min(oldest, s.policy_version);
  }
  if (oldest != INT64_MAX) return oldest;
  return segments.empty() ? 0 : segments.front().policy_version;
}

bool Sample::single_version() const {
  const int64_t first = policy_version();
  return std::all_of(segments.begin(), segments.end(),
                     [&](const Segment& s) { return s.kind != SegmentKind::kModel || s.policy_version == first; });
}

int64_t Sample::mark_stale(int64_t oldest) {
  int64_t n = 0;
  for (auto& s : segments) {
    if (s.kind != SegmentKind::kModel || s.policy_version >= oldest) continue;
    s.kind = SegmentKind::kStale;
    n += s.length;
  }
  return n;
}

int64_t SampleGroup::policy_version() const {
  const bool trained = std::any_of(samples.begin(), samples.end(), [](const Sample& s) { return s.trained_tokens() > 0; });
  int64_t oldest = INT64_MAX;
  for (const auto& s : samples) {
    if (trained ? s.trained_tokens() > 0 : !s.segments.empty()) oldest = std::min(oldest, s.policy_version());
  }
  return oldest == INT64_MAX ? 0 : oldest;
}

int64_t SampleGroup::response_tokens() const {
  int64_t n = 0;
  for (const auto& s : samples) n += static_cast<int64_t>(s.response_ids.size());
  return n;
}

Sample model_sample(std::vector<int32_t> prompt_ids, std::vector<int32_t> response_ids, double advantage,
                    std::vector<float> rollout_logprobs, int64_t policy_version, bool truncated) {
  Sample s;
  s.prompt_ids = std::move(prompt_ids);
  s.append(SegmentKind::kModel, response_ids, rollout_logprobs, policy_version);
  s.set_advantage(advantage);
  s.truncated = truncated;
  return s;
}

void check_sample(const Sample& s, const std::string& what) {
  int64_t covered = 0;
  for (const auto& seg : s.segments) {
    if (seg.length < 1) throw InternalError(fmt::format("{}: a segment of {} tokens", what, seg.length));
    covered += seg.length;
  }
  const auto n = static_cast<int64_t>(s.response_ids.size());
  if (covered != n) throw InternalError(fmt::format("{}: segments cover {} of {} response tokens", what, covered, n));
  if (!s.rollout_logprobs.empty() && static_cast<int64_t>(s.rollout_logprobs.size()) != n) {
    throw InternalError(fmt::format("{}: {} rollout log-probs for {} response tokens", what, s.rollout_logprobs.size(), n));
  }
  if (s.advantages.size() != 1 && static_cast<int64_t>(s.advantages.size()) != n) {
    throw InternalError(fmt::format("{}: {} advantages for {} response tokens (one, or one per token)", what,
                                    s.advantages.size(), n));
  }
}

namespace {

const char* kind_name(SegmentKind kind) {
  switch (kind) {
    case SegmentKind::kModel: return "model";
    case SegmentKind::kInserted: return "inserted";
    case SegmentKind::kStale: return "stale";
  }
  return "?";
}

SegmentKind kind_from(const std::string& name) {
  if (name == "model") return SegmentKind::kModel;
  if (name == "inserted") return SegmentKind::kInserted;
  if (name == "stale") return SegmentKind::kStale;
  throw InternalError(fmt::format("a sample segment of unknown kind \"{}\"", name));
}

}  // namespace

nlohmann::json to_json(const Sample& s) {
  nlohmann::json segments = nlohmann::json::array();
  for (const auto& seg : s.segments) segments.push_back({kind_name(seg.kind), seg.length, seg.policy_version});
  nlohmann::json out = {{"response_ids", s.response_ids}, {"segments", segments},      {"rollout_logprobs", s.rollout_logprobs},
                        {"advantages", s.advantages},     {"response", s.response},    {"reward", s.reward},
                        {"reward_parts", s.reward_parts}, {"correct", s.correct},      {"truncated", s.truncated},
                        {"reason", s.reward_reason}};
  if (!s.episode.is_null()) out["episode"] = s.episode;
  return out;
}

nlohmann::json to_json(const SampleGroup& g) {
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& s : g.samples) {
    samples.push_back(to_json(s));
    // A sample whose prompt is its own (an environment's first message): kept with it.
    if (s.prompt_ids != g.samples[0].prompt_ids) samples.back()["prompt_ids"] = s.prompt_ids;
  }
  return {{"id", g.id},
          {"prompt_ids", g.samples.empty() ? std::vector<int32_t>{} : g.samples[0].prompt_ids},
          {"prompt", g.prompt},
          {"gt_answer", g.gt_answer},
          {"line", g.line},
          {"trained_step", g.trained_step},
          {"samples", samples}};
}

SampleGroup group_from_json(const nlohmann::json& j) {
  SampleGroup g;
  g.id = j.value("id", int64_t{0});
  g.prompt = j.at("prompt").get<std::string>();
  g.gt_answer = j.at("gt_answer").get<std::string>();
  g.line = j.at("line").get<int64_t>();
  g.trained_step = j.value("trained_step", int64_t{0});
  const auto prompt_ids = j.at("prompt_ids").get<std::vector<int32_t>>();
  const int64_t group_version = j.value("policy_version", int64_t{0});  // before segments: the group's
  for (const auto& js : j.at("samples")) {
    Sample s;
    s.prompt_ids = js.contains("prompt_ids") ? js.at("prompt_ids").get<std::vector<int32_t>>() : prompt_ids;
    s.group_id = g.id;
    s.response_ids = js.at("response_ids").get<std::vector<int32_t>>();
    s.rollout_logprobs = js.at("rollout_logprobs").get<std::vector<float>>();
    if (js.contains("segments")) {
      for (const auto& seg : js.at("segments")) {
        s.segments.push_back({kind_from(seg.at(0).get<std::string>()), seg.at(1).get<int64_t>(), seg.at(2).get<int64_t>()});
      }
      s.advantages = js.at("advantages").get<std::vector<double>>();
    } else {  // written before segments
      if (!s.response_ids.empty()) {
        s.segments.push_back({SegmentKind::kModel, static_cast<int64_t>(s.response_ids.size()), group_version});
      }
      s.set_advantage(js.at("advantage").get<double>());
    }
    s.response = js.at("response").get<std::string>();
    s.reward = js.at("reward").get<double>();
    s.reward_parts = js.value("reward_parts", std::map<std::string, double>{});
    s.correct = js.at("correct").get<bool>();
    s.reward_reason = js.value("reason", std::string());
    s.truncated = js.at("truncated").get<bool>();
    if (js.contains("episode")) s.episode = js.at("episode");
    check_sample(s, fmt::format("a saved sample of dataset line {}", g.line));
    g.samples.push_back(std::move(s));
  }
  return g;
}

}  // namespace rlcpp
