// A rollout worker of the distributed run: generates the rounds trainer rank 0 sends, with the
// weights it last sent, and delivers each round's groups to the trainers. It holds no run state
// of its own beyond the weights, so a run resumes with any number of workers.
#include <torch/torch.h>

#include "engine/engine.h"
#include "parallel/weight_sync.h"
#include "reward/reward_function.h"
#include "rl/modes/control.h"
#include "rl/modes/distributed.h"
#include "rl/rollout/rollout.h"
#include "rl/rollout/rollout_channel.h"
#include "rl/run/run_state.h"
#include "text/tokenizer.h"
#include "util/trace.h"

namespace rlcpp {

void run_rollout_worker(const RunConfig& c, const Topology& topo) {
  const RewardFunction reward = make_reward_function(c.reward);
  auto tokenizer = Tokenizer::from_dir(c.model.path);
  // The trainer's shape (adapters included), this rank's part of it under --rollout-tp; weights come by sync.
  auto policy = load_policy(c, std::nullopt, topo.tp_group);
  Engine engine(policy, run_engine_config(c), tokenizer);
  RolloutGenerator generator(c, policy->config(), *tokenizer, &engine, nullptr, nullptr, &reward);
  RolloutChannel channel(topo);
  WeightSync weight_sync(topo.sync_group, static_cast<uint64_t>(c.parallel.sync_bucket_mb) << 20, c.parallel.param_sync_comm_type);
  for (;;) {
    const ControlMessage message = recv_control(*topo.world);
    switch (message.op) {
      case ControlMessage::Op::kStop: trace::write(); return;
      case ControlMessage::Op::kSync: {
        // Every rank receives the whole weights and keeps its part.
        const SyncStats stats = weight_sync.sync({}, 0, [&](const NamedTensors& bucket) { engine.update_weights(bucket); });
        engine.set_version(stats.version);
        if (message.verify) {
          // The hash of the whole weights, made whole on the engine's first rank.
          uint64_t h = weights_hash_seed();
          for (const auto& [name, t] : policy->trained_weights()) {
            const auto whole = policy->gather_weight(name, t, 0);
            if (engine.leads()) h = weights_hash_add(h, name, whole);
          }
          if (engine.leads()) topo.world->send_bytes(std::to_string(h), 0, kHashTag);
        }
        break;
      }
      case ControlMessage::Op::kRound: {
        trace::Span span("round");
        if (!engine.leads()) {  // the engine's other ranks run its steps
          engine.serve();
          break;
        }
        RolloutRound round = generator.generate(message.picks);
        engine.release_followers();
        channel.deliver(round, engine.version());
        break;
      }
    }
  }
}

}  // namespace rlcpp
