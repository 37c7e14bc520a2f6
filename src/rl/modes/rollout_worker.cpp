// A rollout worker of the distributed run: generates the rounds trainer rank 0 sends, with the
// weights it last sent, and delivers each round's groups to the trainers. It holds no run state
// of its own beyond the weights (and the next round's streamed prompts, which a checkpoint saves
// with the round ahead), so a run resumes with any number of workers.
//
// --stream-prompts: a round comes with the next one's prompts, which its engine decodes in the slots
// the round leaves free; the worker holds them, as far as they got, for the next round.
//
// Partial rollouts: a round sent with WeightSwitches takes the versions the trainers send while it
// generates, one per switch (the first few before it starts, when --max-staleness with
// --stale-policy drop says so). Each one is received as soon as it arrives (checked between engine
// steps, and while the round is graded), held aside, and taken at the engine step the schedule
// names (waiting there for one not sent yet), or at once with `asap`; a round that ends first takes
// the rest before it is delivered.
#include <torch/torch.h>

#include <algorithm>
#include <deque>
#include <optional>

#include "engine/engine.h"
#include "parallel/weight_sync.h"
#include "reward/reward_function.h"
#include "rl/modes/control.h"
#include "rl/modes/distributed.h"
#include "rl/modes/reward_rank.h"
#include "rl/rollout/model_reward.h"
#include "rl/rollout/rollout.h"
#include "rl/rollout/rollout_channel.h"
#include "rl/run/run_state.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/trace.h"

namespace rlcpp {

namespace {

// The weights trainer rank 0 sends: received into the engine, or held until the engine takes them.
class WeightInbox {
 public:
  WeightInbox(const RunConfig& c, const Topology& topo, Engine& engine, Transformer& policy)
      : topo_(topo), engine_(engine), policy_(policy),
        sync_(topo.sync_group, static_cast<uint64_t>(c.parallel.sync_bucket_mb) << 20, c.parallel.param_sync_comm_type) {}

  // The next control message: one that arrived while a round generated, else the next sent.
  ControlMessage next() {
    if (!pending_) return recv_control(*topo_.world);
    ControlMessage m = std::move(*pending_);
    pending_.reset();
    return m;
  }
  // A sync whose message was received: the weights go into the engine now.
  void receive_now(const ControlMessage& sync) {
    const SyncStats stats = sync_.sync({}, 0, [&](const NamedTensors& bucket) { engine_.update_weights(bucket); });
    engine_.set_version(stats.version);
    if (sync.verify) send_hash(policy_.trained_weights());
  }
  // Every sync already sent is received and held (other messages wait for next()).
  void poll() {
    while (!pending_ && topo_.world->probe(0, kControlTag)) {
      ControlMessage m = recv_control(*topo_.world);
      if (m.op != ControlMessage::Op::kSync) {
        pending_ = std::move(m);
        return;
      }
      tell("hold");
      hold(m);
    }
  }
  // The next version goes into the engine: the oldest held, else the next sent (waited for).
  void take_one() {
    if (held_.empty()) {
      trace::Span wait("switch_wait");  // the schedule's step came before the weights
      const ControlMessage m = next_sync();
      tell("now");
      return receive_now(m);
    }
    tell("take");
    take_held_one();
  }
  // --rollout-tp: while the engine's other ranks serve a round, the first rank tells them what it
  // does with weights (they receive the same messages and buckets) and they follow().
  void set_followers_serving(bool serving) { tell_ = serving && engine_.has_followers(); }
  void follow(const std::string& op) {
    if (op == "take") return take_held_one();
    const ControlMessage m = next_sync();
    RLCPP_CHECK(op == "hold" || op == "now", "unknown weight operation \"{}\" from the engine's first rank", op);
    if (op == "hold") hold(m);
    else receive_now(m);
  }
  bool holding() const { return !held_.empty(); }

