#include "rl/rollout/rollout.h"

#include <chrono>
#include <future>
#include <optional>
#include <numeric>

#include "algo/advantages.h"
#include "algo/dapo.h"
#include "engine/stop_strings.h"
#include "reward/external.h"
#include "rl/rollout/agent_loop.h"
#include "sandbox/sandbox_pool.h"
#include "util/error.h"
#include "util/trace.h"

namespace rlcpp {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::vector<SampleGroup> take_groups(std::deque<SampleGroup>& buffer, int64_t n) {
  std::vector<SampleGroup> batch;
  while (!buffer.empty() && static_cast<int64_t>(batch.size()) < n) {
    batch.push_back(std::move(buffer.front()));
    buffer.pop_front();
  }
  return batch;
}

DatasetOptions checked_by(const RewardFunction& reward, DatasetOptions options) {
  options.check = [&reward](const PromptRecord& record) {
    reward.check_record(record.gt_answer, nlohmann::json(record.metadata));
  };
  return options;
}

nlohmann::json to_json(const PromptPick& p) {
  return {{"ids", p.ids}, {"text", p.text}, {"gt_answer", p.gt_answer}, {"line", p.line},
          {"seed", p.seed}, {"id", p.id}, {"metadata", p.metadata}, {"messages", p.messages}, {"truncated", p.truncated}};
}

PromptPick pick_from_json(const nlohmann::json& j) {
  return {j.at("ids").get<std::vector<int32_t>>(), j.at("text").get<std::string>(), j.at("gt_answer").get<std::string>(),
          j.at("line").get<int64_t>(), j.at("seed").get<uint64_t>(), j.value("id", int64_t{0}),
          j.value("metadata", nlohmann::json::object()), j.value("messages", nlohmann::json::array()),
          j.value("truncated", false)};
}

nlohmann::json to_json(const WeightSwitches& w) {
  return {{"during_round", w.during_round}, {"asap", w.asap}, {"start_after", w.start_after}, {"at", w.at}, {"cuts", w.cuts}};
}

WeightSwitches switches_from_json(const nlohmann::json& j) {
  WeightSwitches w;
  w.during_round = j.at("during_round").get<bool>();
  w.asap = j.at("asap").get<bool>();
  w.start_after = j.at("start_after").get<int64_t>();
  w.at = j.at("at").get<std::vector<int64_t>>();
  w.cuts = j.value("cuts", std::vector<int64_t>{});
  return w;
}

nlohmann::json to_json(const RoundProgress& progress) {
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& piece : progress.samples) {
    const GeneratedSample& g = piece.sample.out;
    nlohmann::json changes = nlohmann::json::array(), top = nlohmann::json::array();
    nlohmann::json inserted = nlohmann::json::array();
    for (const auto& c : g.version_changes) changes.push_back({c.start, c.version});
    for (const auto& run : g.inserted) inserted.push_back({run.start, run.length});
    for (const auto& row : g.top_logprobs) {
      nlohmann::json entries = nlohmann::json::array();
      for (const auto& t : row) entries.push_back({t.token, t.logprob});
      top.push_back(std::move(entries));
    }
    samples.push_back({{"tokens", g.token_ids}, {"logprobs", g.logprobs}, {"top", top}, {"text", g.text},
                       {"finish", static_cast<int>(g.finish_reason)}, {"version", g.policy_version},
                       {"changes", changes}, {"inserted", inserted}, {"pieces", piece.sample.pieces}, {"done", piece.done},
                       {"episode", piece.episode}});
  }
  return {{"calls_started", progress.calls_started}, {"samples", samples}};
}

