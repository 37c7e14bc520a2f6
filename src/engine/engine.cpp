#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <map>
#include <optional>

#include "engine/model_runner.h"
#include "engine/requests.h"
#include "model/kernel_linear.h"  // eight_bit
#include "model/logprobs.h"
#include "engine/sampler.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/progress.h"
#include "util/threads.h"

namespace rlcpp {

namespace {

// A number that changes whenever any weight of `model` is written in place (an optimizer step, a
// load, a weight sync): the sum of the tensors' version counters, adapters included.
int64_t weights_signature(const Transformer& model) {
  int64_t sum = 0;
  for (const auto& p : model.parameters()) sum += static_cast<int64_t>(p._version());
  if (model.has_adapters()) {
    for (const auto& p : model.trainable_parameters()) sum += static_cast<int64_t>(p._version());
  }
  return sum;
}

}  // namespace

Engine::Engine(std::shared_ptr<Transformer> model, EngineConfig config, std::shared_ptr<const Tokenizer> tokenizer)
    : model_(std::move(model)), config_(config), tokenizer_(std::move(tokenizer)) {
  const auto& mc = model_->config();
  const ModelOptions& source = model_->options();
  const auto stored = config_.weights_dtype;
  auto floating = [](torch::ScalarType t) {
    return t == torch::ScalarType::Undefined || t == torch::kFloat32 || t == torch::kBFloat16 || t == torch::kFloat16;
  };
  if (!floating(stored) && !eight_bit(stored)) {
    throw_user_error("--rollout-dtype {}: the engine's weights may be {}", rollout_dtypes().name(stored),
                     rollout_dtypes().names(", "));
  }
  if (!floating(config_.kv_dtype)) {
    throw_user_error("--kv-cache-dtype {}: the engine's KV cache may be float32, bfloat16 or float16",
                     dtypes().name(config_.kv_dtype));
  }
  if (stored != torch::ScalarType::Undefined && stored != source.dtype) {
    ModelOptions options;
    options.device = source.device;
    options.tp_group = source.tp_group;  // the copy holds the same part as the model
    options.stage = source.stage;
    const bool half = stored == torch::kBFloat16 || stored == torch::kFloat16;
    if ((half || eight_bit(stored)) && source.device.is_cpu()) {
      options.dtype = torch::kFloat32;  // stored half or 8-bit, computed in fp32 by the kernels
      options.frozen_dtype = stored;
    } else if (eight_bit(stored)) {
      // Stored in 8 bits with row scales (refresh_copy quantizes); on other devices each product
      // dequantizes its weight into the model's dtype.
      options.dtype = source.dtype;
      options.frozen_dtype = stored;
    } else {
      options.dtype = stored;
    }
    copy_ = std::make_shared<Transformer>(mc, options);
    copy_->eval();
    for (auto& p : copy_->parameters()) p.set_requires_grad(false);
  }
  const PipelineStage& stage = source.stage;
  const bool staged = config_.group != nullptr || config_.pipeline != nullptr;
  RLCPP_CHECK(stage.whole() != staged && (!staged || (config_.group && config_.pipeline && config_.pipeline->size() == stage.count &&
                                                      config_.pipeline->rank() == stage.index)),
              "an engine over pipeline stage {} of {} needs its group and its pipeline group (of that many ranks)",
              stage.index, stage.count);
  const auto dtype = config_.kv_dtype != torch::ScalarType::Undefined ? config_.kv_dtype : generating_model().options().dtype;
  int64_t n_blocks = config_.n_blocks;
  // Every rank of the group has the same blocks (the first rank's scheduler hands them out), sized
  // for the rank keeping the most KV heads, and for the whole model's layers: a pipeline stage's
  // cache keeps its own layers' part of them.
  if (n_blocks <= 0) {
    n_blocks = KvCache::blocks_for_bytes(mc, model_->max_kv_heads(), config_.block_size, dtype, config_.kv_cache_mb << 20);
  }
  if (n_blocks < 1) throw_user_error("--kv-cache-mb {}: too small for one KV block of this model", config_.kv_cache_mb);
  if (config_.scheduler.max_num_batched_tokens < 1 || config_.scheduler.max_num_seqs < 1) {
    throw_user_error("--max-num-batched-tokens {} and --max-num-seqs {}: both must be at least 1",
                     config_.scheduler.max_num_batched_tokens, config_.scheduler.max_num_seqs);
  }
  ModelConfig cached = mc;
  cached.num_hidden_layers = (stage.layer_end < 0 ? mc.num_hidden_layers : stage.layer_end) - stage.layer_begin;
  cache_ = std::make_unique<KvCache>(cached, model_->kv_heads(), n_blocks, config_.block_size, dtype, source.device);
}

void Engine::refresh_copy() {
  if (!copy_) return;
  const int64_t signature = weights_signature(*model_);
  if (signature == copied_signature_ && context_.adapters == copied_adapters_) return;
  torch::NoGradGuard no_grad;
  auto copy_in = [&](const std::string& name, const torch::Tensor& w) { copy_->write_weight(name, w); };
  if (context_.adapters) {
    model_->for_each_merged_weight(copy_in);
  } else {
    for (const auto& [name, w] : model_->named_weights()) copy_in(name, w);
  }
  copied_signature_ = signature;
  copied_adapters_ = context_.adapters;
}

Engine::~Engine() = default;

namespace {

// The messages of a tensor-parallel group's first rank to the others while they serve.
enum class StepOp : char { kStep = 's', kRelease = 'r', kTell = 't' };

}  // namespace

Communicator* Engine::group() const {
  if (config_.group != nullptr) return config_.group.get();
  const auto* tp = model_->tensor_parallel();
  return tp != nullptr ? &tp->group() : nullptr;
}

bool Engine::leads() const { return group() == nullptr || group()->rank() == 0; }

void Engine::release_followers() {
  if (group() == nullptr) return;
  RLCPP_CHECK(leads(), "release_followers on a follower of the engine's group");
  std::string bytes(1, static_cast<char>(StepOp::kRelease));
  group()->broadcast_bytes(bytes, 0);
}

void Engine::tell_followers(const std::string& message) {
  if (group() == nullptr) return;
  RLCPP_CHECK(leads(), "tell_followers on a follower of the engine's group");
  std::string bytes = static_cast<char>(StepOp::kTell) + message;
  group()->broadcast_bytes(bytes, 0);
}

void Engine::serve() {
  RLCPP_CHECK(!leads(), "serve on the first rank of the engine's group (it generates)");
  for (;;) {
    std::string bytes;
    group()->broadcast_bytes(bytes, 0);
    RLCPP_CHECK(!bytes.empty(), "an empty message from the engine group's first rank");
    if (bytes[0] == static_cast<char>(StepOp::kRelease)) return;
    if (bytes[0] == static_cast<char>(StepOp::kTell)) {
      RLCPP_CHECK(follower_hook_ != nullptr, "a message for the follower hook of an engine rank without one");
      follower_hook_(bytes.substr(1));
      continue;
    }
    RLCPP_CHECK(bytes[0] == static_cast<char>(StepOp::kStep), "unknown engine message {}", static_cast<int>(bytes[0]));
    refresh_copy();
    const StepInputs inputs = decode_step(bytes.substr(1));
    StepBufferScope step_buffers;
    ModelRunner runner(generating_model(), *cache_, context_, config_.pipeline.get());
    auto logits = runner.run(inputs);
    sample_step(logits, inputs);
  }
}

SampleResult Engine::sample_step(const torch::Tensor& logits, const StepInputs& inputs) {
  if (inputs.sample_rows.empty()) return {};
  std::vector<const SamplingParams*> params;
  for (const auto& p : inputs.params) params.push_back(&p);
  auto rows = torch::tensor(inputs.sample_rows, torch::kInt64).to(logits.device());
  return sample_tokens(logits.index_select(0, rows), params, inputs.u, generating_model().vocab_shard());
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

GenerationLoop::GenerationLoop(Engine& engine)
    : engine_(engine),
      start_(std::chrono::steady_clock::now()),
      scheduler_(engine.config_.scheduler,
                 engine.cache_->n_blocks(), engine.cache_->block_size()) {
  RLCPP_CHECK(engine_.leads(), "generating on a follower of the engine's group (it serves)");
  engine_.refresh_copy();
  runner_ = std::make_unique<ModelRunner>(engine_.generating_model(), *engine_.cache_, engine_.context_,
                                          engine_.config_.pipeline.get());
  stats_.kv_cache_bytes = engine_.cache_->bytes();
}

GenerationLoop::~GenerationLoop() = default;

int64_t GenerationLoop::add(const GenerationRequest& given, bool hold_turns) {
  const int64_t id = next_request_++;
  const auto& config = engine_.model_->config();
  validate_request(given, static_cast<size_t>(id), config.vocab_size);
  auto request = std::make_unique<GenerationRequest>(fit_request(given, static_cast<size_t>(id), config.max_position_embeddings));
  const int64_t first = scheduler_.n_sequences();
  scheduler_.add_request(id, request->prompt_ids, request->params, request->n, request->seed);
  for (int64_t s = 0; s < request->n; ++s) sequences_[{id, s}] = first + s;
  stats_.n_prompt_tokens += static_cast<int64_t>(request->prompt_ids.size());
  requests_[id] = std::move(request);
  if (hold_turns) held_[id] = true;
  return id;
}

void GenerationLoop::resume(int64_t request, int64_t sample, const std::vector<int32_t>& inserted, int64_t turn_limit) {
  const int64_t id = sequences_.at({request, sample});
  for (int32_t t : inserted) {
    RLCPP_CHECK(t >= 0 && t < engine_.model_->config().vocab_size, "inserted token {} is outside the vocabulary", t);
  }
  scheduler_.resume(id, inserted, turn_limit);
  cut_text_.erase(id);
}

void GenerationLoop::release(int64_t request, int64_t sample) {
  const int64_t id = sequences_.at({request, sample});
  Sequence& s = scheduler_.sequence(id);
  RLCPP_CHECK(s.status == SeqStatus::kPaused, "releasing sample {} of request {} that is not paused", sample, request);
  scheduler_.finish(id, s.finish_reason);
}

std::vector<int32_t> GenerationLoop::turn_tokens(int64_t request, int64_t sample) const {
  const Sequence& s = scheduler_.sequence(sequences_.at({request, sample}));
  return {s.tokens.begin() + s.turn_start, s.tokens.end()};
}

int64_t GenerationLoop::response_tokens(int64_t request, int64_t sample) const {
  return scheduler_.sequence(sequences_.at({request, sample})).n_response();
}

int64_t GenerationLoop::n_paused() const { return scheduler_.n_paused(); }

void GenerationLoop::set_turn_limit(int64_t request, int64_t sample, int64_t turn_limit) {
  scheduler_.sequence(sequences_.at({request, sample})).turn_limit = turn_limit;
}

void GenerationLoop::set_finish_reason(int64_t request, int64_t sample, FinishReason reason) {
  scheduler_.sequence(sequences_.at({request, sample})).finish_reason = reason;
}

void GenerationLoop::cancel(int64_t request) { scheduler_.cancel_request(request); }

std::vector<StepToken> GenerationLoop::step() {
  std::vector<StepToken> out;
  if (scheduler_.done()) return out;
  if (engine_.step_hook_) {  // partial rollouts: new weights may arrive here
    const int64_t before = engine_.version_;
    engine_.step_hook_();
    if (engine_.version_ != before) {
      engine_.refresh_copy();
      if (engine_.recompute_on_switch_) scheduler_.drop_cache();
    }
    if (engine_.cut_) return out;  // the caller ends the call here
  }
  ScheduledBatch batch = scheduler_.schedule();
  const auto step_start = std::chrono::steady_clock::now();
  const CpuAllocationCounts allocations_before = cpu_allocation_counts();
  const int64_t faults_before = minor_page_faults();
  StepBufferScope step_buffers;  // steady-state steps reuse the buffers earlier steps freed
  RLCPP_CHECK(!batch.work.empty(), "scheduler made no progress with work left ({})", scheduler_.check_blocks());
  if (!batch.prefill) failpoint("decode");
  const StepInputs inputs = step_inputs(batch, scheduler_);  // each sampler draws its number
  if (Communicator* followers = engine_.group()) {  // the group runs the same step
    std::string bytes = static_cast<char>(StepOp::kStep) + encode_step(inputs);
    followers->broadcast_bytes(bytes, 0);
  }
  auto logits = runner_->run(inputs);
  scheduler_.complete(batch);
  // One logits row per sampling work item, sampled once per sampler (a group's fresh samples
  // share a row).
  std::vector<int64_t> seqs;
  for (const auto& work : batch.work) seqs.insert(seqs.end(), work.samplers.begin(), work.samplers.end());
  SampleResult sampled = engine_.sample_step(logits, inputs);
  const double now = seconds_since(start_);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t id = seqs[i];
    auto [last, fresh] = last_token_at_.try_emplace(id, now);
    if (!fresh) stats_.max_inter_token_seconds = std::max(stats_.max_inter_token_seconds, now - last->second);
    last->second = now;
    Sequence& sampling = scheduler_.sequence(id);
    if (sampling.versions.empty() || sampling.versions.back().version != engine_.version_) {
      sampling.versions.push_back({sampling.n_response(), engine_.version_});
    }
    scheduler_.append(id, sampled.tokens[i], sampled.logprobs[i], std::move(sampled.top[i]));
    ++stats_.n_generated_tokens;
    const Sequence& s = scheduler_.sequence(id);
    StepToken token{s.request, s.sample, sampled.tokens[i], sampled.logprobs[i], s.top_logprobs.empty() ? std::vector<TokenLogprob>{} : s.top_logprobs.back(), false, false, FinishReason::kLength};
    if (check_stop(s, engine_.tokenizer_.get(), &cut_text_[id], &token.reason)) {
      if (held_.count(s.request) != 0 && token.reason != FinishReason::kAbort) {
        scheduler_.pause(id, token.reason);
        token.turn_ended = true;
      } else {
        scheduler_.finish(id, token.reason);
        token.finished = true;
      }
    }
    out.push_back(std::move(token));
  }
  const double step_seconds = seconds_since(step_start);
  (batch.prefill ? stats_.prefill_seconds : stats_.decode_seconds) += step_seconds;
  if (!batch.prefill) {
    const CpuAllocationCounts allocations_after = cpu_allocation_counts();
    stats_.n_decode_tokens += static_cast<int64_t>(seqs.size());
    ++stats_.n_decode_steps;
    stats_.decode_buffer_allocations += allocations_after.allocations - allocations_before.allocations;
    stats_.decode_fresh_allocations += allocations_after.fresh - allocations_before.fresh;
    stats_.decode_page_faults += minor_page_faults() - faults_before;
  }
  stats_.scheduler = scheduler_.stats();
  stats_.seconds = seconds_since(start_);
  return out;
}

bool GenerationLoop::idle() const { return scheduler_.done(); }

int64_t GenerationLoop::n_unfinished() const { return scheduler_.n_unfinished(); }

int64_t GenerationLoop::kv_blocks_used() const { return scheduler_.blocks().n_blocks() - scheduler_.blocks().n_free(); }

int64_t GenerationLoop::kv_blocks() const { return scheduler_.blocks().n_blocks(); }

bool GenerationLoop::finished(int64_t request) const {
  const auto& r = *requests_.at(request);
  for (int64_t s = 0; s < r.n; ++s) {
    if (scheduler_.sequence(sequences_.at({request, s})).status != SeqStatus::kFinished) return false;
  }
  return true;
}

std::vector<GeneratedSample> GenerationLoop::take(int64_t request) {
  RLCPP_CHECK(finished(request), "taking request {} before it finished", request);
  std::vector<GeneratedSample> out;
  const int64_t n = requests_.at(request)->n;
  for (int64_t s = 0; s < n; ++s) {
    const int64_t id = sequences_.at({request, s});
    out.push_back(to_sample(scheduler_.sequence(id), engine_.tokenizer_.get(), engine_.version_, cut_text_[id]));
    scheduler_.forget(id);
    sequences_.erase({request, s});
    cut_text_.erase(id);
    last_token_at_.erase(id);
  }
  requests_.erase(request);
  held_.erase(request);
  return out;
}

GeneratedSample GenerationLoop::peek(int64_t request, int64_t sample) const {
  const int64_t id = sequences_.at({request, sample});
  const Sequence& s = scheduler_.sequence(id);
  RLCPP_CHECK(s.status == SeqStatus::kFinished, "peeking at sample {} of request {} before it finished", sample, request);
  const auto cut = cut_text_.find(id);
  return to_sample(s, engine_.tokenizer_.get(), engine_.version_, cut == cut_text_.end() ? std::nullopt : cut->second);
}

std::string GenerationLoop::check_blocks() const { return scheduler_.check_blocks(); }

namespace {

// The groups an EarlyStop names, counted as their requests (the loop's `ids`) finish.
class FinishedGroups {
 public:
  FinishedGroups(const EarlyStop& stop, std::vector<int64_t> ids) : stop_(stop), ids_(std::move(ids)), counted_(ids_.size(), false) {
    RLCPP_CHECK(stop.group_of.empty() || stop.group_of.size() == ids_.size(),
                "an early stop naming groups of {} requests for {}", stop.group_of.size(), ids_.size());
    for (const int64_t g : stop.group_of) {
      if (g >= 0) ++open_[g];
    }
    enough_ = std::min(stop.groups, static_cast<int64_t>(open_.size()));  // 0: every request whole
  }
  // Whether the groups asked for have finished (never, when none are).
  bool reached(const GenerationLoop& loop) {
    if (enough_ <= 0) return false;
    for (size_t r = 0; r < ids_.size(); ++r) {
      const int64_t g = stop_.group_of[r];
      if (g < 0 || counted_[r] || !loop.finished(ids_[r])) continue;
      counted_[r] = true;
      if (--open_[g] == 0) ++done_;
    }
    return done_ >= enough_;
  }

