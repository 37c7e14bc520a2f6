#include "rl/modes/worker_source.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>

#include "rl/modes/control.h"
#include "util/error.h"
#include "util/trace.h"

namespace rlcpp {

namespace {

// Engine e's share of prompts dealt over `engines`.
std::vector<PromptPick> part_of(const std::vector<PromptPick>& all, size_t e, size_t engines) {
  const size_t n = all.size();
  return {all.begin() + static_cast<long>(n * e / engines), all.begin() + static_cast<long>(n * (e + 1) / engines)};
}

// ZeRO-3's optimizer when the parameters are sharded, else nullptr.
ZeroOptimizer* sharded_parameters(RunState& run) {
  auto* zero = run.trainer->zero();
  return zero != nullptr && zero->stage() == 3 ? zero : nullptr;
}

// Under ZeRO-3 or tensor parallelism (the other trainers take part in a sync): whether a sync
// follows, from trainer 0 to the other trainers.
bool announce_sync(const Topology& topology, RunState& run, bool syncs) {
  const bool others_take_part =
      sharded_parameters(run) != nullptr || run.policy->tensor_parallel() != nullptr || topology.train_pp > 1;
  if (!others_take_part || topology.num_trainers == 1) return syncs;
  auto flag = torch::tensor({syncs ? 1.0 : 0.0}, torch::kFloat64);
  topology.role_group->broadcast(flag, 0);
  return flag.item<double>() > 0;
}

// The other trainers' part of trainer 0's sync, as it asks for each tensor: ZeRO-3's layers
// streamed (every trainer of a data-parallel group gathers them alike), the first replica's parts
// gathered onto trainer 0, and its later pipeline stages' weights sent to it stage by stage.
void follow_sync(const Topology& topology, RunState& run) {
  if (!announce_sync(topology, run, false)) return;
  if (topology.train_pp > 1 && topology.replica() == 0 && topology.stage() > 0) {
    send_stage_weights(topology, *run.policy);
    return;
  }
  auto* zero = sharded_parameters(run);
  std::optional<LayerByLayer> stream;
  if (zero != nullptr) stream.emplace(*zero, run.policy->layer_trainable_parameters());
  if (topology.replica() == 0) {
    for (const auto& [name, t] : topology.train_pp > 1 ? stage_weights(*run.policy) : run.policy->trained_weights()) {
      run.policy->gather_weight(name, stream ? stream->get(t) : t, 0);
    }
  }
  if (stream) stream->finish();
}

}  // namespace

WorkerSource::WorkerSource(const RunConfig& c, const Topology& topo, RunState& run)
    : c_(c), topo_(topo), run_(run), channel_(topo) {
  if (leader()) {
    weight_sync_ = std::make_unique<WeightSync>(topo.sync_group, static_cast<uint64_t>(c.parallel.sync_bucket_mb) << 20,
                                                c.parallel.param_sync_comm_type);
  }
  if (leader() && c.staleness.completion_order) {
    const size_t engines = static_cast<size_t>(topo.num_engines());
    const auto& saved = run.plan.saved.round.pool;
    pools_restored_ = !saved.empty();
    if (saved.size() == engines) {
      pool_ = saved;
    } else {  // another number of engines: the prompts are dealt anew
      std::vector<PromptPick> all;
      for (const auto& picks : saved) all.insert(all.end(), picks.begin(), picks.end());
      std::stable_sort(all.begin(), all.end(), [](const PromptPick& a, const PromptPick& b) { return a.id < b.id; });
      for (size_t e = 0; e < engines; ++e) pool_.push_back(part_of(all, e, engines));
    }
  }
}

void WorkerSource::submit(std::vector<PromptPick> picks, const WeightSwitches& switches) {
  if (!leader()) return;
  const size_t engines = static_cast<size_t>(topo_.num_engines());
  for (size_t e = 0; e < engines; ++e) {
    std::vector<PromptPick> own = part_of(picks, e, engines);
    const std::vector<PromptPick> next = part_of(next_, e, engines);
    if (c_.staleness.completion_order) {
      // The workers hold their pools from round to round: only the first round (a resumed run's
      // with the pools its checkpoint saved) sends one, and each round adds the next round's prompts.
      if (pools_sent_) own.clear();
      else if (pools_restored_) own = pool_[e];
      else pool_[e] = own;
      pool_[e].insert(pool_[e].end(), next.begin(), next.end());
    }
    const int first = topo_.engine_leader(static_cast<int>(e));
    send_control(*topo_.world, ControlMessage::round(std::move(own), switches, next), first);
    for (int r = 1; r < topo_.rollout_tp; ++r) send_control(*topo_.world, ControlMessage::round({}), first + r);  // they serve
  }
  next_.clear();
  pools_sent_ = true;
}

bool WorkerSource::cuts_rounds() const {
  // An external environment's episodes live in its processes, which a checkpoint cannot save.
  return c_.staleness.partial_rollout && c_.staleness.cut_at_checkpoint && c_.episode.env_cmd.empty();
}

std::vector<nlohmann::json> WorkerSource::take_cut() {
  std::vector<nlohmann::json> in_flight;
  if (!leader()) return in_flight;
  trace::Span wait("wait_cut");
  for (int e = 0; e < topo_.num_engines(); ++e) {
    const std::string bytes = topo_.world->recv_bytes(topo_.engine_leader(e), kInFlightTag);
    try {
      in_flight.push_back(nlohmann::json::parse(bytes));
    } catch (const nlohmann::json::exception& error) {
      throw InternalError(fmt::format("a malformed round in flight from rollout engine {}: {}", e, error.what()));
    }
  }
  return in_flight;
}

bool WorkerSource::resume_cut(const std::vector<nlohmann::json>& in_flight) {
  const bool servers = std::any_of(in_flight.begin(), in_flight.end(),
                                   [](const nlohmann::json& r) { return r.value("source", "engine") != "engine"; });
  if (servers || static_cast<int>(in_flight.size()) != topo_.num_engines() || !cuts_rounds()) {
    if (leader()) {
      spdlog::warn("the checkpoint holds a round in flight on {} rollout {}(s) and this run has {} rollout engine(s){}: "
                   "its prompts are generated anew (nothing is lost; its samples differ from the run that was cut)",
                   in_flight.size(), servers ? "server" : "engine", topo_.num_engines(),
                   cuts_rounds() ? "" : " without --checkpoint-round cut");
    }
    return false;
  }
  if (!leader()) return true;
  pools_sent_ = true;  // each worker's pool is in its round's record
  for (int e = 0; e < topo_.num_engines(); ++e) {
    const int first = topo_.engine_leader(e);
    send_control(*topo_.world, ControlMessage::resume(in_flight[static_cast<size_t>(e)]), first);
    for (int r = 1; r < topo_.rollout_tp; ++r) send_control(*topo_.world, ControlMessage::round({}), first + r);  // they serve
  }
  return true;
}

RoundReceipt WorkerSource::collect(std::deque<SampleGroup>& buffer) {
  RoundReceipt receipt;
  const size_t before = buffer.size();
  if (topo_.replica_first()) receipt = channel_.collect(buffer);
  if (leader() && c_.staleness.completion_order) {  // what the round delivered leaves the pools
    std::set<int64_t> delivered(receipt.delivered.begin(), receipt.delivered.end());
    for (const auto& g : receipt.discarded) delivered.insert(g.id);
    for (auto& picks : pool_) std::erase_if(picks, [&](const PromptPick& p) { return delivered.count(p.id) != 0; });
    restarted_ += receipt.restarted;
  }
  if (topo_.replica_size() > 1) {  // the replica's other ranks get the same groups
    std::string bytes;
    if (topo_.replica_first()) bytes = encode_groups(std::vector<SampleGroup>(buffer.begin() + static_cast<long>(before), buffer.end()));
    topo_.replica_group->broadcast_bytes(bytes, 0);
    if (!topo_.replica_first()) {
      for (auto& g : decode_groups(bytes)) buffer.push_back(std::move(g));
    }
  }
  return receipt;
}

double WorkerSource::publish(int64_t version, bool resend) {
  if (!leader()) {
    follow_sync(topo_, run_);
    return 0;
  }
  return sync_weights(version, resend);
}

double WorkerSource::sync_weights(int64_t version, bool resend) {
  if (!announce_sync(topo_, run_, resend || version != synced_version_)) return 0;
  const int T = topo_.num_trainers, I = topo_.num_inferencers;
  for (int w = 0; w < I; ++w) send_control(*topo_.world, ControlMessage::sync(c_.parallel.verify_sync), T + w);
  const bool pipeline = topo_.train_pp > 1;
  // Under LoRA, the adapters alone; on a pipeline's first stage, its own weights (the others follow).
  const NamedTensors weights = pipeline ? stage_weights(*run_.policy) : run_.policy->trained_weights();
  SyncStats stats;
  uint64_t expected = 0;
  auto* zero = sharded_parameters(run_);
  if (zero != nullptr || run_.policy->tensor_parallel() != nullptr || pipeline) {
    // Whole tensors made piece by piece as they go: ZeRO-3's layers streamed, the tensor-parallel
    // parts gathered, the later pipeline stages' weights received from them in turn; the header
    // takes the whole shapes. Each receiver keeps its own part.
    NamedTensors layout;
    for (const auto& [name, t] : weights) {
      const auto local = zero != nullptr ? torch::empty(zero->shape_of(t), t.options().device(torch::kMeta)) : t;
      layout.emplace_back(name, torch::empty(run_.policy->global_shape(name, local), t.options().device(torch::kMeta)));
    }
    const StageLayout stages = pipeline ? receive_stage_layout(topo_) : StageLayout{};
    for (const auto& item : stages.tensors) layout.push_back(item);
    // values(k) comes once per tensor in order, as the other trainers take part (follow_sync).
    expected = weights_hash_seed();
    size_t next = 0;
    std::optional<LayerByLayer> stream;
    if (zero != nullptr) stream.emplace(*zero, run_.policy->layer_trainable_parameters());
    stats = weight_sync_->sync(layout, version, {}, [&](size_t k) {
      RLCPP_CHECK(k == next++, "weight sync asked for tensor {} out of order", k);
      torch::Tensor whole;
      if (k < weights.size()) {
        const auto& local = stream ? stream->get(weights[k].second) : weights[k].second;
        whole = run_.policy->gather_weight(weights[k].first, local, 0);
      } else {
        whole = receive_stage_weight(topo_, stages, k - weights.size());
      }
      if (c_.parallel.verify_sync) expected = weights_hash_add(expected, layout[k].first, whole);
      return whole;
    });
    if (stream) stream->finish();
  } else {
    stats = weight_sync_->sync(weights, version);
    if (c_.parallel.verify_sync) expected = weights_hash(weights);
  }
  synced_version_ = version;
  sync_bytes_ += stats.bytes;
  ++syncs_;
  if (c_.parallel.verify_sync) {
    for (int e = 0; e < topo_.num_engines(); ++e) {
      const auto got = std::stoull(topo_.world->recv_bytes(topo_.engine_leader(e), kHashTag));
      if (got != expected) {
        throw InternalError(fmt::format("weight sync to version {}: rollout engine {} holds weights hashing {:016x}, "
                                        "trainer rank 0 {:016x}", version, e, got, expected));
      }
    }
    verified_ += topo_.num_engines();
  }
  spdlog::debug("weights of version {} sent: {:.1f} MB in {} buckets, {:.3f} s", version, stats.bytes / 1e6,
                stats.buckets, stats.seconds);
  return stats.seconds;
}

void WorkerSource::add_figures(nlohmann::ordered_json& extra) {
  extra["weight_sync"] = {{"syncs", syncs_}, {"bytes", sync_bytes_}, {"verified_workers", verified_}};
  if (c_.staleness.completion_order && c_.staleness.max_staleness >= 0 && !c_.staleness.stale_finish) {
    extra["staleness"]["restarted_groups"] = std::exchange(restarted_, 0);
  }
  syncs_ = verified_ = 0;
  sync_bytes_ = 0;
}

void WorkerSource::finish() {
  if (!leader()) return;
  for (int w = 0; w < topo_.num_inferencers; ++w) send_control(*topo_.world, ControlMessage::stop(), topo_.num_trainers + w);
}

std::string WorkerSource::describe() const {
  return fmt::format("{} rollout engine(s) over MPI ({} ranks)", topo_.num_engines(), topo_.num_inferencers);
}

}  // namespace rlcpp