RoundProgress round_progress_from_json(const nlohmann::json& j, const std::string& where) {
  RoundProgress progress;
  try {
    progress.calls_started = j.at("calls_started").get<int64_t>();
    for (const auto& s : j.at("samples")) {
      RoundProgress::Piece piece;
      GeneratedSample& g = piece.sample.out;
      g.token_ids = s.at("tokens").get<std::vector<int32_t>>();
      g.logprobs = s.at("logprobs").get<std::vector<float>>();
      for (const auto& row : s.at("top")) {
        std::vector<TokenLogprob> entries;
        for (const auto& t : row) entries.push_back({t.at(0).get<int32_t>(), t.at(1).get<float>()});
        g.top_logprobs.push_back(std::move(entries));
      }
      g.text = s.at("text").get<std::string>();
      const int finish = s.at("finish").get<int>();
      RLCPP_CHECK(finish >= 0 && finish <= static_cast<int>(FinishReason::kAbort), "{}: unknown finish reason {}", where, finish);
      g.finish_reason = static_cast<FinishReason>(finish);
      g.policy_version = s.at("version").get<int64_t>();
      for (const auto& c : s.at("changes")) g.version_changes.push_back({c.at(0).get<int64_t>(), c.at(1).get<int64_t>()});
      for (const auto& run : s.value("inserted", nlohmann::json::array())) {
        g.inserted.push_back({run.at(0).get<int64_t>(), run.at(1).get<int64_t>()});
      }
      piece.episode = s.value("episode", nlohmann::json());
      piece.sample.pieces = s.at("pieces").get<int64_t>();
      piece.done = s.at("done").get<bool>();
      progress.samples.push_back(std::move(piece));
    }
  } catch (const nlohmann::json::exception& e) {
    throw InternalError(fmt::format("{}: a malformed round in flight: {}", where, e.what()));
  }
  return progress;
}

nlohmann::json to_json(const RoundInFlight& r) {
  nlohmann::json picks = nlohmann::json::array();
  for (const auto& p : r.picks) picks.push_back(to_json(p));
  nlohmann::json graded = nullptr;
  if (r.graded) {
    nlohmann::json kept = nlohmann::json::array(), discarded = nlohmann::json::array();
    for (const auto& g : r.graded->kept) kept.push_back(to_json(g));
    for (const auto& g : r.graded->discarded) discarded.push_back(to_json(g));
    graded = {{"kept", kept}, {"discarded", discarded}, {"generate_seconds", r.graded->generate_seconds},
              {"reward_seconds", r.graded->reward_seconds}};
  }
  nlohmann::json streamed = nullptr;
  if (r.streamed) {
    nlohmann::json next = nlohmann::json::array();
    for (const auto& p : r.streamed->picks) next.push_back(to_json(p));
    streamed = {{"picks", std::move(next)}, {"progress", to_json(r.streamed->progress)}};
  }
  return {{"source", r.source}, {"switches", to_json(r.switches)}, {"picks", std::move(picks)}, {"taken", r.taken},
          {"step", r.step}, {"call_end", r.call_end}, {"version", r.version},
          {"progress", r.progress ? to_json(*r.progress) : nlohmann::json(nullptr)}, {"graded", std::move(graded)},
          {"streamed", std::move(streamed)}, {"restarted", r.restarted}};
}

RoundInFlight round_in_flight_from_json(const nlohmann::json& j, const std::string& where) {
  RoundInFlight r;
  try {
    r.source = j.value("source", std::string("engine"));  // (checkpoints from before rollout servers cut rounds)
    if (r.source != "engine" && r.source != "servers") throw InternalError(fmt::format("{}: a round in flight from \"{}\"", where, r.source));
    r.switches = switches_from_json(j.at("switches"));
    for (const auto& p : j.at("picks")) r.picks.push_back(pick_from_json(p));
    r.taken = j.at("taken").get<int64_t>();
    r.step = j.at("step").get<int64_t>();
    r.call_end = j.value("call_end", int64_t{0});
    r.restarted = j.value("restarted", int64_t{0});
    r.version = j.at("version").get<int64_t>();
    if (!j.at("progress").is_null()) r.progress = round_progress_from_json(j.at("progress"), where);
    const auto& g = j.at("graded");
    if (!g.is_null()) {
      r.graded.emplace();
      for (const auto& group : g.at("kept")) r.graded->kept.push_back(group_from_json(group));
      for (const auto& group : g.at("discarded")) r.graded->discarded.push_back(group_from_json(group));
      r.graded->generate_seconds = g.at("generate_seconds").get<double>();
      r.graded->reward_seconds = g.at("reward_seconds").get<double>();
    }
    const auto streamed = j.value("streamed", nlohmann::json());
    if (!streamed.is_null()) {
      r.streamed.emplace();
      for (const auto& p : streamed.at("picks")) r.streamed->picks.push_back(pick_from_json(p));
      r.streamed->progress = round_progress_from_json(streamed.at("progress"), where);
    }
  } catch (const nlohmann::json::exception& e) {
    throw InternalError(fmt::format("{}: a malformed round in flight: {}", where, e.what()));
  }
  return r;
}

