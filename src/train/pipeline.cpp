#include "train/pipeline.h"

#include <torch/autograd.h>

#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>

#include "model/transformer.h"
#include "util/error.h"
#include "util/failpoint.h"

namespace rlcpp {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Micro-batch k's activation travels under tag 2k, its gradient under 2k + 1 (k taken modulo a
// bound that keeps tags within MPI's guaranteed 32767; messages of one tag between two ranks stay
// in order, and no two micro-batches that far apart are ever in flight together).
int activation_tag(int64_t k) { return static_cast<int>(2 * (k % 16000)); }
int gradient_tag(int64_t k) { return activation_tag(k) + 1; }

}  // namespace

const EnumTable<StageBalance>& stage_balances() {
  static const EnumTable<StageBalance> table(
      "stage balance", {{StageBalance::kWork, "work", "multiply-adds per token (a layer's weights, the head's vocabulary x hidden)"},
                        {StageBalance::kTime, "time", "a layer, the embedding and the head timed on this machine at start-up"}});
  return table;
}

StageCosts work_stage_costs(const ModelConfig& c) {
  // Balanced by parameter count instead, the last stage of Qwen2.5-0.5B at --pp 2 would compute a
  // third more than the first (its head is as much work as 9 of its 24 layers).
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size();
  const double attention = static_cast<double>(h * q + 2 * h * kv + q * h);
  const double mlp = 3.0 * static_cast<double>(h * c.intermediate_size);
  return {attention + mlp, 0, static_cast<double>((c.classifier() ? c.num_labels : c.vocab_size) * h)};
}

namespace {

// Seconds of `pass` (a forward and its backward), the best of `repeats` after a warm-up.
double best_seconds(const std::function<void()>& pass, int repeats) {
  pass();
  double best = std::numeric_limits<double>::infinity();
  for (int k = 0; k < repeats; ++k) {
    const auto start = Clock::now();
    pass();
    best = std::min(best, since(start));
  }
  return best;
}

}  // namespace

StageCosts measure_stage_costs(const ModelConfig& config, ModelOptions options, const LoraConfig& lora, int64_t rows,
                               int64_t length, int repeats) {
  // Three layers of the model's shape: stage 0 of 2 of the first two is the embedding and a layer,
  // stage 1 of 3 a layer alone, stage 1 of 2 a layer, the norm and the head.
  ModelConfig shape = config;
  options.tp_group = nullptr;
  options.frozen_dtype = torch::ScalarType::Undefined;
  auto ids = torch::randint(0, config.vocab_size, {rows, length}, torch::kInt64);
  auto input = [&] {
    return (torch::randn({rows, length, config.hidden_size}, torch::kFloat64) * 0.02).to(options.dtype).requires_grad_();
  };
  auto timed = [&](int64_t layers, int index, int count, const std::function<void(Transformer&)>& pass) {
    shape.num_hidden_layers = layers;
    options.stage = {index, count, index, index + 1};
    Transformer model(shape, options);
    model.init_weights(0.02, /*seed=*/1);
    if (lora.enabled()) model.add_adapters(lora, /*seed=*/1);
    model.train();
    // Gradients accumulate over the passes as over a step's micro-batches: the warm-up pass makes
    // them (a vocabulary x hidden one among them), the timed ones add to them.
    return best_seconds([&] { pass(model); }, repeats);
  };
  StageCosts costs;
  costs.layer = timed(3, 1, 3, [&](Transformer& m) {
    ForwardContext context;
    context.stage_input = input();
    m.hidden_states(ids, {}, context).sum().backward();
  });
  const double first = timed(2, 0, 2, [&](Transformer& m) { m.hidden_states(ids).sum().backward(); });
  const double last = timed(2, 1, 2, [&](Transformer& m) {
    ForwardContext context;
    context.stage_input = input();
    m.token_logprobs(ids, ids, 1.0, {}, nullptr, context).sum().backward();
  });
  costs.embedding = std::max(0.0, first - costs.layer);
  costs.head = std::max(0.0, last - costs.layer);
  return costs;
}

namespace {

// Stage `index` of `count`: balance_stages over every layer's cost and the two ends'.
PipelineStage stage_of(const ModelConfig& c, int index, int count, int64_t layer, int64_t embedding, int64_t head) {
  if (count < 1 || count > c.num_hidden_layers) {
    throw_user_error("--pp {}: a model of {} decoder layers makes at most {} pipeline stages (each holds one layer "
                     "or more); lower --pp",
                     count, c.num_hidden_layers, c.num_hidden_layers);
  }
  const auto layers = balance_stages(std::vector<int64_t>(static_cast<size_t>(c.num_hidden_layers), layer), embedding, head, count);
  PipelineStage stage;
  stage.index = index;
  stage.count = count;
  stage.layer_begin = layers.at(static_cast<size_t>(index)).first;
  stage.layer_end = layers.at(static_cast<size_t>(index)).last;
  return stage;
}

}  // namespace

