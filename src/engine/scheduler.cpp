#include "engine/scheduler.h"

#include <algorithm>

#include "util/error.h"

namespace rlcpp {

int64_t ScheduledBatch::n_tokens() const {
  int64_t n = 0;
  for (const auto& w : work) n += w.n_tokens;
  return n;
}

Scheduler::Scheduler(SchedulerConfig config, int64_t n_blocks, int64_t block_size)
    : config_(config), blocks_(n_blocks, block_size) {}

void Scheduler::add_request(int64_t request, const std::vector<int32_t>& prompt, const SamplingParams& params,
                            int64_t n, uint64_t seed) {
  if (prompt.empty()) throw_user_error("request {}: empty prompt", request);
  if (n < 1) throw_user_error("request {}: n = {} samples; it must be at least 1", request, n);
  const int64_t bs = blocks_.block_size();
  const int64_t longest = static_cast<int64_t>(prompt.size()) + params.max_new_tokens;
  const int64_t needed = (longest + bs - 1) / bs;
  if (needed > blocks_.n_blocks()) {
    throw_user_error("request {}: prompt of {} tokens + max_new_tokens {} = {} tokens needs {} KV blocks, but the "
                     "cache holds {} blocks of {} tokens ({} tokens in all); enlarge the KV cache or lower "
                     "max_new_tokens / max_prompt_tokens", request, prompt.size(), params.max_new_tokens, longest,
                     needed, blocks_.n_blocks(), bs, blocks_.n_blocks() * bs);
  }
  int64_t leader = -1;
  for (int64_t s = 0; s < n; ++s) {
    auto seq = std::make_unique<Sequence>();
    seq->id = static_cast<int64_t>(seqs_.size());
    seq->request = request;
    seq->sample = s;
    seq->tokens = prompt;
    seq->n_prompt = static_cast<int64_t>(prompt.size());
    seq->turn_start = seq->n_prompt;
    seq->params = &params;
    seq->rng.seed(sample_seed(seed, s));
    const int64_t id = seq->id;
    seqs_.push_back(std::move(seq));
    if (config_.prefix_sharing && leader >= 0) {
      seqs_[static_cast<size_t>(leader)]->pending_children.push_back(id);
    } else {
      waiting_.push_back(id);
      if (leader < 0) leader = id;
    }
    if (!config_.prefix_sharing) leader = -1;
  }
}

ScheduledBatch Scheduler::schedule() {
  ScheduledBatch batch;
  batch.copies = std::move(pending_copies_);
  pending_copies_.clear();
  if (config_.chunked_prefill) {
    schedule_decodes(batch);
    schedule_prefills(batch, config_.max_num_batched_tokens - batch.n_tokens());
  } else {
    schedule_prefills(batch, config_.max_num_batched_tokens);
    if (batch.work.empty()) schedule_decodes(batch);
  }
  if (!batch.work.empty()) ++(batch.prefill ? stats_.n_prefill_steps : stats_.n_decode_steps);
  stats_.peak_blocks_used = std::max(stats_.peak_blocks_used, blocks_.n_blocks() - blocks_.n_free());
  return batch;
}

SeqWork Scheduler::prefill_work(Sequence& s, int64_t start, int64_t n) {
  SeqWork work{s.id, start, n, {}};
  stats_.n_prefill_tokens += n;
  if (start + n < s.n_prefill) return work;  // a chunk: nothing to sample yet
  work.samplers.push_back(s.id);
  for (int64_t child_id : s.pending_children) {
    Sequence& child = sequence(child_id);
    child.blocks = s.blocks;
    child.n_prefill = s.n_prefill;
    for (int32_t b : child.blocks) blocks_.share(b);
    child.status = SeqStatus::kRunning;
    running_.push_back(child_id);
    work.samplers.push_back(child_id);
  }
  s.pending_children.clear();
  return work;
}

void Scheduler::schedule_prefills(ScheduledBatch& batch, int64_t budget) {
  const int64_t bs = blocks_.block_size();
  const bool chunk = config_.chunked_prefill;
  // Started prompts first (chunked prefill only), in admission order.
  for (int64_t id : std::vector<int64_t>(running_)) {
    Sequence& s = sequence(id);
    if (!prefilling(s) || budget <= 0) continue;
    const int64_t n = std::min(budget, s.n_prefill - s.n_cached);
    batch.work.push_back(prefill_work(s, s.n_cached, n));
    batch.prefill = true;
    budget -= n;
  }
  // Then admissions, while seats, the token budget and blocks allow. Pending samples hold their
  // seats from their leader's admission.
  int64_t seats_used = 0;
  for (int64_t id : running_) seats_used += seats(sequence(id));
  while (!waiting_.empty() && budget > 0) {
    Sequence& s = sequence(waiting_.front());
    const int64_t n_tokens = static_cast<int64_t>(s.tokens.size());
    const int64_t need_blocks = (n_tokens + bs - 1) / bs;
    const bool alone = batch.work.empty() && running_.empty();
    if (seats_used + seats(s) > config_.max_num_seqs && !alone) break;
    if (!chunk && n_tokens > budget && !batch.work.empty()) break;
    // With nothing else to run, paused sequences give their blocks up (recomputed when they
    // resume) rather than leave the engine without work while their turns are out.
    while (alone && need_blocks > blocks_.n_free() && evict_paused(-1)) {
    }
    if (need_blocks > blocks_.n_free()) break;
    waiting_.pop_front();
    RLCPP_CHECK(s.blocks.empty() && s.n_cached == 0, "waiting sequence {} holds {} blocks", s.id, s.blocks.size());
    for (int64_t b = 0; b < need_blocks; ++b) s.blocks.push_back(blocks_.allocate());
    s.status = SeqStatus::kRunning;
    s.n_prefill = n_tokens;
    running_.push_back(s.id);
    seats_used += seats(s);
    const int64_t n = chunk ? std::min(budget, n_tokens) : n_tokens;
    batch.work.push_back(prefill_work(s, 0, n));
    batch.prefill = true;
    budget -= n;
  }
}

void Scheduler::schedule_decodes(ScheduledBatch& batch) {
  // One token per decoding sequence; a new block at a block boundary, a private copy of a shared
  // last block; when the pool is empty, preempt the newest running sequence.
  const int64_t bs = blocks_.block_size();
  size_t i = 0;
  while (i < running_.size()) {
    Sequence& s = sequence(running_[i]);
    if (prefilling(s)) {
      ++i;
      continue;
    }
    const bool boundary = s.n_cached % bs == 0;
    const bool shared = !boundary && blocks_.ref_count(s.blocks.back()) > 1;
    if ((boundary || shared) && blocks_.n_free() == 0 && evict_paused(-1)) continue;
    if ((boundary || shared) && blocks_.n_free() == 0) {
      const int64_t victim = running_.back();
      preempt(victim);
      if (victim == s.id) break;
      continue;
    }
    if (boundary) {
      RLCPP_CHECK(static_cast<int64_t>(s.blocks.size()) == s.n_cached / bs, "sequence {}: {} blocks for {} cached",
                  s.id, s.blocks.size(), s.n_cached);
      s.blocks.push_back(blocks_.allocate());
    } else if (shared) {
      const int32_t fresh = blocks_.allocate();
      batch.copies.push_back({s.blocks.back(), fresh});
      blocks_.release(s.blocks.back());
      s.blocks.back() = fresh;
      ++stats_.n_copies;
    }
    batch.work.push_back({s.id, s.n_cached, 1, {s.id}});
    ++i;
  }
}

void Scheduler::complete(const ScheduledBatch& batch) {
  for (const auto& work : batch.work) {
    sequence(work.seq).n_cached = work.start + work.n_tokens;
    for (int64_t id : work.samplers) sequence(id).n_cached = work.start + work.n_tokens;
  }
}

void Scheduler::append(int64_t seq, int32_t token, float logprob, std::vector<TokenLogprob> top) {
  Sequence& s = sequence(seq);
  RLCPP_CHECK(s.status == SeqStatus::kRunning, "appending to sequence {} that is not running", seq);
  s.tokens.push_back(token);
  s.logprobs.push_back(logprob);
  if (!top.empty()) s.top_logprobs.push_back(std::move(top));
}

void Scheduler::cancel_request(int64_t request) {
  for (auto& owned : seqs_) {
    if (owned == nullptr || owned->request != request || owned->status == SeqStatus::kFinished) continue;
    Sequence& s = *owned;
    if (s.status == SeqStatus::kRunning || s.status == SeqStatus::kPaused) {
      finish(s.id, FinishReason::kAbort);
      continue;
    }
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), s.id), waiting_.end());
    s.pending_children.clear();  // the request's own: cancelled with it
    s.status = SeqStatus::kFinished;
    s.finish_reason = FinishReason::kAbort;
  }
}

