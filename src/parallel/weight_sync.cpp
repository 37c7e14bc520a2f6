#include "parallel/weight_sync.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>

#include "util/error.h"
#include "util/failpoint.h"
#include "util/trace.h"

namespace rlcpp {

namespace {

constexpr int kTagHeader = 101, kTagBucket = 102;

torch::Tensor host_contiguous(const torch::Tensor& t) { return t.detach().to(torch::kCPU).contiguous(); }

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t k = 0; k < n; ++k) h = (h ^ p[k]) * 0x100000001b3ULL;
  return h;
}

}  // namespace

const EnumTable<SyncMode>& sync_modes() {
  static const EnumTable<SyncMode> table(
      "weight-sync mode", {{SyncMode::kBroadcast, "broadcast", "one broadcast per bucket over the sync group"},
                           {SyncMode::kP2p, "p2p", "trainer rank 0 sends each bucket to each rollout worker"}});
  return table;
}

std::vector<std::vector<size_t>> plan_buckets(const NamedTensors& tensors, uint64_t bucket_bytes) {
  std::vector<std::vector<size_t>> out;
  uint64_t used = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const uint64_t bytes = tensors[k].second.nbytes();
    if (out.empty() || (used + bytes > bucket_bytes && used > 0)) {
      out.emplace_back();
      used = 0;
    }
    out.back().push_back(k);
    used += bytes;
  }
  return out;
}

WeightSync::WeightSync(std::shared_ptr<Communicator> group, uint64_t bucket_bytes, SyncMode mode)
    : group_(std::move(group)), bucket_bytes_(std::max<uint64_t>(1, bucket_bytes)), mode_(mode) {
  RLCPP_CHECK(group_ != nullptr, "weight sync without a group");
}

SyncStats WeightSync::sync(const NamedTensors& tensors, int64_t version,
                           const std::function<void(const NamedTensors&)>& apply,
                           const std::function<torch::Tensor(size_t)>& values) {
  trace::Span span("weight_sync");
  const auto start = std::chrono::steady_clock::now();
  const bool sender = group_->rank() == 0;
  // The header (names, dtypes, shapes, bucket layout, version) goes first, as JSON.
  std::string header;
  std::vector<std::vector<size_t>> plan;
  if (sender) {
    plan = plan_buckets(tensors, bucket_bytes_);
    nlohmann::json h = {{"version", version}, {"buckets", nlohmann::json::array()}};
    for (const auto& bucket : plan) {
      nlohmann::json entries = nlohmann::json::array();
      for (size_t k : bucket) {
        const auto& t = tensors[k].second;
        entries.push_back({{"name", tensors[k].first}, {"dtype", static_cast<int>(t.scalar_type())}, {"shape", t.sizes().vec()}});
      }
      h["buckets"].push_back(entries);
    }
    header = h.dump();
  }
  auto exchange = [&](std::string& bytes, int tag) {
    if (mode_ == SyncMode::kBroadcast) {
      group_->broadcast_bytes(bytes, 0);
    } else if (sender) {
      for (int r = 1; r < group_->size(); ++r) group_->send_bytes(bytes, r, tag);
    } else {
      bytes = group_->recv_bytes(0, tag);
    }
  };
  exchange(header, kTagHeader);
  const auto h = nlohmann::json::parse(header);
  SyncStats stats;
  stats.version = h.at("version").get<int64_t>();
  for (const auto& entries : h.at("buckets")) {
    std::string bytes;
    if (sender) {
      uint64_t size = 0;
      for (size_t k : plan[static_cast<size_t>(stats.buckets)]) size += tensors[k].second.nbytes();
      bytes.reserve(size);
      for (size_t k : plan[static_cast<size_t>(stats.buckets)]) {
        const auto t = host_contiguous(values ? values(k) : tensors[k].second);
        RLCPP_CHECK(t.nbytes() == tensors[k].second.nbytes(), "weight {}: {} bytes, its header says {}", tensors[k].first,
                    t.nbytes(), tensors[k].second.nbytes());
        bytes.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
      }
    }
    exchange(bytes, kTagBucket);
    failpoint("sync");
    stats.bytes += bytes.size();
    ++stats.buckets;
    if (sender || !apply) continue;
    NamedTensors received;
    size_t offset = 0;
    for (const auto& e : entries) {
      const auto dtype = static_cast<torch::ScalarType>(e.at("dtype").get<int>());
      const auto shape = e.at("shape").get<std::vector<int64_t>>();
      auto t = torch::empty(shape, torch::TensorOptions().dtype(dtype));
      RLCPP_CHECK(offset + t.nbytes() <= bytes.size(), "bucket {} is shorter than its header says", stats.buckets);
      std::memcpy(t.data_ptr(), bytes.data() + offset, t.nbytes());
      offset += t.nbytes();
      received.emplace_back(e.at("name").get<std::string>(), std::move(t));
    }
    apply(received);
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

uint64_t weights_hash_seed() { return 0xcbf29ce484222325ULL; }

uint64_t weights_hash_add(uint64_t h, const std::string& name, const torch::Tensor& tensor) {
  h = fnv1a(h, name.data(), name.size());
  const auto t = host_contiguous(tensor);
  const int type = static_cast<int>(t.scalar_type());
  h = fnv1a(h, &type, sizeof(type));
  for (int64_t d : t.sizes()) h = fnv1a(h, &d, sizeof(d));
  return fnv1a(h, t.data_ptr(), t.nbytes());
}

uint64_t weights_hash(const NamedTensors& tensors) {
  uint64_t h = weights_hash_seed();
  for (const auto& [name, tensor] : tensors) h = weights_hash_add(h, name, tensor);
  return h;
}

}  // namespace rlcpp
