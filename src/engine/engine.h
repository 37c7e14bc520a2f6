// The generation engine: continuous batching over a paged KV cache with per-group prefix sharing,
// sampling with log-probs, stop tokens and stop strings, and versioned weight swaps.
//
// Over a tensor-parallel model (ModelOptions::tp_group) the engine runs on every rank of the
// group, each with its part of the weights and of the KV heads: the first rank generates (its
// scheduler decides each step and sends it to the others as StepInputs), the others serve those
// steps until it releases them; every rank runs the step's forward pass and the sampling over its
// part of the vocabulary together. Over pipeline stages (EngineConfig::group, pipeline) the same
// holds for every rank of every stage, each stage running its layers in turn with its own KV cache.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/rollout_backend.h"
#include "engine/sampling.h"
#include "engine/scheduler.h"
#include "io/safetensors.h"
#include "model/transformer.h"

namespace rlcpp {

class Tokenizer;
class GenerationLoop;
class ModelRunner;
struct StepInputs;
struct SampleResult;

struct EngineConfig {
  int64_t block_size = 16;          // tokens per KV block
  int64_t kv_cache_mb = 1024;       // KV cache budget (ignored when n_blocks > 0)
  int64_t n_blocks = 0;             // explicit block count (tests)
  SchedulerConfig scheduler;        // sequences at once, tokens per step, chunked prefill, prefix sharing
  // The weights generation runs on (--rollout-dtype). Undefined, or the model's dtype: the model's
  // own weights. Otherwise the engine's own copy stored in this dtype (adapters merged in; on the
  // CPU a half-precision copy is computed in fp32 by the kernels), refreshed from the model before
  // a generate whenever the model's weights changed since the last one.
  torch::ScalarType weights_dtype = torch::ScalarType::Undefined;
  torch::ScalarType kv_dtype = torch::ScalarType::Undefined;  // KV cache elements (--kv-cache-dtype; Undefined: compute dtype)
  // A model of one pipeline stage (ModelOptions::stage): `group` is every rank running the engine
  // (each stage's tensor-parallel ranks, in stage order; its first generates), `pipeline` this
  // rank's pipeline group (rank s: stage s). Each step's hidden states go stage to stage over it and
  // the last stage's logits come back to all, so every rank samples the same tokens. Null for a
  // whole model (the group is its tensor-parallel one).
  std::shared_ptr<Communicator> group, pipeline;
};

struct EngineStats {
  SchedulerStats scheduler;
  int64_t n_prompt_tokens = 0, n_generated_tokens = 0;
  double seconds = 0;
  double prefill_seconds = 0, decode_seconds = 0;  // model + sampling time of steps with and without prompt work
  int64_t n_decode_tokens = 0;                      // tokens sampled in decode-only steps
  // Decode-only steps, and over them: tensor buffers allocated, those that took new memory (not
  // one an earlier step freed: util/threads.h), and the process's minor page faults.
  int64_t n_decode_steps = 0, decode_buffer_allocations = 0, decode_fresh_allocations = 0, decode_page_faults = 0;
  double max_inter_token_seconds = 0;               // the longest wait of a sequence between two of its tokens
  int64_t kv_cache_bytes = 0;
};

class Engine : public RolloutBackend {
 public:
  // `tokenizer` is needed for stop strings and response text; it may be null.
  Engine(std::shared_ptr<Transformer> model, EngineConfig config, std::shared_ptr<const Tokenizer> tokenizer = nullptr);
  ~Engine() override;