void Scheduler::forget(int64_t seq) {
  RLCPP_CHECK(sequence(seq).status == SeqStatus::kFinished, "forgetting sequence {} that is not finished", seq);
  seqs_[static_cast<size_t>(seq)].reset();
}

void Scheduler::finish(int64_t seq, FinishReason reason) {
  Sequence& s = sequence(seq);
  for (int32_t b : s.blocks) blocks_.release(b);
  s.blocks.clear();
  s.status = SeqStatus::kFinished;
  s.finish_reason = reason;
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  paused_.erase(std::remove(paused_.begin(), paused_.end(), seq), paused_.end());
}

void Scheduler::pause(int64_t seq, FinishReason reason) {
  Sequence& s = sequence(seq);
  RLCPP_CHECK(s.status == SeqStatus::kRunning && !prefilling(s), "pausing sequence {} that is not decoding", seq);
  s.status = SeqStatus::kPaused;
  s.finish_reason = reason;
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  paused_.push_back(seq);
}

bool Scheduler::evict_paused(int64_t keep) {
  for (int64_t id : paused_) {
    Sequence& s = sequence(id);
    if (id == keep || s.blocks.empty()) continue;
    for (int32_t b : s.blocks) blocks_.release(b);
    s.blocks.clear();
    s.n_cached = 0;
    s.n_prefill = 0;
    ++stats_.n_evictions;
    return true;
  }
  return false;
}