 private:
  const EarlyStop& stop_;
  std::vector<int64_t> ids_;
  std::vector<bool> counted_;
  std::map<int64_t, int64_t> open_;  // each group's requests not yet finished
  int64_t enough_ = 0, done_ = 0;
};

}  // namespace

std::vector<GeneratedSample> Engine::generate_until(const std::vector<GenerationRequest>& requests, const EarlyStop& stop) {
  GenerationLoop loop(*this);
  std::vector<int64_t> ids;
  for (const auto& r : requests) ids.push_back(loop.add(r));  // each checked (a UserError) before any step runs
  int64_t n_sequences = 0;
  for (const auto& r : requests) n_sequences += r.n;
  FinishedGroups groups(stop, ids);
  cut_ = last_cut_ = false;
  while (!loop.idle()) {
    loop.step();
    if (cut_) {  // the step hook cut the call: what is unfinished ends here, with its tokens
      for (int64_t id : ids) loop.cancel(id);
      cut_ = false;
      last_cut_ = true;
      break;
    }
    if (groups.reached(loop)) {  // the others end here, with their tokens
      for (int64_t id : ids) loop.cancel(id);
      break;
    }
    progress::phase("generate", n_sequences - loop.n_unfinished(), n_sequences,
                    fmt::format("seqs {:.0f} tok/s", static_cast<double>(loop.stats().n_generated_tokens) /
                                                         std::max(loop.stats().seconds, 1e-9)));
  }
  progress::end_phase();
  RLCPP_CHECK(loop.check_blocks().empty(), "block accounting after generate: {}", loop.check_blocks());
  std::vector<GeneratedSample> out;
  for (int64_t id : ids) {
    for (auto& s : loop.take(id)) out.push_back(std::move(s));
  }
  stats_ = loop.stats();
  return out;
}

std::vector<GeneratedSample> Engine::generate_turns(const std::vector<GenerationRequest>& requests, TurnHandler& handler,
                                                    const EarlyStop& stop) {
  GenerationLoop loop(*this);
  std::vector<int64_t> ids;
  std::vector<SamplingParams> params;  // as the loop runs them: a response capped to the model's positions
  for (const auto& r : requests) {
    params.push_back(fit_request(r, ids.size(), model_->config().max_position_embeddings).params);
    ids.push_back(loop.add(r, /*hold_turns=*/true));
  }
  for (size_t r = 0; r < requests.size(); ++r) {
    const int64_t first_limit = handler.first_turn_limit(static_cast<int64_t>(r));
    for (int64_t s = 0; s < requests[r].n && first_limit > 0; ++s) loop.set_turn_limit(ids[r], s, first_limit);
  }
  const int64_t lag = std::max<int64_t>(handler.resume_lag(), 1);
  struct Waiting {
    int64_t request, sample, due;
    std::shared_future<TurnOutcome> answer;
  };
  std::deque<Waiting> waiting;  // in the order the turns ended (their due steps never decrease)
  int64_t n_sequences = 0;
  for (const auto& r : requests) n_sequences += r.n;
  // The oldest turn's answer: its inserted tokens added and the trajectory going on, or it ends.
  auto answer_one = [&] {
    Waiting w = std::move(waiting.front());
    waiting.pop_front();
    const TurnOutcome& outcome = w.answer.get();
    if (outcome.go_on && room_for(loop.response_tokens(w.request, w.sample), outcome.inserted,
                                  params[static_cast<size_t>(w.request)])) {
      loop.resume(w.request, w.sample, outcome.inserted, outcome.turn_limit);
    } else {
      if (outcome.go_on) loop.set_finish_reason(w.request, w.sample, FinishReason::kLength);
      loop.release(w.request, w.sample);
    }
  };
  FinishedGroups groups(stop, ids);
  int64_t steps = 0;
  cut_ = last_cut_ = false;
  // The step hook cut the call, or the groups asked for have ended: every turn's answer is awaited
  // and added now (as if due), and what is unfinished ends here with its tokens
  // (FinishReason::kAbort), to be continued.
  auto end_call = [&](bool cut) {
    while (!waiting.empty()) answer_one();
    for (int64_t id : ids) loop.cancel(id);
    cut_ = false;
    last_cut_ = cut;
  };
  for (;;) {
    if (cut_) {
      end_call(true);
      break;
    }
    if (loop.idle()) {
      if (waiting.empty()) break;
      steps = std::max(steps, waiting.front().due);  // nothing else to run until the next answer is due
    }
    while (!waiting.empty() && waiting.front().due <= steps) answer_one();
    if (groups.reached(loop)) {  // (an answer may end a group's last trajectory)
      end_call(false);
      break;
    }
    if (loop.idle()) continue;  // every trajectory paused: the next answer is due later
    for (const StepToken& token : loop.step()) {
      if (!token.turn_ended) continue;
      const int64_t response = loop.response_tokens(token.request, token.sample);
      if (response >= params[static_cast<size_t>(token.request)].max_new_tokens) {
        loop.release(token.request, token.sample);
        continue;
      }
      waiting.push_back({token.request, token.sample, steps + lag,
                         handler.turn_ended({token.request, token.sample, loop.turn_tokens(token.request, token.sample),
                                             token.reason, response})});
    }
    ++steps;
    progress::phase("generate", n_sequences - loop.n_unfinished() - loop.n_paused(), n_sequences,
                    fmt::format("seqs {:.0f} tok/s", static_cast<double>(loop.stats().n_generated_tokens) /
                                                         std::max(loop.stats().seconds, 1e-9)));
  }
  progress::end_phase();
  RLCPP_CHECK(loop.check_blocks().empty(), "block accounting after generate_turns: {}", loop.check_blocks());
  std::vector<GeneratedSample> out;
  for (int64_t id : ids) {
    for (auto& s : loop.take(id)) out.push_back(std::move(s));
  }
  stats_ = loop.stats();
  return out;
}

std::vector<int32_t> default_stop_tokens(const ModelConfig& config, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids(config.eos_token_ids.begin(), config.eos_token_ids.end());
  if (auto eos = tokenizer.special_id(tokenizer.config().eos_token)) {
    if (std::find(ids.begin(), ids.end(), *eos) == ids.end()) ids.push_back(*eos);
  }
  return ids;
}

void Engine::load_weights(const NamedTensors& weights, int64_t version) {
  model_->load_weights(weights, fmt::format("weight update to version {}", version));
  version_ = version;
}

void Engine::update_weights(const NamedTensors& bucket) {
  model_->update_weights(bucket, fmt::format("weight update after version {}", version_));
}

}  // namespace rlcpp