EngineConfig run_engine_config(const RunConfig& c) {
  EngineConfig config = c.rollout.engine;
  config.weights_dtype = rollout_dtype_or_default(c.rollout.dtype, "--rollout-dtype");
  config.kv_dtype = dtype_or_default(c.rollout.kv_cache_dtype, "--kv-cache-dtype");
  return config;
}

PromptOptions run_prompt_options(const RunConfig& c, const ModelConfig& model_config) {
  PromptOptions options;
  options.system_prompt = c.rollout.system_prompt ? *c.rollout.system_prompt : default_system_prompt(c.reward.type);
  options.max_prompt_tokens = c.rollout.max_prompt_tokens;
  options.context_tokens = model_config.max_position_embeddings;
  options.overflow = c.rollout.overflow;
  options.source = c.runtime.dataset;
  return options;
}

RolloutGenerator::RolloutGenerator(const RunConfig& config, const ModelConfig& model_config, const Tokenizer& tokenizer,
                                   RolloutBackend* backend, const PromptDataset* dataset, DatasetCursor* cursor,
                                   const RewardFunction* reward)
    : c_(config), backend_(backend), dataset_(dataset), cursor_(cursor), reward_(reward), tokenizer_(tokenizer) {
  PromptOptions prompt_options = run_prompt_options(config, model_config);
  if (config.episode.multi_turn()) {
    // The python tool's sandbox only where rollouts are generated (a picker only renders prompts).
    const bool python = config.episode.tools.find("python") != std::string::npos;
    if (backend != nullptr && python) tool_sandbox_ = std::make_unique<SandboxPool>(static_cast<int>(config.reward.code.workers));
    SandboxLimits limits;
    limits.memory_mb = config.reward.code.memory_mb;
    EpisodeOptions episode = config.episode;
    if (backend == nullptr) episode.env_cmd.clear();  // no episodes run here: no environment processes
    agent_ = std::make_unique<Agent>(tokenizer, episode, prompt_options.template_variables, tool_sandbox_.get(), limits);
    prompt_options.template_variables = agent_->template_variables();
  }
  prompts_ = std::make_unique<PromptBuilder>(tokenizer, prompt_options);
  sampling_ = config.rollout.sampling;
  sampling_.stop_token_ids = default_stop_tokens(model_config, tokenizer);
}

RolloutGenerator::~RolloutGenerator() = default;

std::vector<PromptPick> RolloutGenerator::pick(int64_t n_prompts) {
  RLCPP_CHECK(dataset_ != nullptr && cursor_ != nullptr, "picking prompts without a dataset");
  std::vector<PromptPick> picks;
  const int64_t n_records = static_cast<int64_t>(dataset_->records.size());
  int64_t draws = 0;
  while (static_cast<int64_t>(picks.size()) < n_prompts) {
    if (++draws > 2 * n_records + n_prompts && picks.empty()) {
      throw_user_error("{}: every prompt is left out by the prompt-length limits (-mpt {}, min_prompt_length {})",
                       c_.runtime.dataset, c_.rollout.max_prompt_tokens, c_.rollout.min_prompt_length);
    }
    const PromptRecord& record = dataset_->records[static_cast<size_t>(cursor_->next())];
    auto built = prompts_->build(record);
    if (!built) {
      ++skipped_long_;
      continue;
    }
    if (static_cast<int64_t>(built->ids.size()) < c_.rollout.min_prompt_length) {
      ++skipped_short_;
      continue;
    }
    const int64_t position = static_cast<int64_t>(cursor_->consumed());
    picks.push_back({built->ids, built->text, record.gt_answer, record.line,
                     c_.runtime.seed * 1000003ULL + static_cast<uint64_t>(position), position,
                     nlohmann::json(record.metadata), nlohmann::json(built->messages), built->truncated});
  }
  return picks;
}