 private:
  struct Held {
    int64_t version = 0;
    std::vector<NamedTensors> buckets;
  };
  void tell(const char* op) {
    if (tell_) engine_.tell_followers(op);
  }
  ControlMessage next_sync() {
    ControlMessage m = recv_control(*topo_.world);
    RLCPP_CHECK(m.op == ControlMessage::Op::kSync, "a rollout worker waiting for weights got control op {}",
                static_cast<int>(m.op));
    return m;
  }
  void take_held_one() {
    RLCPP_CHECK(!held_.empty(), "taking held weights with none held");
    Held h = std::move(held_.front());
    held_.pop_front();
    for (const auto& bucket : h.buckets) engine_.update_weights(bucket);
    engine_.set_version(h.version);
  }
  void hold(const ControlMessage& sync) {
    Held h;
    // Each bucket arrives in tensors of its own (WeightSync allocates them), kept as they are.
    const SyncStats stats = sync_.sync({}, 0, [&](const NamedTensors& bucket) { h.buckets.push_back(bucket); });
    h.version = stats.version;
    if (sync.verify && engine_.leads()) {
      // As the engine will hold them: each whole (as sent), in the policy's dtype and order.
      uint64_t hash = weights_hash_seed();
      for (const auto& [name, t] : policy_.trained_weights()) {
        const torch::Tensor* got = nullptr;
        for (const auto& bucket : h.buckets) {
          for (const auto& [n, v] : bucket) {
            if (n == name) got = &v;
          }
        }
        RLCPP_CHECK(got != nullptr, "weights of version {} arrived without \"{}\"", h.version, name);
        hash = weights_hash_add(hash, name, got->to(t.scalar_type()));
      }
      topo_.world->send_bytes(std::to_string(hash), 0, kHashTag);
    }
    held_.push_back(std::move(h));
  }
  // The hash of the whole weights, made whole on the engine's first rank.
  void send_hash(const NamedTensors& weights) {
    uint64_t h = weights_hash_seed();
    for (const auto& [name, t] : weights) {
      const auto whole = policy_.gather_weight(name, t, 0);
      if (engine_.leads()) h = weights_hash_add(h, name, whole);
    }
    if (engine_.leads()) topo_.world->send_bytes(std::to_string(h), 0, kHashTag);
  }

  const Topology& topo_;
  Engine& engine_;
  Transformer& policy_;
  WeightSync sync_;
  std::deque<Held> held_;
  std::optional<ControlMessage> pending_;
  bool tell_ = false;  // the engine's other ranks are serving: they follow what this rank does
};

// One round on the engine's first rank, fresh (kRound) or going on from where a checkpoint cut it
// (kResume): the versions it takes (partial rollouts) and, at a checkpoint's version, the cut,
// whose record goes to trainer 0 (the round then goes on, as a resumed run's does from it).
class RoundRun {
 public:
  // `grading`: what else this thread does while another grades the round (null: nothing).
  // `streamed`: --stream-prompts, this round's prompts as far as the round before got them, taken
  // by a round sent ahead (another round starts them anew: a checkpoint between the two holds none).
  RoundRun(const RunConfig& c, const Topology& topo, Engine& engine, RolloutGenerator& generator, WeightInbox& inbox,
           const ControlMessage& message, std::function<void()> grading, std::optional<StreamedPrompts> streamed)
      : c_(c), topo_(topo), engine_(engine), generator_(generator), inbox_(inbox), grading_(std::move(grading)) {
    if (message.op == ControlMessage::Op::kRound) {
      switches_ = message.switches;
      if (c_.staleness.completion_order) {
        start_pool(message, std::move(streamed));
        return;
      }
      picks_ = message.picks;
      if (streamed && switches_.during_round && same_prompts(streamed->picks, picks_)) streamed_ = std::move(streamed->progress);
      generator_.set_streamed(message.next.empty() ? std::nullopt : std::optional(StreamedPrompts{message.next, {}}));
      return;
    }
    RoundInFlight r = round_in_flight_from_json(message.in_flight, "a round in flight from trainer rank 0");
    RLCPP_CHECK(r.source == "engine", "a round the {} cut resumed on a rollout worker", r.source);
    RLCPP_CHECK(engine.version() == r.version, "a round cut at version {} resumed on an engine holding version {}",
                r.version, engine.version());
    switches_ = std::move(r.switches);
    picks_ = std::move(r.picks);
    taken_ = r.taken;
    restarted_ = r.restarted;
    step_ = r.step;
    progress_ = std::move(r.progress);
    graded_ = std::move(r.graded);
    generator_.set_streamed(std::move(r.streamed));
  }

