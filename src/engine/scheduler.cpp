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
  const int64_t bs = blocks_.block_size();
  // Prefill first: admit waiting sequences while seats, token budget and blocks allow.
  int64_t seats_used = static_cast<int64_t>(running_.size());
  int64_t tokens = 0;
  while (!waiting_.empty()) {
    Sequence& s = sequence(waiting_.front());
    const int64_t n_tokens = static_cast<int64_t>(s.tokens.size());
    const int64_t need_blocks = (n_tokens + bs - 1) / bs;
    const bool first = batch.work.empty();
    if (seats_used + seats(s) > config_.max_num_seqs && !(first && running_.empty())) break;
    if (tokens + n_tokens > config_.max_prefill_tokens && !first) break;
    if (need_blocks > blocks_.n_free()) break;
    waiting_.pop_front();
    RLCPP_CHECK(s.blocks.empty() && s.n_cached == 0, "waiting sequence {} holds {} blocks", s.id, s.blocks.size());
    for (int64_t b = 0; b < need_blocks; ++b) s.blocks.push_back(blocks_.allocate());
    s.status = SeqStatus::kRunning;
    running_.push_back(s.id);
    SeqWork work{s.id, 0, n_tokens, {s.id}};
    for (int64_t child_id : s.pending_children) {
      Sequence& child = sequence(child_id);
      child.blocks = s.blocks;
      for (int32_t b : child.blocks) blocks_.share(b);
      child.status = SeqStatus::kRunning;
      running_.push_back(child_id);
      work.samplers.push_back(child_id);
    }
    seats_used += seats(s);
    s.pending_children.clear();
    tokens += n_tokens;
    batch.work.push_back(std::move(work));
  }
  if (!batch.work.empty()) {
    batch.prefill = true;
    ++stats_.n_prefill_steps;
  } else {
    // Decode: one token per running sequence; a new block at a block boundary, a private copy of a
    // shared last block; when the pool is empty, preempt the newest running sequence.
    size_t i = 0;
    while (i < running_.size()) {
      Sequence& s = sequence(running_[i]);
      const bool boundary = s.n_cached % bs == 0;
      const bool shared = !boundary && blocks_.ref_count(s.blocks.back()) > 1;
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
    if (!batch.work.empty()) ++stats_.n_decode_steps;
  }
  stats_.peak_blocks_used = std::max(stats_.peak_blocks_used, blocks_.n_blocks() - blocks_.n_free());
  return batch;
}

void Scheduler::complete(const ScheduledBatch& batch) {
  for (const auto& work : batch.work) {
    for (int64_t id : work.samplers) sequence(id).n_cached = work.start + work.n_tokens;
  }
}

void Scheduler::append(int64_t seq, int32_t token, float logprob) {
  Sequence& s = sequence(seq);
  RLCPP_CHECK(s.status == SeqStatus::kRunning, "appending to sequence {} that is not running", seq);
  s.tokens.push_back(token);
  s.logprobs.push_back(logprob);
}

void Scheduler::finish(int64_t seq, FinishReason reason) {
  Sequence& s = sequence(seq);
  for (int32_t b : s.blocks) blocks_.release(b);
  s.blocks.clear();
  s.status = SeqStatus::kFinished;
  s.finish_reason = reason;
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
}

void Scheduler::preempt(int64_t seq) {
  Sequence& s = sequence(seq);
  for (int32_t b : s.blocks) blocks_.release(b);
  s.blocks.clear();
  s.n_cached = 0;
  s.status = SeqStatus::kWaiting;
  ++s.n_preemptions;
  ++stats_.n_preemptions;
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.push_front(seq);
}

std::string Scheduler::check_blocks() const {
  std::vector<int32_t> owners(static_cast<size_t>(blocks_.n_blocks()), 0);
  for (const auto& s : seqs_) {
    if (s->status != SeqStatus::kRunning && !s->blocks.empty()) {
      return fmt::format("sequence {} is not running but holds {} blocks", s->id, s->blocks.size());
    }
    for (int32_t b : s->blocks) ++owners[static_cast<size_t>(b)];
  }
  return blocks_.check(owners);
}

}  // namespace rlcpp