// One sample of a round before grading: what the backend or the agent loop gave.
struct RolloutGenerator::Rolled {
  GeneratedSample generated;
  std::vector<int32_t> prompt_ids;  // the sample's prompt (an environment's first message may extend the group's)
  std::string graded;               // the text the -rt reward grades (multi-turn: the last assistant turn)
  nlohmann::json episode;           // multi-turn: the episode's summary
  double env_reward = 0;
  bool truncated = false;

  // A single-turn sample as the backend gave it (taken from `s`).
  static Rolled of(const GenerationRequest& request, GeneratedSample& s) {
    Rolled r;
    r.prompt_ids = request.prompt_ids;
    r.graded = s.text;
    r.truncated = s.finish_reason == FinishReason::kLength;
    r.generated = std::move(s);
    return r;
  }
  // A multi-turn sample whose episode ended (taken from `piece`).
  static Rolled of(RoundProgress::Piece& piece) {
    EpisodeResult e = episode_result(piece);
    Rolled r;
    r.prompt_ids = std::move(e.prompt_ids);
    r.graded = std::move(e.final_text);
    r.episode = std::move(e.summary);
    r.env_reward = e.env_reward;
    r.truncated = e.truncated;
    r.generated = std::move(e.sample);
    return r;
  }
};

namespace {

// A sample of the model's runs and the inserted ones, each run with the policy version of its
// tokens (a partial rollout's change of weights starts a new run).
Sample trajectory_sample(const RolloutGenerator::Rolled& r, double advantage) {
  const GeneratedSample& g = r.generated;
  if (g.inserted.empty() && g.version_changes.empty()) {
    return model_sample(r.prompt_ids, g.token_ids, advantage, g.logprobs, g.policy_version, r.truncated);
  }
  Sample s;
  s.prompt_ids = r.prompt_ids;
  size_t at = 0;
  size_t change = 0;  // the next of g.version_changes
  int64_t version = g.policy_version;
  auto piece = [&](SegmentKind kind, size_t end) {
    const std::vector<int32_t> ids(g.token_ids.begin() + static_cast<std::ptrdiff_t>(at),
                                   g.token_ids.begin() + static_cast<std::ptrdiff_t>(end));
    std::vector<float> logprobs;
    if (!g.logprobs.empty()) {
      logprobs.assign(g.logprobs.begin() + static_cast<std::ptrdiff_t>(at), g.logprobs.begin() + static_cast<std::ptrdiff_t>(end));
    }
    s.append(kind, ids, logprobs, version);
    at = end;
  };
  auto run = [&](SegmentKind kind, size_t end) {
    while (at < end) {
      while (change < g.version_changes.size() && static_cast<size_t>(g.version_changes[change].start) <= at) {
        version = g.version_changes[change++].version;
      }
      const size_t next = change < g.version_changes.size() ? static_cast<size_t>(g.version_changes[change].start) : end;
      piece(kind, std::min(end, next));
    }
  };
  for (const auto& inserted : g.inserted) {
    run(SegmentKind::kModel, static_cast<size_t>(inserted.start));
    run(SegmentKind::kInserted, static_cast<size_t>(inserted.start + inserted.length));
  }
  run(SegmentKind::kModel, g.token_ids.size());
  if (g.logprobs.empty()) s.rollout_logprobs.clear();
  s.set_advantage(advantage);
  s.truncated = r.truncated;
  return s;
}

}  // namespace

GenerationRequest RolloutGenerator::request_of(const PromptPick& pick) const {
  GenerationRequest request;
  request.prompt_ids = pick.ids;
  request.params = sampling_;
  request.n = c_.rollout.num_generations;
  request.seed = pick.seed;
  return request;
}

