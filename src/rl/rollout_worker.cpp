// A rollout worker of the distributed run: generates the rounds trainer rank 0 sends, with the
// weights it last sent, and delivers each round's groups to the trainers. It holds no run state
// of its own beyond the weights, so a run resumes with any number of workers.
#include <torch/torch.h>

#include "engine/engine.h"
#include "parallel/weight_sync.h"
#include "reward/reward_function.h"
#include "rl/control.h"
#include "rl/distributed.h"
#include "rl/rollout.h"
#include "rl/rollout_channel.h"
#include "rl/run_state.h"
#include "text/tokenizer.h"
#include "util/trace.h"

namespace rlcpp {

void run_rollout_worker(const RunConfig& c, const Topology& topo) {
  const RewardFunction reward = run_reward_function(c);
  auto tokenizer = Tokenizer::from_dir(c.model);
  auto policy = load_policy(c, std::nullopt);  // the trainer's shape (adapters included); weights come by sync
  Engine engine(policy, run_engine_config(c), tokenizer);
  RolloutGenerator generator(c, policy->config(), *tokenizer, &engine, nullptr, nullptr, &reward);
  RolloutChannel channel(topo.world, nullptr, topo.num_trainers, topo.num_inferencers);
  WeightSync weight_sync(topo.sync_group, static_cast<uint64_t>(c.sync_bucket_mb) << 20, c.param_sync_comm_type);
  for (;;) {
    const ControlMessage message = recv_control(*topo.world);
    switch (message.op) {
      case ControlMessage::Op::kStop: trace::write(); return;
      case ControlMessage::Op::kSync: {
        const SyncStats stats = weight_sync.sync({}, 0, [&](const NamedTensors& bucket) { engine.update_weights(bucket); });
        engine.set_version(stats.version);
        if (message.verify) topo.world->send_bytes(std::to_string(weights_hash(policy->trained_weights())), 0, kHashTag);
        break;
      }
      case ControlMessage::Op::kRound: {
        trace::Span span("round");
        RolloutRound round = generator.generate(message.picks);
        channel.deliver(round, engine.version());
        break;
      }
    }
  }
}

}  // namespace rlcpp
