// The asynchronous settings' checks (config_checks.h).
#include <fmt/format.h>

#include <algorithm>

#include "rl/config/config_checks.h"
#include "util/error.h"

namespace rlcpp {

void check_staleness_settings(const RunConfig& c) {
  const int64_t ibs = c.round_prompts(), I = c.parallel.engines();
  if (c.staleness.sync_frequency > std::max<int64_t>(1, c.staleness.n_behind)) {
    throw_user_error("--sync-frequency {} lets rollout run {} rounds behind the trainers, more than -nb {} allows; "
                     "raise -nb to {} or sync every round", c.staleness.sync_frequency, c.staleness.sync_frequency, c.staleness.n_behind,
                     c.staleness.sync_frequency);
  }
  if (c.staleness.max_staleness >= 0 && c.staleness_floor() > c.staleness.max_staleness) {
    const int64_t s = c.steps_per_round(), floor = c.staleness_floor();
    throw_user_error("--max-staleness {}: this schedule trains samples up to {} versions after the policy that sampled "
                     "them ({} steps a round: {} prompts a round over {} × -tbs {}{}); lower -ibs to make rounds of "
                     "fewer steps{}, or raise --max-staleness to {}",
                     c.staleness.max_staleness, floor, s, I * ibs, replicas_text(c), c.train.train_batch_size,
                     floor > s - 1 ? fmt::format(", and -nb {} sends each round ahead of the {} steps before it "
                                                 "(--sync-frequency {})", c.staleness.n_behind, s,
                                                 std::max<int64_t>(1, c.staleness.sync_frequency))
                                   : "",
                     floor > s - 1 ? ", add --partial-rollout (a round ahead then starts within the bound), or -nb 0" : "",
                     floor);
  }
  if (c.staleness.stream_prompts) {
    if (!c.staleness.partial_rollout) {
      throw_user_error("--stream-prompts without --partial-rollout: a round's streamed prompts start on the weights of "
                       "the round before it and go on with its versions, as partial rollouts' tokens do; add "
                       "--partial-rollout (with -nb 1)");
    }
    if (c.remote.enabled()) {
      throw_user_error("--stream-prompts with rollout servers (-b): not supported yet; use rollout workers (-t T -i I), "
                       "or drop --stream-prompts");
    }
    if (!c.episode.env_cmd.empty()) {
      throw_user_error("--stream-prompts with --env-cmd: streamed episodes are held between rounds and saved by the "
                       "checkpoints, but an external environment's processes hold its episodes' state, which a "
                       "checkpoint cannot save; drop --stream-prompts (tool episodes, --tools alone, stream)");
    }
    if (!c.staleness.cut_at_checkpoint) {
      throw_user_error("--stream-prompts with --checkpoint-round collect: a checkpoint would save the round ahead "
                       "whole but not the next round's prompts the worker streamed; drop one of them");
    }
    if (c.rollout.inference_microbatch_size > 0) {
      throw_user_error("--stream-prompts with -imbs {}: a streamed round runs in one generate call beside the next "
                       "round's prompts; drop -imbs (--max-num-seqs bounds the sequences running at once)",
                       c.rollout.inference_microbatch_size);
    }
  }
  if (c.staleness.completion_order && !c.staleness.stream_prompts) {
    throw_user_error("--group-order completion without --stream-prompts: a round delivers the first groups to "
                     "complete among its prompts and the next round's streamed beside it; add --stream-prompts (with "
                     "--partial-rollout -nb 1)");
  }
  if (c.staleness.partial_rollout) {
    if (!c.parallel.distributed() && !c.remote.enabled()) {
      throw_user_error("--partial-rollout: the colocated mode (no -i) generates between steps; partial rollouts need "
                       "rollout workers (-t T -i I under mpirun) or rollout servers (-b) generating while the trainers "
                       "train, with -nb 1");
    }
    if (c.remote.enabled()) {
      // Servers take weights between requests: a round goes on in chunks, one version each.
      if (c.staleness.switch_asap || c.staleness.recompute_kv) {
        throw_user_error("--partial-rollout with rollout servers (-b) and {}: the servers take each version between "
                         "chunks of the round's sequences at the schedule's switch points, and prefill each chunk "
                         "anew; drop it", c.staleness.switch_asap ? "--async-switch asap" : "--partial-kv recompute");
      }
      if (c.episode.multi_turn()) {
        throw_user_error("--partial-rollout with rollout servers (-b) and multi-turn rollouts (--tools/--env-cmd): not "
                         "supported yet; use rollout workers (-t T -i I) or drop --partial-rollout");
      }
    }
    if (c.staleness.n_behind < 1) {
      throw_user_error("--partial-rollout with -nb {}: without a round generated ahead no weights change while a round "
                       "generates; add -nb 1", c.staleness.n_behind);
    }
    if (c.staleness.sync_frequency > 1) {
      throw_user_error("--partial-rollout with --sync-frequency {}: partial rollouts take every version the trainers "
                       "make; drop --sync-frequency", c.staleness.sync_frequency);
    }
    if (c.staleness.switch_asap && c.staleness.switch_interval != 0) {
      throw_user_error("--async-switch asap with --switch-interval {}: asap takes weights when they arrive, not at "
                       "scheduled steps; drop one of the two", c.staleness.switch_interval);
    }
  } else if (c.staleness.switch_interval != 0 || c.staleness.switch_asap || c.staleness.recompute_kv) {
    throw_user_error("--switch-interval, --async-switch and --partial-kv set how partial rollouts switch weights; add "
                     "--partial-rollout or drop them");
  }
  if (c.staleness.switch_interval < 0) {
    throw_user_error("--switch-interval {}: give the engine steps between weight switches (0: spread over -mnt)",
                     c.staleness.switch_interval);
  }
  if (c.staleness.stale_finish && c.staleness.max_staleness < 0) {
    throw_user_error("--stale-policy finish says what becomes of tokens over --max-staleness, which is not given; add "
                     "--max-staleness K or drop --stale-policy");
  }
  if (c.staleness.max_staleness >= 0 && c.staleness.max_relay_episode != 0) {
    throw_user_error("--max-staleness {} with --max-relay-episode {}: relayed groups are trained again steps after "
                     "their policy by design; drop one of the two", c.staleness.max_staleness, c.staleness.max_relay_episode);
  }
}

}  // namespace rlcpp
