// The settings that choose between two behaviours by name (--env-reward, --adv-std, --async-switch,
// --partial-kv, --stale-policy): each a table of its two names, what they mean (the flag's help) and the boolean
// the option group holds.
#pragma once

#include "util/enum_table.h"

namespace rlcpp {

// What an external environment's rewards are worth (--env-reward).
inline const EnumTable<bool>& env_reward_modes() {
  static const EnumTable<bool> table(
      "environment reward", {{false, "env", "the sum of the environment's rewards (with -rt env)"},
                             {true, "add", "the -rt reward of the final answer plus the environment's"}});
  return table;
}

// The standard deviation of GRPO's group rewards: with Bessel's correction (the reference's) or without.
inline const EnumTable<bool>& std_estimates() {
  static const EnumTable<bool> table("std estimate", {{true, "unbiased", "divide by G - 1 (torch.std's default)"},
                                                      {false, "biased", "divide by G"}});
  return table;
}

// Where a partial rollout takes a new policy version (--async-switch).
inline const EnumTable<bool>& switch_modes() {
  static const EnumTable<bool> table(
      "weight switch", {{false, "schedule", "at the engine steps the schedule names, waiting there for weights not yet "
                                            "sent: reproducible bit for bit, and resumed exactly"},
                        {true, "asap", "at the first engine step after the weights arrive: the most overlap, not "
                                       "reproducible"}});
  return table;
}

// What a partial rollout's sequences keep of their cache across a weight switch (--partial-kv).
inline const EnumTable<bool>& partial_kv_modes() {
  static const EnumTable<bool> table(
      "partial-rollout cache", {{false, "keep", "the keys and values computed on the old weights stay"},
                                {true, "recompute", "every sequence's keys and values are recomputed on the new weights"}});
  return table;
}

// What becomes of what --max-staleness no longer allows (--stale-policy).
inline const EnumTable<bool>& checkpoint_round_modes() {
  static const EnumTable<bool> table(
      "checkpoint round", {{true, "cut", "the round generating ahead is cut at the checkpoint's version and saved in "
                                         "flight; it goes on from its sequences, in the run and on resume"},
                           {false, "collect", "the trainers wait for the round generating ahead and save it whole"}});
  return table;
}

inline const EnumTable<bool>& group_orders() {
  static const EnumTable<bool> table(
      "group order", {{false, "pick", "a round delivers the groups of its own prompts, in the order they were picked"},
                      {true, "completion", "a round delivers the first -ibs groups to complete among its prompts and "
                                           "those streamed beside it (--stream-prompts); the others go on in the next "
                                           "round"}});
  return table;
}

inline const EnumTable<bool>& stale_policies() {
  static const EnumTable<bool> table(
      "stale policy", {{false, "drop", "groups over the bound are dropped; a partial rollout's round ahead starts at "
                                       "the first version the bound allows (no token it samples is over it)"},
                       {true, "finish", "a partial rollout's round ahead starts at once and finishes its sequences on "
                                        "the new versions; tokens over the bound stay as context, not trained"}});
  return table;
}

}  // namespace rlcpp