namespace {

// A call's entries: each request's sample 0 is sample `first` of `progress`.
struct CallEntry {
  RoundProgress* progress;
  const std::vector<GenerationRequest>* requests;
  size_t first;
};

// The requests that go on with the unfinished samples of `requests` (those of `started`, in
// order): a request none of whose samples holds a token anew, whole; the others each from its own
// sequence.
void continue_samples(const std::vector<GenerationRequest>& requests, const std::vector<size_t>& started,
                      RoundProgress& progress, int64_t G, std::vector<GenerationRequest>& call, std::vector<CallEntry>& entries) {
  const auto n = static_cast<size_t>(G);
  if (progress.samples.empty()) progress.samples.resize(requests.size() * n);
  RLCPP_CHECK(progress.samples.size() == requests.size() * n, "a round's progress holds {} samples, its prompts {}",
              progress.samples.size(), requests.size() * n);
  for (size_t k = 0; k < progress.samples.size(); ++k) {  // (request, sample) of the round, not of a call
    progress.samples[k].sample.out.request = static_cast<int64_t>(k / n);
    progress.samples[k].sample.out.sample = static_cast<int64_t>(k % n);
  }
  for (size_t r : started) {
    bool any_token = false, all_done = true;
    for (size_t s = 0; s < n; ++s) {
      const auto& piece = progress.samples[r * n + s];
      any_token = any_token || !piece.sample.out.token_ids.empty();
      all_done = all_done && piece.done;
    }
    if (all_done) continue;
    if (!any_token) {
      call.push_back(requests[r]);
      entries.push_back({&progress, &requests, r * n});
      continue;
    }
    for (size_t s = 0; s < n; ++s) {
      const auto& piece = progress.samples[r * n + s];
      if (piece.done) continue;
      call.push_back(piece.sample.continuation(requests[r], requests[r].params.max_new_tokens));
      entries.push_back({&progress, &requests, r * n + s});
    }
  }
}

}  // namespace

void RolloutGenerator::generate_samples(const std::vector<GenerationRequest>& requests, const std::vector<size_t>& order,
                                        RoundProgress& progress) {
  const size_t per_call = c_.rollout.inference_microbatch_size > 0 ? static_cast<size_t>(c_.rollout.inference_microbatch_size) : order.size();
  const int64_t G = c_.rollout.num_generations;
  // The next round's prompts streamed beside this one's, every one begun.
  std::vector<GenerationRequest> streamed;
  std::vector<size_t> streamed_all;
  if (streamed_) {
    for (const auto& pick : streamed_->picks) streamed.push_back(request_of(pick));
    streamed_all.resize(streamed.size());
    std::iota(streamed_all.begin(), streamed_all.end(), 0);
    streamed_->progress.calls_started = 1;
  }
  for (;;) {
    std::vector<GenerationRequest> call;
    std::vector<CallEntry> entries;
    // Samples a cut left unfinished go on first.
    const size_t started = std::min(order.size(), static_cast<size_t>(progress.calls_started) * per_call);
    continue_samples(requests, std::vector<size_t>(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(started)),
                     progress, G, call, entries);
    if (call.empty()) {  // the next call of -imbs prompts
      if (started == order.size()) break;
      const std::vector<size_t> next(order.begin() + static_cast<std::ptrdiff_t>(started),
                                     order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), started + per_call)));
      ++progress.calls_started;
      continue_samples(requests, next, progress, G, call, entries);
    }
    const size_t own = call.size();
    if (streamed_) continue_samples(streamed, streamed_all, streamed_->progress, G, call, entries);
    auto results = own < call.size() ? backend_->generate_until(call, EarlyStop::first(own, call.size())) : backend_->generate(call);
    const bool cut = backend_->cut();
    for (auto& result : results) {
      const CallEntry& entry = entries[static_cast<size_t>(result.request)];
      const size_t k = entry.first + static_cast<size_t>(result.sample);
      auto& piece = entry.progress->samples[k];
      // Unfinished: cut at a checkpoint, or streamed and stopped with this round.
      piece.done = result.finish_reason != FinishReason::kAbort || (!cut && entry.progress == &progress);
      piece.sample.append(std::move(result));
      // A stop string across the pieces ends the sample there (its text whole, not piece by piece).
      if (piece.sample.pieces > 1 &&
          settle_stop_strings(piece.sample.out, tokenizer_, (*entry.requests)[k / static_cast<size_t>(G)].params.stop_strings)) {
        piece.done = true;
      }
    }
    if (cut && cut_hook_) cut_hook_(progress);
  }
}