PipelineStage pipeline_stage(const ModelConfig& c, int index, int count) {
  const StageCosts work = work_stage_costs(c);  // whole numbers of multiply-adds
  return stage_of(c, index, count, std::llround(work.layer), std::llround(work.embedding), std::llround(work.head));
}

PipelineStage pipeline_stage(const ModelConfig& c, int index, int count, const StageCosts& costs) {
  RLCPP_CHECK(costs.layer > 0 && costs.embedding >= 0 && costs.head >= 0, "stage costs {} (layer), {} (embedding), {} (head)",
              costs.layer, costs.embedding, costs.head);
  const double unit = static_cast<double>(1 << 20) / costs.layer;  // a layer is 2^20 units
  return stage_of(c, index, count, 1 << 20, std::llround(costs.embedding * unit), std::llround(costs.head * unit));
}

StageTimes run_stage(Communicator* group, const StageWork& work, bool backward, const torch::TensorOptions& activations) {
  const int stages = group != nullptr ? group->size() : 1;
  const int stage = group != nullptr ? group->rank() : 0;
  const bool first = stage == 0, last = stage == stages - 1;
  RLCPP_CHECK(work.forward, "a pipeline stage without its forward");
  RLCPP_CHECK(first || work.input_shape, "pipeline stage {} without the shape of its input", stage);
  std::vector<PipelinePass> passes;
  if (backward) {
    passes = one_forward_one_backward(stage, stages, work.micros);
  } else {
    for (int64_t k = 0; k < work.micros; ++k) passes.push_back({true, k});
  }
  const auto start = Clock::now();
  StageTimes times;
  // What each pass receives: a forward after the first stage its input, a backward before the
  // last stage its output's gradient. The next pass's receive is posted before this one computes.
  struct Receive {
    torch::Tensor buffer;
    std::unique_ptr<CommRequest> request;
  };
  std::deque<torch::Tensor> outputs, inputs;  // forwards not yet run backward, in micro-batch order
  auto post = [&](const PipelinePass& pass) -> Receive {
    if (pass.forward && !first) {
      Receive r{torch::empty(work.input_shape(pass.micro), activations), nullptr};
      r.request = group->irecv(r.buffer, stage - 1, activation_tag(pass.micro));
      return r;
    }
    if (!pass.forward && !last) {
      // Backwards go in micro-batch order, so the oldest output held is this pass's.
      Receive r{torch::empty(outputs.front().sizes(), activations), nullptr};
      r.request = group->irecv(r.buffer, stage + 1, gradient_tag(pass.micro));
      return r;
    }
    return {};
  };
  std::deque<std::unique_ptr<CommRequest>> sends;
  auto send = [&](const torch::Tensor& tensor, int to, int tag) {
    times.bytes_sent += tensor.nbytes();
    sends.push_back(group->isend(tensor.detach(), to, tag));
    // A send is complete once its neighbour has posted the receive, which needs nothing more from
    // this stage: waiting for the oldest cannot deadlock, and bounds the copies held.
    while (sends.size() > 2) {
      sends.front()->wait();
      sends.pop_front();
    }
  };
  auto wait = [&](Receive& r) {
    if (r.request == nullptr) return;
    const auto waited = Clock::now();
    r.request->wait();
    times.wait_seconds += since(waited);
  };
  std::optional<Receive> next;
  for (size_t i = 0; i < passes.size(); ++i) {
    const PipelinePass& pass = passes[i];
    // A backward's receive needs its output's shape, known once the forward has run: posted here
    // when the pass before was that forward.
    Receive current = next ? std::move(*next) : post(pass);
    next.reset();
    if (pass.forward) {
      wait(current);
      torch::Tensor input;
      if (!first) input = backward ? current.buffer.requires_grad_(true) : current.buffer;
      // A backward next needs the shape of its output: held already unless it is this forward's.
      const bool more = i + 1 < passes.size();
      if (more && (passes[i + 1].forward || !outputs.empty())) next = post(passes[i + 1]);
      auto output = work.forward(pass.micro, input);
      if (!last) send(output, stage + 1, activation_tag(pass.micro));
      if (backward) {
        outputs.push_back(output);
        inputs.push_back(input);
      }
      if (more && !next) next = post(passes[i + 1]);
    } else {
      auto output = std::move(outputs.front());
      auto input = std::move(inputs.front());
      outputs.pop_front();
      inputs.pop_front();
      if (i + 1 < passes.size()) next = post(passes[i + 1]);
      wait(current);
      failpoint("backward");
      if (last) {
        output.backward();
      } else {
        torch::autograd::backward({output}, {current.buffer});
      }
      if (!first) {
        const auto grad = input.grad();
        send(grad.defined() ? grad : torch::zeros_like(input), stage - 1, gradient_tag(pass.micro));
      }
    }
  }
  if (next && next->request) next->request->wait();
  for (auto& s : sends) s->wait();
  times.total_seconds = since(start);
  return times;
}

}  // namespace rlcpp