  // Generates every request's n samples; results ordered by (request, sample). Under tensor
  // parallelism on the group's first rank only, while the others serve.
  std::vector<GeneratedSample> generate(const std::vector<GenerationRequest>& requests) override {
    return generate_until(requests, EarlyStop::first(requests.size(), requests.size()));
  }
  // Requests are admitted in order as free slots allow; the call ends at the engine step in which
  // the groups `stop` asks for have finished.
  std::vector<GeneratedSample> generate_until(const std::vector<GenerationRequest>& requests, const EarlyStop& stop) override;
  // Multi-turn: a sequence whose turn ended is paused with its KV blocks and, once its handler
  // answers, goes on from them (only the inserted tokens and the turn's last token are prefilled)
  // while the others keep decoding. Turns that ended in step k resume before step k + `lag`
  // (TurnHandler::resume_lag), waiting there for an answer still being computed: where sequences
  // resume never depends on how long a tool took, so a run is reproducible.
  // An early stop ends the call as a cut does (every ended turn answered first), at the engine
  // step in which the groups it asks for have every trajectory ended.
  using RolloutBackend::generate_turns;
  std::vector<GeneratedSample> generate_turns(const std::vector<GenerationRequest>& requests, TurnHandler& handler,
                                              const EarlyStop& stop) override;
  // Tensor parallelism: whether this rank generates (the group's first, or no group); on the
  // others, serve runs the first rank's steps, through any number of its generate calls, until it
  // calls release_followers (both collectives over the group, at points the caller agrees on).
  bool leads() const;
  void serve();
  void release_followers();
  // A message from the group's first rank to the others while they serve, between steps: each
  // hands it to its follower hook (partial rollouts: every rank takes new weights at the same step).
  void tell_followers(const std::string& message);
  void set_follower_hook(std::function<void(const std::string&)> hook) { follower_hook_ = std::move(hook); }
  bool has_followers() const { return group() != nullptr; }

  // Replaces the weights (cast to the model's dtype and device) and records the version every
  // later output carries. In the colocated mode the trainer updates the shared model in place and
  // only calls set_version.
  void load_weights(const NamedTensors& weights, int64_t version);
  // One bucket of a weight update (some of the weights); set_version once the last is in.
  void update_weights(const NamedTensors& bucket);
  void set_version(int64_t version) { version_ = version; }
  int64_t version() const { return version_; }
  // Partial rollouts: `hook` runs on the generating thread before every step of a generation with
  // work to do, and may take new weights there (update_weights, set_version) in the middle of the
  // sequences; each token records the version that sampled it (GeneratedSample::version_changes).
  // The sequences' cached keys and values are kept across a change, or with `recompute` dropped
  // and recomputed on the new weights. Null: none.
  void set_step_hook(std::function<void()> hook, bool recompute = false) {
    step_hook_ = std::move(hook);
    recompute_on_switch_ = recompute;
  }
  // Called from the step hook: the generate call stops before this step, every unfinished sample
  // ending with FinishReason::kAbort and the tokens it has (a checkpoint cuts a partial rollout's
  // round there; its samples go on as requests of their own). A generate_turns call first adds
  // every ended turn's answer (the trajectory then ends, or its next turn has not begun). Its
  // results then say cut().
  void cut_generation() { cut_ = true; }
  bool cut() const override { return last_cut_; }
  const EngineStats& last_stats() const { return stats_; }
  const EngineConfig& config() const { return config_; }
  // The model generation runs: the given one, or the engine's copy in weights_dtype.
  Transformer& generating_model() { return copy_ ? *copy_ : *model_; }
  // Generation with the model's adapters on (the default) or off: the base model alone (rlcpp
  // serve's requests for it). The engine holds this, not the model (a trainer may score the same
  // model meanwhile with its own context). A generation loop keeps the setting it started with:
  // a change applies to the loops started after it (rlcpp serve switches while idle).
  void set_adapters_enabled(bool on) { context_.adapters = on; }

 private:
  friend class GenerationLoop;
  // Copies the model's (merged) weights into copy_ when they changed since the last copy.
  void refresh_copy();
  // The tensor-parallel group, or nullptr.
  Communicator* group() const;
  // One step's tokens from its logits (every rank of a group takes part; all get the results).
  SampleResult sample_step(const torch::Tensor& logits, const StepInputs& inputs);

  std::shared_ptr<Transformer> model_;
  std::shared_ptr<Transformer> copy_;  // null: generation runs on model_
  ForwardContext context_;             // the engine's passes over model_
  bool copied_adapters_ = true;        // copy_ holds the adapters merged in (else the base weights)
  int64_t copied_signature_ = -1;
  EngineConfig config_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<KvCache> cache_;
  int64_t version_ = 0;
  std::function<void()> step_hook_;
  std::function<void(const std::string&)> follower_hook_;
  bool recompute_on_switch_ = false;
  bool cut_ = false, last_cut_ = false;  // cut_generation asked for, and the last generate cut
  EngineStats stats_;
};

// One token a GenerationLoop step sampled for sample `sample` of request `request`.
struct StepToken {
  int64_t request = 0, sample = 0;
  int32_t token = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;  // with SamplingParams::logprobs > 0
  bool finished = false;          // the sample ended with it (then `reason` says why)
  bool turn_ended = false;        // a held sample's turn ended with it (`reason` says why): it is paused
  FinishReason reason = FinishReason::kLength;
};

// Continuous batching over time (a server's): requests join while others run and leave when
// they end or are cancelled, all stepped together in one scheduler. Engine::generate is one such
// loop run to its end. One thread calls every method; the weights are those of the engine at the
// loop's start (a weight update waits for an idle loop, and a new loop then takes the new ones).
class GenerationLoop {
 public:
  explicit GenerationLoop(Engine& engine);
  ~GenerationLoop();
  GenerationLoop(const GenerationLoop&) = delete;
  GenerationLoop& operator=(const GenerationLoop&) = delete;

