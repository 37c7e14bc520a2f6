// -b openai|vllm|sglang: the run's rollout servers (openai/remote_rollout.h) and the trainer's
// side of their weight updates: the policy written where the servers read it (--rollout-weights-dir,
// one directory per version: the PEFT adapter under LoRA, else the whole model) and each server told
// to load it. The servers' address and the model they serve are the user's; the API key, if any,
// comes from $RLCPP_ROLLOUT_API_KEY (so it never lands in config.yaml). ServerSource is the step
// loop's RolloutSource over them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>

#include "openai/remote_rollout.h"
#include "model/transformer.h"
#include "rl/config/run_config.h"
#include "rl/rollout/rollout_source.h"

namespace rlcpp {

class RolloutServers {
 public:
  // `base_model`: the directory of the model the servers started with (its tokenizer and base go
  // into each version written).
  RolloutServers(const RemoteOptions& remote, std::string base_model, const std::filesystem::path& run_dir);

  RemoteRollout& backend() { return *remote_; }
  // The servers generate with `policy` at `version` from their next request on: written (write)
  // to <weights dir>/v<version> and loaded (apply) by every server that answers (the others when
  // they are back); the versions before it are removed. Each returns the seconds it took.
  double publish(const Transformer& policy, int64_t version) { return write(policy, version) + apply(version); }
  double write(const Transformer& policy, int64_t version);
  double apply(int64_t version);
  int64_t version() const { return remote_->weights().version; }
  const std::filesystem::path& weights_dir() const { return weights_dir_; }

 private:
  std::string base_model_;
  std::filesystem::path weights_dir_;
  std::atomic<bool> adapter_{false};  // the versions written are adapters (LoRA)
  std::unique_ptr<RemoteRollout> remote_;
};

// Partial rollouts over rollout servers, which take weights only between requests: a round's
// switch points count response positions over its generate calls (-mnt each). A call that reaches
// one with samples unfinished stops there: the servers are brought to the next version and the call
// ends cut (cut(): those samples end with FinishReason::kAbort), and the generator goes on with a
// call continuing each of them from its whole sequence so far (PiecedSample::continuation), which
// starts at that position. A switch point a call did not reach (its samples ended first) is taken
// before the next call. Without switch points: the servers' own generate.
class ChunkedRollout : public RolloutBackend {
 public:
  // Takes the next version; true when a checkpoint cuts the round there (a call about to start
  // then ends at once, cut, its samples without a token).
  using NextVersion = std::function<bool()>;
  explicit ChunkedRollout(RemoteRollout& remote) : remote_(remote) {}
  // A round's switch points not passed (ascending), what brings the servers to the next version,
  // and where the round stands (a round going on from a cut: its position() and call_end()).
  void set_switches(const std::vector<int64_t>& at, NextVersion next_version, int64_t position = 0, int64_t call_end = 0) {
    at_.assign(at.begin(), at.end());
    position_ = position;
    call_end_ = call_end;
    next_version_ = std::move(next_version);
  }
  std::vector<GeneratedSample> generate(const std::vector<GenerationRequest>& requests) override;
  bool cut() const override { return cut_; }
  // The response position the round reached (a continuation starts there), and the one its
  // current call ends at.
  int64_t position() const { return position_; }
  int64_t call_end() const { return call_end_; }

 private:
  RemoteRollout& remote_;
  std::deque<int64_t> at_;    // the round's switch points not passed yet
  int64_t position_ = 0, call_end_ = 0;
  bool cut_ = false;
  NextVersion next_version_;
};

// Rounds from the servers: each round is generated and graded on a thread of its own (the trainer
// trains meanwhile when it goes ahead), with the version last published to the servers. Partial
// rollouts: the versions published while a round generates are written at once and taken by the
// round at its switch points (ChunkedRollout), waiting for one not written yet; those it did not
// take go to the servers before the next round. A checkpoint among them cuts the round at its
// version (--checkpoint-round cut): the round as it stands is saved in flight, and goes on.
class ServerSource : public RolloutSource {
 public:
  ServerSource(const RunConfig& config, const std::filesystem::path& run_dir, std::shared_ptr<Transformer> policy,
               const Tokenizer& tokenizer);
  // A round waiting for a version that will not come (the run stopped on an error) ends.
  ~ServerSource() override;
  void submit(std::vector<PromptPick> picks, const WeightSwitches& switches) override;
  RoundReceipt collect(std::deque<SampleGroup>& buffer) override;
  double publish(int64_t version, bool resend) override;
  bool concurrent() const override { return true; }
  bool cuts_rounds() const override;
  std::vector<nlohmann::json> take_cut() override;
  bool resume_cut(const std::vector<nlohmann::json>& in_flight) override;
  int64_t round_prompts() const override { return c_.round_prompts(); }
  void add_figures(nlohmann::ordered_json& extra) override;
  std::string describe() const override;

 private:
  // A round on its thread, fresh or going on from a cut (`resumed`).
  void start_round(RoundInFlight round);
  // The round's thread: the next version written for it (waited for), to the servers; whether a
  // checkpoint cuts the round there.
  bool take_next_version();
  // The round's thread, at a checkpoint's version: the round as it stands, kept for take_cut.
  void keep_cut(const RoundProgress* progress);
  // No round generating: the last version written goes to the servers, unless they hold it.
  double apply_latest();

  const RunConfig& c_;
  std::shared_ptr<Transformer> policy_;
  RolloutServers servers_;
  RewardFunction reward_;
  ChunkedRollout chunked_;
  std::unique_ptr<RolloutGenerator> generator_;
  // The round generating, as its thread sees it.
  RoundInFlight round_;  // its picks, switches, versions taken
  bool cut_due_ = false;  // the version just taken is a checkpoint's
  std::mutex m_;
  std::condition_variable written_cv_, cut_cv_;
  std::deque<int64_t> written_;  // versions written for the round generating, not taken yet
  bool partial_in_flight_ = false;  // a partial round generates: versions wait for it
  bool stopping_ = false;
  std::optional<RoundInFlight> cut_;  // the round as a checkpoint cut it, not taken yet
  bool round_ended_ = false;          // the round's thread is done (generated and graded, or failed)
  // Last: a round still generating (the run stopped on an error) ends before what it uses goes away.
  std::deque<std::future<RolloutRound>> in_flight_;
  int64_t published_ = -1;  // the version last written (-1: none yet, whatever the servers hold)
  int64_t applied_ = -1;    // the version the servers were last given
};

}  // namespace rlcpp
