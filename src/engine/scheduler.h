// Continuous batching over a paged KV cache: admits requests, runs prefill and decode steps,
// retires finished sequences and admits waiting ones in their place. Pure CPU bookkeeping,
// testable without a model: the runner gets a ScheduledBatch and the engine reports back tokens.
//
// Prefix sharing: the n samples of a request are one prefill. The first sample (the leader) runs
// the prompt; the others are forked at admission, owning the same blocks (reference counts), and
// sample their first token from the leader's logits. The first write into a shared, partly filled
// block copies it (copy-on-write). When blocks run out, the newest running sequence is preempted:
// its blocks are freed and it is later recomputed from its tokens (its RNG carries on).
//
// Chunked prefill (SchedulerConfig::chunked_prefill): a step runs one token of every decoding
// sequence, then prompt chunks up to the step's token budget. An admitted sequence holds the blocks
// of its whole prompt from the start; its group's other samples are forked when its last chunk runs.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sampling.h"

namespace rlcpp {

// kPaused: a multi-turn sequence whose turn ended; it keeps its KV blocks (unless evicted under
// memory pressure) until it is resumed with inserted tokens or finished.
enum class SeqStatus { kWaiting, kRunning, kPaused, kFinished };


struct Sequence {
  int64_t id = 0;
  int64_t request = 0, sample = 0;
  std::vector<int32_t> tokens;  // prompt then response
  int64_t n_prompt = 0;
  int64_t n_cached = 0;         // leading tokens whose keys and values are in the cache
  int64_t n_prefill = 0;        // tokens its (latest) admission prefills, in one step or in chunks
  std::vector<int32_t> blocks;  // block table: position p lives in blocks[p / block_size]
  SeqStatus status = SeqStatus::kWaiting;
  const SamplingParams* params = nullptr;
  std::mt19937_64 rng;
  std::vector<float> logprobs;  // one per response token
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per response token, when params->logprobs > 0
  FinishReason finish_reason = FinishReason::kLength;
  std::vector<int64_t> pending_children;  // forked at admission (prefix sharing), until then waiting with us
  int64_t n_preemptions = 0;
  // Multi-turn: where the current turn starts (tokens index; the prompt's end for the first turn),
  // its token limit (0: none), and the inserted runs of the response (logprobs 0 there).
  int64_t turn_start = 0;
  int64_t turn_limit = 0;
  std::vector<InsertedRun> inserted;
  // The weights' versions that sampled its response: the first token's, then every change.
  std::vector<VersionChange> versions;
  int64_t n_response() const { return static_cast<int64_t>(tokens.size()) - n_prompt; }
};

// One sequence's share of a step: run tokens[start, start + n_tokens) and sample the next token
// from the last one's logits for every sequence in `samplers` (itself, or a whole group at prefill).
struct SeqWork {
  int64_t seq = 0;
  int64_t start = 0;
  int64_t n_tokens = 0;
  std::vector<int64_t> samplers;
};

struct BlockCopy {
  int32_t src = 0, dst = 0;
};

// What the scheduler decided for one step: the one struct the scheduler, runner and model meet at.
// A prefill work item may be a chunk of its prompt (no samplers until the last chunk).
struct ScheduledBatch {
  bool prefill = false;  // some of the work is prompt (the rest, one new token per decoding sequence)
  std::vector<SeqWork> work;
  std::vector<BlockCopy> copies;  // copy-on-write, to do before this step writes the cache
  int64_t n_tokens() const;
};

// The engine's scheduling knobs, with vLLM's names and defaults: declared here once, held by
// EngineConfig, bound to flags and YAML by the run settings table.
struct SchedulerConfig {
  int64_t max_num_seqs = 256;  // sequences running at once
  // Tokens a step runs. Without chunked prefill: the prompts of a prefill step (a longer single
  // prompt runs alone), and decode steps wait until no prompt can be admitted. With it: every step
  // first runs one token of each decoding sequence, then fills the rest of the budget with prompt
  // chunks (continuing a started prompt first), so a long prompt never stalls the running ones.
  int64_t max_num_batched_tokens = 512;
  bool prefix_sharing = true;   // fork the n samples of a request from one prefill
  bool chunked_prefill = true;  // vLLM's enable_chunked_prefill
};

struct SchedulerStats {
  int64_t n_prefill_steps = 0, n_decode_steps = 0, n_preemptions = 0, n_copies = 0, peak_blocks_used = 0;
  int64_t n_prefill_tokens = 0;  // tokens run by prefill work (prompts, recomputations, resumed turns)
  int64_t n_evictions = 0;       // paused sequences whose blocks were freed (recomputed when resumed)
  int64_t n_recomputed = 0;      // sequences whose cache drop_cache dropped (a weight update's recomputation)
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, int64_t n_blocks, int64_t block_size);