  // The round generated and graded, with the version it ends on (every version it takes taken).
  std::pair<RolloutRound, int64_t> run() {
    // Versions the staleness bound wants the round to start from (their weights waited for).
    while (!graded_ && !progress_ && taken_ < switches_.start_after) {
      if (take()) send_cut();
    }
    RolloutRound round;
    if (graded_) {
      round = std::move(*graded_);
    } else {
      if (switches_.during_round) {
        engine_.set_step_hook([&] { on_step(); }, c_.staleness.recompute_kv);
        generator_.set_grading_hook([&] {
          inbox_.poll();
          if (grading_) grading_();
        });
        generator_.set_cut_hook([&](const RoundProgress& progress) { send_cut(&progress); });
      }
      if (c_.staleness.completion_order) {
        StreamedPrompts pool{picks_, progress_ ? std::move(*progress_) : RoundProgress{}};
        round = generator_.generate_pool(pool, c_.round_prompts());
        generator_.set_streamed(std::move(pool));  // what is left goes on in the next round
      } else {
        round = generator_.generate(picks_, progress_ ? std::move(*progress_) : streamed_ ? std::move(*streamed_) : RoundProgress{});
      }
      generator_.set_grading_hook(nullptr);
      generator_.set_cut_hook(nullptr);
      engine_.set_step_hook(nullptr);
    }
    round.restarted += restarted_;
    const int64_t version = engine_.version();
    // The versions the trainers send while this round is collected: taken now (they come before
    // the trainers collect), so the trainers never wait on a worker stuck delivering.
    while (taken_ < switches_.versions()) {
      if (take()) send_cut(nullptr, &round);
    }
    return {std::move(round), version};
  }

 private:
  // The next version, into the engine: whether a checkpoint cuts the round there.
  bool take() {
    inbox_.take_one();
    ++taken_;
    return std::find(switches_.cuts.begin(), switches_.cuts.end(), taken_) != switches_.cuts.end();
  }
  // Before each engine step: the versions due (arrived, with asap), a checkpoint's cutting the call.
  void on_step() {
    inbox_.poll();
    const int64_t first = switches_.start_after;
    for (;;) {
      const bool due = switches_.asap ? inbox_.holding()
                                      : taken_ - first < static_cast<int64_t>(switches_.at.size()) &&
                                            switches_.at[static_cast<size_t>(taken_ - first)] <= step_;
      if (!due || taken_ >= switches_.versions()) break;
      if (take()) {
        engine_.cut_generation();  // the generator sends the cut with the round's progress
        break;
      }
    }
    ++step_;
  }
  // --group-order completion: the round's pool is what the worker held from the round before (as
  // far as it got, when this round goes on from it; else anew), or on a worker that holds none the
  // round's prompts (trainer 0 sends a resumed run's pool so), then the next round's prompts.
  void start_pool(const ControlMessage& message, std::optional<StreamedPrompts> held) {
    StreamedPrompts pool;
    if (held) {
      pool.picks = std::move(held->picks);
      if (switches_.during_round) {
        pool.progress = std::move(held->progress);
        restarted_ = restart_stale(pool.progress);
      }
    } else {
      pool.picks = message.picks;
    }
    const auto G = static_cast<size_t>(c_.rollout.num_generations);
    for (const auto& pick : message.next) {
      pool.picks.push_back(pick);
      if (!pool.progress.samples.empty()) pool.progress.samples.resize(pool.picks.size() * G);  // begun with the call
    }
    RLCPP_CHECK(std::is_sorted(pool.picks.begin(), pool.picks.end(), [](const PromptPick& a, const PromptPick& b) { return a.id < b.id; }),
                "a rollout worker's pool of prompts out of the order they were picked");
    picks_ = std::move(pool.picks);
    if (!pool.progress.samples.empty()) progress_ = std::move(pool.progress);
  }
  // --max-staleness with --stale-policy drop: a group held from the rounds before whose oldest
  // token the bound would no longer allow when the steps after this round train it (the round ends
  // on the versions it takes) is begun anew rather than trained and dropped. Returns how many.
  int64_t restart_stale(RoundProgress& progress) const {
    if (c_.staleness.max_staleness < 0 || c_.staleness.stale_finish) return 0;
    const int64_t oldest_allowed =
        engine_.version() + switches_.versions() + c_.steps_per_round() - 1 - c_.staleness.max_staleness;
    const auto G = static_cast<size_t>(c_.rollout.num_generations);
    int64_t restarted = 0;
    for (size_t first = 0; first + G <= progress.samples.size(); first += G) {
      const auto begin = progress.samples.begin() + static_cast<std::ptrdiff_t>(first);
      const bool stale = std::any_of(begin, begin + static_cast<std::ptrdiff_t>(G), [&](const RoundProgress::Piece& p) {
        return !p.sample.out.token_ids.empty() && p.sample.out.policy_version < oldest_allowed;
      });
      if (!stale) continue;
      std::fill(begin, begin + static_cast<std::ptrdiff_t>(G), RoundProgress::Piece{});
      ++restarted;
    }
    return restarted;
  }
  static bool same_prompts(const std::vector<PromptPick>& a, const std::vector<PromptPick>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const PromptPick& x, const PromptPick& y) { return x.id == y.id; });
  }
  // The round as it stands at a cut, to trainer 0: its progress while it generates, the graded
  // round once generated, neither before it starts; and the next round's prompts streamed so far.
  void send_cut(const RoundProgress* progress = nullptr, const RolloutRound* graded = nullptr) {
    trace::Span span("cut");
    RoundInFlight record;
    record.streamed = generator_.streamed();
    record.picks = picks_;
    record.switches = switches_;
    record.taken = taken_;
    record.step = step_;
    record.version = engine_.version();
    record.restarted = restarted_;
    if (progress != nullptr) record.progress = *progress;
    if (graded != nullptr) record.graded = *graded;
    topo_.world->send_bytes(to_json(record).dump(), 0, kInFlightTag);
  }

