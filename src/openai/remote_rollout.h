// Rollouts from OpenAI-compatible servers (`rlcpp serve`, vLLM, SGLang) over HTTP: each prompt's
// G samples are one /v1/completions request (prompt token ids, n = G, the sampling settings and
// the seed; token ids and log-probs asked back) sent to one server, so its prefix cache holds the
// prompt once; prompts go to the server with the fewest requests in flight. A server that fails
// (refused connection, timeout, 5xx) is set aside for a growing pause and its request is sent to
// another; a result is taken once per prompt, so no sample counts twice. The weights the servers
// should hold (set_weights: the base model, a PEFT adapter directory or a whole model directory)
// reach each server before its next request: adapters through /v1/load_lora_adapter (served under a
// name that carries the version), whole models through /update_weights_from_disk; a server that
// failed or came back is brought up to date again.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/rollout_backend.h"
#include "util/enum_table.h"

namespace rlcpp {

// Where rollouts come from (-b/--backend).
enum class RolloutBackendKind { kNative, kOpenai, kVllm, kSglang };
const EnumTable<RolloutBackendKind>& rollout_backend_kinds();

struct RemoteRolloutOptions {
  RolloutBackendKind kind = RolloutBackendKind::kOpenai;  // which endpoints update weights
  std::vector<std::string> urls;     // one per server: http://host:port (a trailing /v1 is dropped)
  std::string api_key;               // sent as "Authorization: Bearer KEY" ("": none)
  std::string model;                 // the base model's served name ("": each server's first of /v1/models)
  double request_timeout_s = 600;    // one request's answer; past it the request goes to another server
  double unavailable_timeout_s = 300;  // generate fails once no server has answered for this long
  int64_t max_requests_per_server = 32;  // prompts (each with its n samples) in flight at one server
  std::string adapter_name = "rlcpp-policy";  // adapters are served as NAME-v<version>
  // The model the run starts from: loaded back into a server that says it was updated since it
  // started (an earlier run's weights) before it serves the starting weights or an adapter.
  std::filesystem::path start_dir;
};

// A run's choice of rollout backend and its servers (the remote group; RemoteRolloutOptions is
// what the client is built with from it).
struct RemoteOptions {
  RolloutBackendKind backend = RolloutBackendKind::kNative;  // where rollouts come from (-b)
  std::string url;                   // -b openai|vllm|sglang: the servers, "http://HOST:PORT[,...]"
  std::string model;                 // the servers' served name of the base model ("": their first listed)
  std::string weights_dir;           // where the policy is written for the servers to read ("": run_dir/rollout-weights)
  double timeout = 600;              // seconds a server has for one prompt's samples before it is retried elsewhere
  int64_t concurrency = 32;          // prompts in flight at one server
  bool enabled() const { return backend != RolloutBackendKind::kNative; }
};

// The weights the servers are to generate with.
struct RemoteWeights {
  int64_t version = 0;
  std::filesystem::path dir;  // "": the model each server started with
  bool adapter = false;       // dir is a PEFT adapter directory (else a whole Hugging Face model directory)
};

struct RemoteRolloutStats {
  int64_t requests = 0;      // completion requests answered
  int64_t retries = 0;       // requests sent again (a server failed or was behind)
  int64_t server_failures = 0;
  int64_t pushes = 0;        // weight updates sent to a server
  double push_seconds = 0;   // time of those updates, summed
};

class RemoteRollout : public RolloutBackend {
 public:
  explicit RemoteRollout(RemoteRolloutOptions options);  // a UserError names a malformed URL
  ~RemoteRollout() override;

  // Not at the same time as set_weights or sync.
  std::vector<GeneratedSample> generate(const std::vector<GenerationRequest>& requests) override;
  // From now on every request is answered with these weights; sync() brings every server to them
  // now (servers that cannot be reached get them when they answer again).
  void set_weights(RemoteWeights weights);
  void sync();
  const RemoteWeights& weights() const;
  RemoteRolloutStats stats() const;
  const RemoteRolloutOptions& options() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace rlcpp