void Scheduler::drop_cache() {
  auto drop = [&](Sequence& s) {
    for (int32_t b : s.blocks) blocks_.release(b);
    s.blocks.clear();
    s.n_cached = 0;
    s.n_prefill = 0;
    ++stats_.n_recomputed;
  };
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {  // the oldest ends up first
    Sequence& s = sequence(*it);
    drop(s);
    s.status = SeqStatus::kWaiting;
    waiting_.push_front(*it);
  }
  running_.clear();
  for (int64_t id : paused_) {
    Sequence& s = sequence(id);
    if (!s.blocks.empty()) drop(s);
  }
  pending_copies_.clear();  // every block they would write into is free now
}

void Scheduler::resume(int64_t seq, const std::vector<int32_t>& inserted, int64_t turn_limit) {
  Sequence& s = sequence(seq);
  RLCPP_CHECK(s.status == SeqStatus::kPaused, "resuming sequence {} that is not paused", seq);
  paused_.erase(std::remove(paused_.begin(), paused_.end(), seq), paused_.end());
  if (!inserted.empty()) {
    s.inserted.push_back({s.n_response(), static_cast<int64_t>(inserted.size())});
    s.tokens.insert(s.tokens.end(), inserted.begin(), inserted.end());
    s.logprobs.resize(s.logprobs.size() + inserted.size(), 0.0F);
    if (!s.top_logprobs.empty()) s.top_logprobs.resize(s.top_logprobs.size() + inserted.size());
  }
  s.turn_start = static_cast<int64_t>(s.tokens.size());
  s.turn_limit = turn_limit;
  const int64_t bs = blocks_.block_size();
  const int64_t n_tokens = static_cast<int64_t>(s.tokens.size());
  // The block the next write lands in may still be shared with the group (a turn that ended at its
  // first token): it is copied first.
  const bool shared = !s.blocks.empty() && s.n_cached % bs != 0 && blocks_.ref_count(s.blocks.back()) > 1;
  auto needed = [&] { return (n_tokens + bs - 1) / bs - static_cast<int64_t>(s.blocks.size()) + (shared ? 1 : 0); };
  while (!s.blocks.empty() && needed() > blocks_.n_free() && evict_paused(seq)) {
  }
  if (s.blocks.empty() || needed() > blocks_.n_free()) {
    // Recomputed from its tokens when admitted, as a preempted sequence is.
    for (int32_t b : s.blocks) blocks_.release(b);
    s.blocks.clear();
    s.n_cached = 0;
    s.n_prefill = 0;
    s.status = SeqStatus::kWaiting;
    waiting_.push_front(seq);
    return;
  }
  if (shared) {
    const int32_t fresh = blocks_.allocate();
    pending_copies_.push_back({s.blocks.back(), fresh});
    blocks_.release(s.blocks.back());
    s.blocks.back() = fresh;
    ++stats_.n_copies;
  }
  while (static_cast<int64_t>(s.blocks.size()) * bs < n_tokens) s.blocks.push_back(blocks_.allocate());
  s.status = SeqStatus::kRunning;
  s.n_prefill = n_tokens;
  running_.push_back(seq);
}

void Scheduler::preempt(int64_t seq) {
  Sequence& s = sequence(seq);
  for (int32_t b : s.blocks) blocks_.release(b);
  s.blocks.clear();
  s.n_cached = 0;
  s.n_prefill = 0;
  s.status = SeqStatus::kWaiting;
  ++s.n_preemptions;
  ++stats_.n_preemptions;
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.push_front(seq);
}

std::string Scheduler::check_blocks() const {
  std::vector<int32_t> owners(static_cast<size_t>(blocks_.n_blocks()), 0);
  for (const auto& s : seqs_) {
    if (s == nullptr) continue;  // forgotten
    if (s->status != SeqStatus::kRunning && s->status != SeqStatus::kPaused && !s->blocks.empty()) {
      return fmt::format("sequence {} is not running but holds {} blocks", s->id, s->blocks.size());
    }
    for (int32_t b : s->blocks) ++owners[static_cast<size_t>(b)];
  }
  return blocks_.check(owners);
}

}  // namespace rlcpp
