// A generation request and its sequences, as every generation path (the engine's loop, the eager
// reference) treats them alike: a request checked and fitted to the model's positions, a
// sequence's stop checks after each token, and the sample a finished sequence gives.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/rollout_backend.h"
#include "engine/sampling.h"
#include "engine/scheduler.h"

namespace rlcpp {

class Tokenizer;

// Stop checks after a token was appended: stop token, stop string in the decoded text of the turn,
// length (the response budget, or the turn's limit). Returns true when the turn is done; a stop
// string also sets `cut` (the turn's text up to it).
bool check_stop(const Sequence& s, const Tokenizer* tokenizer, std::optional<std::string>* cut, FinishReason* reason);

// A finished sequence's sample; `cut_text`: the response text cut before a stop string, when one
// stopped it.
GeneratedSample to_sample(const Sequence& s, const Tokenizer* tokenizer, int64_t version,
                          const std::optional<std::string>& cut_text);

// A request's sampling settings and prompt ids, checked; `r` names it in the error.
void validate_request(const GenerationRequest& request, size_t r, int64_t vocab);

// A request within the model's positions (max_position_embeddings): a prompt that leaves no room
// for one new token is an error; a response that would run past the last position is capped
// there, and the first capped request of the process says so.
GenerationRequest fit_request(GenerationRequest request, size_t r, int64_t max_positions);

}  // namespace rlcpp