  // Queues a request (checked and fit to the model's positions as generate does: a UserError
  // names it); returns its id, counting from 0.
  // hold_turns: the samples pause when a turn ends (StepToken::turn_ended) instead of finishing,
  // keeping their KV blocks until resume or release.
  int64_t add(const GenerationRequest& request, bool hold_turns = false);
  // A paused sample goes on with `inserted` appended (see Scheduler::resume) and a new turn of at
  // most `turn_limit` tokens (0: none); release ends it (with the reason its last turn ended).
  void resume(int64_t request, int64_t sample, const std::vector<int32_t>& inserted, int64_t turn_limit);
  void release(int64_t request, int64_t sample);
  // A sample's tokens of its current (or just ended) turn, and of its whole response so far.
  std::vector<int32_t> turn_tokens(int64_t request, int64_t sample) const;
  int64_t response_tokens(int64_t request, int64_t sample) const;
  int64_t n_paused() const;
  // A sample's current turn limit (0: none), and the reason a paused sample ends with at release.
  void set_turn_limit(int64_t request, int64_t sample, int64_t turn_limit);
  void set_finish_reason(int64_t request, int64_t sample, FinishReason reason);
  // Ends the request's unfinished samples (FinishReason::kAbort) and frees their blocks.
  void cancel(int64_t request);
  // One engine step over everything running: the tokens it sampled. Nothing when idle.
  std::vector<StepToken> step();
  bool idle() const;
  bool finished(int64_t request) const;  // every sample of it ended
  // A finished request's samples (text decoded, a stop string cut), in sample order; the loop
  // forgets it.
  std::vector<GeneratedSample> take(int64_t request);
  // One finished sample of a request still running (its text, as take will give it).
  GeneratedSample peek(int64_t request, int64_t sample) const;

  int64_t n_unfinished() const;  // sequences waiting or running
  int64_t kv_blocks_used() const;
  int64_t kv_blocks() const;
  const EngineStats& stats() const { return stats_; }
  std::string check_blocks() const;  // the scheduler's block invariant ("" when it holds)

 private:
  Engine& engine_;
  std::chrono::steady_clock::time_point start_;
  Scheduler scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  int64_t next_request_ = 0;
  std::map<int64_t, std::unique_ptr<GenerationRequest>> requests_;  // the sequences point at their params
  std::map<int64_t, bool> held_;                                    // requests added with hold_turns
  std::map<std::pair<int64_t, int64_t>, int64_t> sequences_;        // (request, sample) -> sequence
  std::unordered_map<int64_t, std::optional<std::string>> cut_text_;
  std::unordered_map<int64_t, double> last_token_at_;  // seconds since start_
  EngineStats stats_;
};

// The stop tokens a model ends its turn with: the EOS ids of config.json and generation_config.json
// and the tokenizer's eos_token, without repeats.
std::vector<int32_t> default_stop_tokens(const ModelConfig& config, const Tokenizer& tokenizer);

// The reference path: one sequence at a time, no cache, the full forward pass every step, the same
// sampler and RNG derivation. Slow; the engine is tested against it.
std::vector<GeneratedSample> generate_eager(Transformer& model, const std::vector<GenerationRequest>& requests,
                                            const Tokenizer* tokenizer, int64_t version = 0);
// The same for multi-turn trajectories: each sequence goes on in place after its handler answers
// (the reference Engine::generate_turns is tested against).
std::vector<GeneratedSample> generate_eager_turns(Transformer& model, const std::vector<GenerationRequest>& requests,
                                                  const Tokenizer* tokenizer, TurnHandler& handler, int64_t version = 0);

}  // namespace rlcpp