namespace {

// A pick as its episodes' prompt.
EpisodePrompt episode_prompt(const PromptPick& pick) {
  nlohmann::json record = pick.metadata.is_object() ? pick.metadata : nlohmann::json::object();
  record["messages"] = pick.messages;
  record["gt_answer"] = pick.gt_answer;
  return {nlohmann::ordered_json(pick.messages), pick.text, pick.ids, pick.truncated, record, pick.id, pick.seed};
}

}  // namespace

RolloutGenerator::Rolled RolloutGenerator::rolled_of(const GenerationRequest& request, RoundProgress::Piece& piece) const {
  return agent_ != nullptr ? Rolled::of(piece) : Rolled::of(request, piece.sample.out);
}

void RolloutGenerator::generate_episodes(const std::vector<PromptPick>& picks, const std::vector<size_t>& order,
                                         RoundProgress& progress) {
  const size_t per_call = c_.rollout.inference_microbatch_size > 0 ? static_cast<size_t>(c_.rollout.inference_microbatch_size) : order.size();
  const auto G = static_cast<size_t>(c_.rollout.num_generations);
  if (progress.samples.empty()) progress.samples.resize(picks.size() * G);
  RLCPP_CHECK(progress.samples.size() == picks.size() * G, "a round's progress holds {} episodes, its prompts {}",
              progress.samples.size(), picks.size() * G);
  RLCPP_CHECK(!streamed_ || per_call >= order.size(), "the next round's prompts streamed beside a round of several calls");
  for (size_t begin = 0, call = 0; begin < order.size(); begin += per_call, ++call) {
    const size_t end = std::min(order.size(), begin + per_call);
    std::vector<EpisodePrompt> prompts;
    std::vector<RoundProgress::Piece*> pieces;
    for (size_t k = begin; k < end; ++k) {
      prompts.push_back(episode_prompt(picks[order[k]]));
      for (size_t s = 0; s < G; ++s) pieces.push_back(&progress.samples[order[k] * G + s]);
    }
    if (std::all_of(pieces.begin(), pieces.end(), [](const RoundProgress::Piece* p) { return p->done; })) continue;
    progress.calls_started = std::max(progress.calls_started, static_cast<int64_t>(call) + 1);
    EarlyStop until;
    if (streamed_) {  // the next round's prompts, begun beside this round's: the call ends with this round's
      until = EarlyStop::first(prompts.size(), prompts.size() + streamed_->picks.size());
      StreamedPrompts& next = *streamed_;
      if (next.progress.samples.empty()) next.progress.samples.resize(next.picks.size() * G);
      next.progress.calls_started = 1;
      for (size_t r = 0; r < next.picks.size(); ++r) {
        prompts.push_back(episode_prompt(next.picks[r]));
        for (size_t s = 0; s < G; ++s) pieces.push_back(&next.progress.samples.at(r * G + s));
      }
    }
    run_episode_pieces(*backend_, *agent_, prompts, sampling_, c_.rollout.num_generations, pieces, [&] {
      if (cut_hook_) cut_hook_(progress);
    }, until);
  }
}

