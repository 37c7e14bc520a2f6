#include "env/episode.h"

#include "sandbox/sandbox_pool.h"
#include "util/error.h"

namespace rlcpp {

const EnumTable<EpisodeEnd>& episode_ends() {
  static const EnumTable<EpisodeEnd> table(
      "episode end", {{EpisodeEnd::kAnswer, "answer", "a turn without a tool call"},
                      {EpisodeEnd::kMaxTurns, "max_turns", "--max-turns turns, the last calling a tool"},
                      {EpisodeEnd::kMaxToolCalls, "max_tool_calls", "a turn's calls would pass --max-tool-calls"},
                      {EpisodeEnd::kLength, "length", "the response budget -mnt (inserted tokens count)"},
                      {EpisodeEnd::kTurnLength, "turn_length", "a turn reached --max-tokens-per-turn"},
                      {EpisodeEnd::kEnvDone, "env_done", "the environment said done"},
                      {EpisodeEnd::kEnvError, "env_error", "the environment failed (timeout, crash, garbage)"},
                      {EpisodeEnd::kAbort, "abort", "cancelled"}});
  return table;
}

Agent::Agent(const Tokenizer& tokenizer, EpisodeOptions options, nlohmann::ordered_json template_variables,
             SandboxPool* pool, SandboxLimits limits)
    : tokenizer_(tokenizer), options_(std::move(options)), chat_(tokenizer), variables_(std::move(template_variables)) {
  if (!variables_.is_object()) variables_ = nlohmann::ordered_json::object();
  if (options_.max_turns < 1) throw_user_error("--max-turns {}: must be at least 1", options_.max_turns);
  if (options_.max_tool_calls < 0) throw_user_error("--max-tool-calls {}: must be at least 0", options_.max_tool_calls);
  if (options_.max_tokens_per_turn < 0) {
    throw_user_error("--max-tokens-per-turn {}: must be at least 0 (0: the response budget)", options_.max_tokens_per_turn);
  }
  if (options_.tool_timeout <= 0) throw_user_error("--tool-timeout {}: must be positive", options_.tool_timeout);
  if (options_.max_tool_output < 1) throw_user_error("--max-tool-output {}: must be at least 1", options_.max_tool_output);
  if (options_.resume_lag < 1) throw_user_error("--tool-overlap-steps {}: must be at least 1", options_.resume_lag);
  if (!options_.tools.empty()) {
    tools_ = ToolSet(options_.tools, pool, limits);
    variables_["tools"] = tools_.schemas();
  }
  if (!options_.env_cmd.empty()) {
    env_ = std::make_unique<ExternalEnvironment>(
        EnvironmentConfig{options_.env_cmd, options_.env_workers, options_.tool_timeout, 3});
  }
  format_ = options_.tool_format.empty() ? template_tool_format(tokenizer)
                                         : tool_formats().parse(options_.tool_format, "--tool-format");
  renderer_ = std::make_unique<TurnRenderer>(tokenizer_, chat_, variables_);
}

Agent::~Agent() = default;

Episode::Episode(const Agent& agent, int64_t id, nlohmann::ordered_json prompt_messages, nlohmann::json record)
    : agent_(agent), id_(id), messages_(std::move(prompt_messages)), record_(std::move(record)) {}

std::optional<std::string> Episode::start() {
  ExternalEnvironment* env = agent_.environment();
  if (env == nullptr) return std::nullopt;
  started_ = true;
  const EnvReply reply = env->request(id_, {{"op", "start"}, {"episode", id_}, {"record", record_}});
  if (reply.failed) {
    env_failed_ = true;
    return std::nullopt;
  }
  const auto it = reply.json.find("observation");
  if (it == reply.json.end() || it->is_null()) return std::nullopt;
  const std::string observation = it->is_string() ? it->get<std::string>() : it->dump();
  messages_.push_back({{"role", "user"}, {"content", observation}});
  return observation;
}

EpisodeNext Episode::end(EpisodeEnd why) {
  ended_by_ = why;
  return {};
}

std::string Episode::clip(const std::string& answer) const {
  const auto ids = agent_.tokenizer().encode(answer);
  if (static_cast<int64_t>(ids.size()) <= agent_.options().max_tool_output) return answer;
  const std::vector<int32_t> kept(ids.begin(), ids.begin() + agent_.options().max_tool_output);
  return agent_.tokenizer().decode(kept) + "\n[output truncated]";
}

EpisodeNext Episode::insert(const nlohmann::ordered_json& messages, int32_t stop, int64_t response_tokens, int64_t budget) {
  RenderedDelta delta = agent_.renderer().delta(messages, stop);
  for (size_t k = 0; k < messages.size(); ++k) {
    turns_.push_back({messages[k].value("role", ""), messages[k].value("content", ""),
                      k == 0 ? static_cast<int64_t>(delta.ids.size()) : 0, false});
    messages_.push_back(messages[k]);
  }
  expected_ += delta.text;
  if (response_tokens + static_cast<int64_t>(delta.ids.size()) >= budget) {
    // No room left to answer: the inserted turn is not added to the sequence.
    expected_.resize(expected_.size() - delta.text.size());
    return end(EpisodeEnd::kLength);
  }
  n_inserted_ += static_cast<int64_t>(delta.ids.size());
  EpisodeNext next;
  next.go_on = true;
  next.inserted = std::move(delta.ids);
  next.turn_limit = agent_.options().max_tokens_per_turn;
  return next;
}

void Episode::record_turn(const std::vector<int32_t>& ids, bool stopped) {
  const Tokenizer& tokenizer = agent_.tokenizer();
  ++n_turns_;
  const std::vector<int32_t> content_ids(ids.begin(), ids.end() - (stopped && !ids.empty() ? 1 : 0));
  final_text_ = tokenizer.decode(content_ids);
  expected_ += tokenizer.decode(ids);
  messages_.push_back({{"role", "assistant"}, {"content", final_text_}});
  turns_.push_back({"assistant", final_text_, static_cast<int64_t>(ids.size()), true});
}

void Episode::last_turn(const std::vector<int32_t>& ids) {
  record_turn(ids, false);
  ended_by_ = EpisodeEnd::kLength;
}

EpisodeNext Episode::turn(const std::vector<int32_t>& ids, bool stopped, int64_t response_tokens, int64_t budget) {
  record_turn(ids, stopped);
  if (!stopped) return end(EpisodeEnd::kTurnLength);
  const int32_t stop = ids.back();
  const auto calls = agent_.tools().empty() ? std::vector<ToolCall>{} : parse_tool_calls(final_text_, agent_.format());
  if (!calls.empty()) {
    if (n_turns_ >= agent_.options().max_turns) return end(EpisodeEnd::kMaxTurns);
    if (n_tool_calls_ + static_cast<int64_t>(calls.size()) > agent_.options().max_tool_calls) {
      return end(EpisodeEnd::kMaxToolCalls);
    }
    nlohmann::ordered_json answers = nlohmann::ordered_json::array();
    for (const auto& call : calls) {
      const ToolAnswer answer = agent_.tools().call(call, agent_.options().tool_timeout);
      ++n_tool_calls_;
      n_tool_errors_ += answer.error;
      answers.push_back({{"role", "tool"}, {"content", clip(answer.text)}});
    }
    return insert(answers, stop, response_tokens, budget);
  }
  ExternalEnvironment* env = agent_.environment();
  if (env == nullptr || env_failed_) return end(EpisodeEnd::kAnswer);
  const EnvReply reply =
      env->request(id_, {{"op", "step"}, {"episode", id_}, {"turn", n_turns_ - 1}, {"assistant", final_text_}});
  if (reply.failed) {
    env_failed_ = true;
    return end(EpisodeEnd::kEnvError);
  }
  const nlohmann::json& j = reply.json;
  if (j.contains("reward") && j["reward"].is_number()) env_reward_ += j["reward"].get<double>();
  const bool done = j.value("done", false) || !j.contains("observation") || j["observation"].is_null();
  if (done) return end(EpisodeEnd::kEnvDone);
  if (n_turns_ >= agent_.options().max_turns) return end(EpisodeEnd::kMaxTurns);
  const std::string role = j.contains("role") && j["role"].is_string() ? j["role"].get<std::string>() : "user";
  if (role != "user" && role != "tool") {
    env_failed_ = true;
    return end(EpisodeEnd::kEnvError);
  }
  const std::string observation = j["observation"].is_string() ? j["observation"].get<std::string>() : j["observation"].dump();
  return insert(nlohmann::ordered_json::array({{{"role", role}, {"content", clip(observation)}}}), stop,
                response_tokens, budget);
}

void Episode::finish(bool length, const std::vector<int32_t>& ids, const std::vector<uint8_t>& sampled) {
  if (length) ended_by_ = EpisodeEnd::kLength;
  if (started_ && !env_failed_) {
    const EnvReply reply = agent_.environment()->request(id_, {{"op", "end"}, {"episode", id_}});
    env_failed_ = reply.failed;
  }
  if (checkable_) tito_ = agent_.renderer().check(messages_, expected_, ids, sampled);
}

nlohmann::json Episode::state() const {
  nlohmann::json turns = nlohmann::json::array();
  for (const auto& t : turns_) turns.push_back({t.role, t.content, t.n_tokens, t.trained});
  // The conversation as text: its messages keep their keys' order (a template may print them).
  return {{"messages", messages_.dump()}, {"expected", expected_}, {"checkable", checkable_}, {"turns", turns},
          {"final_text", final_text_}, {"n_turns", n_turns_}, {"tool_calls", n_tool_calls_},
          {"tool_errors", n_tool_errors_}, {"inserted", n_inserted_}, {"ended_by", episode_ends().name(ended_by_)},
          {"env_reward", env_reward_}, {"env_failed", env_failed_}, {"started", started_}};
}

void Episode::restore(const nlohmann::json& j, const std::string& where) {
  try {
    messages_ = nlohmann::ordered_json::parse(j.at("messages").get<std::string>());
    expected_ = j.at("expected").get<std::string>();
    checkable_ = j.at("checkable").get<bool>();
    turns_.clear();
    for (const auto& t : j.at("turns")) {
      turns_.push_back({t.at(0).get<std::string>(), t.at(1).get<std::string>(), t.at(2).get<int64_t>(), t.at(3).get<bool>()});
    }
    final_text_ = j.at("final_text").get<std::string>();
    n_turns_ = j.at("n_turns").get<int64_t>();
    n_tool_calls_ = j.at("tool_calls").get<int64_t>();
    n_tool_errors_ = j.at("tool_errors").get<int64_t>();
    n_inserted_ = j.at("inserted").get<int64_t>();
    ended_by_ = episode_ends().parse(j.at("ended_by").get<std::string>(), where);
    env_reward_ = j.at("env_reward").get<double>();
    env_failed_ = j.at("env_failed").get<bool>();
    started_ = j.at("started").get<bool>();
  } catch (const nlohmann::json::exception& e) {
    throw InternalError(fmt::format("{}: a malformed episode state: {}", where, e.what()));
  }
}

nlohmann::json Episode::summary() const {
  nlohmann::json turns = nlohmann::json::array();
  for (const auto& t : turns_) {
    turns.push_back({{"role", t.role}, {"content", t.content}, {"n_tokens", t.n_tokens}, {"trained", t.trained}});
  }
  nlohmann::json out = {{"turns", turns},
                        {"n_turns", n_turns_},
                        {"tool_calls", n_tool_calls_},
                        {"tool_errors", n_tool_errors_},
                        {"inserted_tokens", n_inserted_},
                        {"ended_by", episode_ends().name(ended_by_)},
                        {"tito", checkable_ ? tito_kinds().name(tito_.kind) : "unchecked"}};
  if (!tito_.detail.empty()) out["tito_detail"] = tito_.detail;
  if (agent_.environment() != nullptr) out["env_reward"] = env_reward_;
  return out;
}

}  // namespace rlcpp
