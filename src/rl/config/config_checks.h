// Checks of a resolved run configuration that live apart from run_config.cpp's validate(), by
// concept, and the wording their errors share.
#pragma once

#include <string>

#include "rl/config/run_config.h"

namespace rlcpp {

// The asynchronous settings (-nb, --sync-frequency, --max-staleness, partial rollouts and their
// switches, streamed prompts): each inconsistency a UserError naming the flags and how to fix it.
void check_staleness_settings(const RunConfig& c);

// "-t 4" or "-t 4 / --train-tp 2 = 2 replicas", and the same of the engines ("-i 2 / --rollout-tp
// 2 = 1 engines"): the counts the seed's constraints are about, as errors name them.
std::string replicas_text(const RunConfig& c);
std::string engines_text(const RunConfig& c);

}  // namespace rlcpp