RolloutRound RolloutGenerator::generate_pool(StreamedPrompts& pool, int64_t n) {
  RLCPP_CHECK(backend_ != nullptr && reward_ != nullptr, "a pool of prompts without a rollout backend");
  const auto G = static_cast<size_t>(c_.rollout.num_generations);
  std::vector<GenerationRequest> requests;
  for (const auto& pick : pool.picks) requests.push_back(request_of(pick));
  RoundProgress& progress = pool.progress;
  std::vector<size_t> all(requests.size());
  std::iota(all.begin(), all.end(), 0);
  auto complete = [&](size_t r) {
    return std::all_of(progress.samples.begin() + static_cast<std::ptrdiff_t>(r * G),
                       progress.samples.begin() + static_cast<std::ptrdiff_t>((r + 1) * G),
                       [](const RoundProgress::Piece& p) { return p.done; });
  };
  auto n_complete = [&] {
    int64_t done = 0;
    for (size_t r = 0; r < requests.size(); ++r) done += complete(r) ? 1 : 0;
    return done;
  };
  n = std::min(n, static_cast<int64_t>(requests.size()));
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<trace::Span> span(std::in_place, "generate");
  progress.calls_started = 1;  // one call, gone on from where a cut left it
  if (agent_ != nullptr) {
    if (progress.samples.empty()) progress.samples.resize(requests.size() * G);
    std::vector<EpisodePrompt> prompts;
    std::vector<RoundProgress::Piece*> pieces;
    EarlyStop until;  // once n of the pool's groups have every episode ended
    for (size_t r = 0; r < requests.size(); ++r) {
      prompts.push_back(episode_prompt(pool.picks[r]));
      for (size_t s = 0; s < G; ++s) pieces.push_back(&progress.samples.at(r * G + s));
      until.group_of.push_back(static_cast<int64_t>(r));
    }
    until.groups = n;
    run_episode_pieces(*backend_, *agent_, prompts, sampling_, c_.rollout.num_generations, pieces, [&] {
      if (cut_hook_) cut_hook_(progress);
    }, until);
  }
  while (agent_ == nullptr) {
    std::vector<GenerationRequest> call;
    std::vector<CallEntry> entries;
    continue_samples(requests, all, progress, c_.rollout.num_generations, call, entries);
    const int64_t done = n_complete();
    if (done >= n || call.empty()) break;
    EarlyStop stop;  // the call ends once enough groups are complete
    for (const auto& entry : entries) stop.group_of.push_back(static_cast<int64_t>(entry.first / G));
    stop.groups = n - done;
    auto results = backend_->generate_until(call, stop);
    for (auto& result : results) {
      const CallEntry& entry = entries[static_cast<size_t>(result.request)];
      const size_t k = entry.first + static_cast<size_t>(result.sample);
      auto& piece = progress.samples[k];
      piece.done = result.finish_reason != FinishReason::kAbort;  // else ended early or cut: it goes on
      piece.sample.append(std::move(result));
      if (piece.sample.pieces > 1 && settle_stop_strings(piece.sample.out, tokenizer_, requests[k / G].params.stop_strings)) {
        piece.done = true;
      }
    }
    if (backend_->cut() && cut_hook_) cut_hook_(progress);
  }
  // The first n complete groups in the pool's order (the oldest prompts) are the round's.
  std::vector<PromptPick> picks;
  std::vector<std::vector<Rolled>> by_request;
  StreamedPrompts rest;
  for (size_t r = 0; r < requests.size(); ++r) {
    if (static_cast<int64_t>(picks.size()) < n && complete(r)) {
      picks.push_back(std::move(pool.picks[r]));
      auto& rolled = by_request.emplace_back();
      for (size_t k = r * G; k < (r + 1) * G; ++k) rolled.push_back(rolled_of(requests[r], progress.samples[k]));
      continue;
    }
    rest.picks.push_back(std::move(pool.picks[r]));
    for (size_t k = r * G; k < (r + 1) * G; ++k) rest.progress.samples.push_back(std::move(progress.samples[k]));
  }
  rest.progress.calls_started = rest.picks.empty() ? 0 : 1;
  pool = std::move(rest);
  span.reset();
  return graded_round(picks, by_request, seconds_since(t0));
}

RolloutRound RolloutGenerator::generate(const std::vector<PromptPick>& picks, RoundProgress progress) {
  RLCPP_CHECK(backend_ != nullptr && reward_ != nullptr, "generating without a rollout backend");
  std::vector<GenerationRequest> requests;
  for (const auto& pick : picks) requests.push_back(request_of(pick));
  // Generation, in calls of inference_microbatch_size prompts; ranking sorts them by length first.
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  if (c_.rollout.ranking) {
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return requests[a].prompt_ids.size() < requests[b].prompt_ids.size(); });
  }
  const auto G = static_cast<size_t>(c_.rollout.num_generations);
  std::vector<std::vector<Rolled>> by_request(requests.size(), std::vector<Rolled>(G));
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<trace::Span> span(std::in_place, "generate");
  if (agent_ != nullptr) {
    generate_episodes(picks, order, progress);
  } else {
    generate_samples(requests, order, progress);
  }
  for (size_t k = 0; k < progress.samples.size(); ++k) by_request[k / G][k % G] = rolled_of(requests[k / G], progress.samples[k]);
  span.reset();
  return graded_round(picks, by_request, seconds_since(t0));
}