  const RunConfig& c_;
  const Topology& topo_;
  Engine& engine_;
  RolloutGenerator& generator_;
  WeightInbox& inbox_;
  std::function<void()> grading_;
  WeightSwitches switches_;
  std::vector<PromptPick> picks_;
  int64_t restarted_ = 0;  // --group-order completion: held groups begun anew (restart_stale)
  int64_t taken_ = 0;  // versions taken since the round started
  int64_t step_ = 0;   // engine steps of the round (its generate calls') so far
  std::optional<RoundProgress> progress_;  // resumed: where generation goes on
  std::optional<RolloutRound> graded_;     // resumed: a round cut once generated
  std::optional<RoundProgress> streamed_;  // --stream-prompts: its samples the round before streamed
};

}  // namespace

void run_rollout_worker(const RunConfig& c, const Topology& topo) {
  auto tokenizer = Tokenizer::from_dir(c.model.path);
  // The trainer's shape (adapters included), this rank's part of it under --rollout-tp; weights come by sync.
  auto policy = load_policy(c, std::nullopt, topo.tp_group);
  Engine engine(policy, run_engine_config(c), tokenizer);
  // The engine's first rank grades its rounds (a reward model is loaded there only, or held by a
  // reward rank of its own).
  std::optional<RewardRankClient> reward_rank;
  if (engine.leads() && topo.num_reward > 0) reward_rank.emplace(topo, topo.reward_rank_of(topo.replica()));
  RowScorer remote;
  if (reward_rank) remote = [&](const std::vector<std::vector<int32_t>>& rows) { return reward_rank->score(rows); };
  const RewardFunction reward = engine.leads() ? make_run_reward(c.reward, c.runtime.device, c.runtime.dtype, remote) : RewardFunction{};
  std::function<void()> grading;
  if (reward_rank) grading = [&] { reward_rank->pump(); };
  RolloutGenerator generator(c, policy->config(), *tokenizer, &engine, nullptr, nullptr, &reward);
  RolloutChannel channel(topo);
  WeightInbox inbox(c, topo, engine, *policy);
  std::optional<StreamedPrompts> streamed;  // --stream-prompts: the next round's, as the last one left them
  for (;;) {
    const ControlMessage message = inbox.next();
    switch (message.op) {
      case ControlMessage::Op::kStop:
        if (reward_rank) reward_rank->stop();
        trace::write();
        return;
      case ControlMessage::Op::kSync: inbox.receive_now(message); break;
      case ControlMessage::Op::kRound:
      case ControlMessage::Op::kResume: {
        trace::Span span("round");
        if (!engine.leads()) {  // the engine's other ranks run its steps, and take its weights with it
          engine.set_follower_hook([&](const std::string& op) { inbox.follow(op); });
          engine.serve();
          break;
        }
        inbox.set_followers_serving(true);
        auto [round, version] = RoundRun(c, topo, engine, generator, inbox, message, grading, std::move(streamed)).run();
        streamed = generator.take_streamed();
        inbox.set_followers_serving(false);
        engine.release_followers();
        channel.deliver(round, version);
        break;
      }
    }
  }
}

}  // namespace rlcpp
