// generate_eager: the slow reference of generation, one sequence at a time through the whole
// model with no KV cache, that the engine's tokens and log-probs are checked against.
#include <torch/torch.h>

#include "engine/engine.h"
#include "engine/requests.h"
#include "engine/sampler.h"
#include "model/logprobs.h"

namespace rlcpp {

namespace {

// The eager reference of one sequence: `handler` (may be null) continues it after each turn.
GeneratedSample eager_sequence(Transformer& model, const GenerationRequest& request, int64_t r, int64_t s,
                               const Tokenizer* tokenizer, TurnHandler* handler, int64_t version) {
  Sequence seq;
  seq.request = r;
  seq.sample = s;
  seq.tokens = request.prompt_ids;
  seq.n_prompt = static_cast<int64_t>(request.prompt_ids.size());
  seq.turn_start = seq.n_prompt;
  seq.turn_limit = handler != nullptr ? handler->first_turn_limit(r) : 0;
  seq.params = &request.params;
  seq.rng.seed(sample_seed(request.seed, s));
  std::optional<std::string> cut;
  while (true) {
    auto ids = torch::tensor(std::vector<int64_t>(seq.tokens.begin(), seq.tokens.end()), torch::kInt64).unsqueeze(0);
    auto hidden = model.hidden_states(ids).select(0, 0);
    auto last = hidden.narrow(0, hidden.size(0) - 1, 1);
    auto logits = torch::matmul(last, model.output_weight().t()).to(logprob_dtype(last.scalar_type()));
    const SampleResult sampled = sample_tokens(logits, {seq.params}, {&seq.rng}, model.vocab_shard());
    seq.tokens.push_back(sampled.tokens[0]);
    seq.logprobs.push_back(sampled.logprobs[0]);
    FinishReason reason;
    if (!check_stop(seq, tokenizer, &cut, &reason)) continue;
    seq.finish_reason = reason;
    if (handler == nullptr || seq.n_response() >= request.params.max_new_tokens) break;
    const TurnOutcome outcome =
        handler->turn_ended({r, s, {seq.tokens.begin() + seq.turn_start, seq.tokens.end()}, reason, seq.n_response()})
            .get();
    if (!outcome.go_on) break;
    if (!room_for(seq.n_response(), outcome.inserted, request.params)) {
      seq.finish_reason = FinishReason::kLength;
      break;
    }
    seq.inserted.push_back({seq.n_response(), static_cast<int64_t>(outcome.inserted.size())});
    seq.tokens.insert(seq.tokens.end(), outcome.inserted.begin(), outcome.inserted.end());
    seq.logprobs.resize(seq.logprobs.size() + outcome.inserted.size(), 0.0F);
    seq.turn_start = static_cast<int64_t>(seq.tokens.size());
    seq.turn_limit = outcome.turn_limit;
    cut.reset();
  }
  return to_sample(seq, tokenizer, version, cut);
}

std::vector<GeneratedSample> eager(Transformer& model, const std::vector<GenerationRequest>& given,
                                   const Tokenizer* tokenizer, TurnHandler* handler, int64_t version) {
  std::vector<GenerationRequest> requests;
  for (size_t r = 0; r < given.size(); ++r) {
    validate_request(given[r], r, model.config().vocab_size);
    requests.push_back(fit_request(given[r], r, model.config().max_position_embeddings));
  }
  torch::NoGradGuard no_grad;
  std::vector<GeneratedSample> out;
  for (size_t r = 0; r < requests.size(); ++r) {
    for (int64_t s = 0; s < requests[r].n; ++s) {
      out.push_back(eager_sequence(model, requests[r], static_cast<int64_t>(r), s, tokenizer, handler, version));
    }
  }
  return out;
}

}  // namespace

std::vector<GeneratedSample> generate_eager(Transformer& model, const std::vector<GenerationRequest>& requests,
                                            const Tokenizer* tokenizer, int64_t version) {
  return eager(model, requests, tokenizer, nullptr, version);
}

std::vector<GeneratedSample> generate_eager_turns(Transformer& model, const std::vector<GenerationRequest>& requests,
                                                  const Tokenizer* tokenizer, TurnHandler& handler, int64_t version) {
  return eager(model, requests, tokenizer, &handler, version);
}

}  // namespace rlcpp