RolloutRound RolloutGenerator::graded_round(const std::vector<PromptPick>& picks, std::vector<std::vector<Rolled>>& by_request,
                                            double generate_seconds) {
  RolloutRound round;
  round.generate_seconds = generate_seconds;
  const int64_t G = c_.rollout.num_generations;
  std::vector<SampleGroup> groups;
  for (const auto& pick : picks) {
    SampleGroup group;
    group.id = pick.id;
    group.prompt = pick.text;
    group.gt_answer = pick.gt_answer;
    group.line = pick.line;
    groups.push_back(std::move(group));
  }
  trace::Span span("reward");
  // Rewards (with DAPO's over-length shaping), advantages over the round, the group filter.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<RewardInput> inputs;
  for (size_t r = 0; r < picks.size(); ++r) {
    for (const auto& s : by_request[r]) {
      inputs.push_back({groups[r].prompt, s.graded, groups[r].gt_answer, picks[r].metadata, s.truncated, picks[r].messages});
    }
  }
  const auto graded = [&] {
    if (!grading_hook_) return reward_->score(inputs);
    auto scoring = std::async(std::launch::async, [&] { return reward_->score(inputs); });
    while (scoring.wait_for(std::chrono::milliseconds(2)) != std::future_status::ready) grading_hook_();
    return scoring.get();
  }();
  round.reward_seconds = seconds_since(t0);
  const bool env_only = c_.reward.type == RewardType::kEnv;
  const bool env_rewards = env_only || c_.episode.env_reward_add;
  std::vector<double> rewards(graded.size());
  std::vector<int64_t> correct(graded.size());  // int64: the group filter's tensor
  const int64_t cache = c_.algo.overlong_cache > 0 ? c_.algo.overlong_cache : default_overlong_cache(sampling_.max_new_tokens);
  for (size_t k = 0; k < graded.size(); ++k) {
    const auto& s = by_request[k / static_cast<size_t>(G)][k % static_cast<size_t>(G)];
    rewards[k] = graded[k].reward + (env_rewards ? s.env_reward : 0.0);
    if (c_.algo.overlong_shaping) {
      rewards[k] += overlong_penalty(static_cast<int64_t>(s.generated.token_ids.size()), sampling_.max_new_tokens, cache,
                                     c_.reward.scale.correct);
    }
    correct[k] = env_only ? s.env_reward > 0 : graded[k].correct;
  }
  const auto advantages = compute_advantages(torch::tensor(rewards, torch::kFloat64), G, c_.algo.advantage);
  const auto* adv = advantages.data_ptr<double>();
  torch::Tensor keep;
  if (c_.algo.filter_range) {
    keep = filter_groups_by_accuracy(torch::tensor(correct).to(torch::kBool), G, c_.algo.filter_range->first,
                                     c_.algo.filter_range->second);
  }
  for (size_t r = 0; r < picks.size(); ++r) {
    SampleGroup& g = groups[r];
    for (int64_t s = 0; s < G; ++s) {
      const size_t k = r * static_cast<size_t>(G) + static_cast<size_t>(s);
      Rolled& rolled = by_request[r][static_cast<size_t>(s)];
      Sample sample = trajectory_sample(rolled, adv[k]);
      sample.response = std::move(rolled.generated.text);
      sample.reward = rewards[k];
      sample.reward_parts = graded[k].parts;
      if (env_rewards) sample.reward_parts["env"] = rolled.env_reward;
      sample.reward_reason = graded[k].reason;
      sample.correct = correct[k] != 0;
      sample.group_id = g.id;
      sample.episode = std::move(rolled.episode);
      check_sample(sample, fmt::format("a rollout of dataset line {}", g.line));
      g.samples.push_back(std::move(sample));
    }
    const bool kept = !keep.defined() || keep[static_cast<int64_t>(r)].item<bool>();
    (kept ? round.kept : round.discarded).push_back(std::move(g));
  }
  return round;
}

}  // namespace rlcpp