  // Queues a request's n samples; a sample that could never fit the cache (prompt + max_new_tokens
  // over the whole budget) is a UserError naming the request, the lengths and the budget.
  void add_request(int64_t request, const std::vector<int32_t>& prompt, const SamplingParams& params, int64_t n,
                   uint64_t seed);
  // The next step; an empty batch when nothing is left to do.
  ScheduledBatch schedule();
  // After the runner ran `batch`: the cached lengths advance.
  void complete(const ScheduledBatch& batch);
  // Appends a sampled token to a running sequence.
  void append(int64_t seq, int32_t token, float logprob, std::vector<TokenLogprob> top = {});
  void finish(int64_t seq, FinishReason reason);
  // Multi-turn: a running sequence's turn ended; it leaves the batch and keeps its blocks.
  void pause(int64_t seq, FinishReason reason);
  // A paused sequence goes on: `inserted` is appended (never sampled) and prefilled after the
  // tokens already in the cache, so only they and the turn's last sampled token run; the next token
  // is sampled from the last of them. Blocks for them come from the free pool, then from other
  // paused sequences (evicted: recomputed when they resume); when even that is not enough the
  // sequence is recomputed from its tokens like a preempted one. `turn_limit`: the new turn's
  // token limit (0: none).
  void resume(int64_t seq, const std::vector<int32_t>& inserted, int64_t turn_limit);
  // Ends every unfinished sequence of `request` (running, waiting or pending) with kAbort.
  void cancel_request(int64_t request);
  // Drops the keys and values of every sequence holding some: running ones wait again (in their
  // admission order, before the others) and paused ones are evicted, so all are recomputed from
  // their tokens with the weights in place then (partial rollouts' --partial-kv recompute).
  void drop_cache();
  // Drops a finished sequence's record (a server's, once its result is taken); its id is not reused.
  void forget(int64_t seq);

  // A running sequence whose admitted tokens are not all in the cache yet (chunked prefill).
  static bool prefilling(const Sequence& s) { return s.n_cached < s.n_prefill; }

  // Nothing waiting or running (paused sequences wait for their caller, not for a step).
  bool done() const { return waiting_.empty() && running_.empty(); }
  int64_t n_paused() const { return static_cast<int64_t>(paused_.size()); }
  int64_t n_unfinished() const { return static_cast<int64_t>(waiting_.size() + running_.size()); }
  Sequence& sequence(int64_t id) { return *seqs_.at(static_cast<size_t>(id)); }
  const Sequence& sequence(int64_t id) const { return *seqs_.at(static_cast<size_t>(id)); }
  int64_t n_sequences() const { return static_cast<int64_t>(seqs_.size()); }
  const BlockManager& blocks() const { return blocks_; }
  const SchedulerStats& stats() const { return stats_; }
  // The block accounting invariant over all live sequences; empty when consistent.
  std::string check_blocks() const;

 private:
  // Adds prefill work within `budget` tokens: started prompts' next chunks, then admissions.
  void schedule_prefills(ScheduledBatch& batch, int64_t budget);
  // Adds one token of each decoding sequence (preempting the newest when blocks run out).
  void schedule_decodes(ScheduledBatch& batch);
  // Work running tokens [start, start + n) of s; the last chunk of a prompt samples, and forks the
  // group's pending samples from it.
  SeqWork prefill_work(Sequence& s, int64_t start, int64_t n);
  void preempt(int64_t seq);
  // Frees the blocks of the oldest paused sequence other than `keep`; false when there is none.
  bool evict_paused(int64_t keep);
  int64_t seats(const Sequence& s) const { return 1 + static_cast<int64_t>(s.pending_children.size()); }

  SchedulerConfig config_;
  BlockManager blocks_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
  std::deque<int64_t> waiting_;
  std::vector<int64_t> running_;  // in admission order; the newest is preempted first
  std::vector<int64_t> paused_;   // in the order they paused; the oldest is evicted first
  std::vector<BlockCopy> pending_copies_;  // copy-on-write of resumed sequences, done by the next step
  SchedulerStats stats_;
};

}  // namespace rlcpp
