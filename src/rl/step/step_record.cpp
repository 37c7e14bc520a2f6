#include "rl/step/step_record.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <functional>

#include "comm/mpi.h"
#include "rl/checkpoint/run_checkpoint.h"
#include "util/error.h"
#include "util/file.h"
#include "util/progress.h"
#include "util/trace.h"

namespace rlcpp {

namespace {

double value_of(const std::map<std::string, double>& values, const char* key) {
  const auto it = values.find(key);
  return it == values.end() ? 0.0 : it->second;
}

double total_seconds(const StepRecord& r) { return r.time.empty() ? 0.0 : r.time.back().second; }

}  // namespace

nlohmann::ordered_json to_json(const StepRecord& r) {
  nlohmann::ordered_json line;
  line["step"] = r.step;
  line["episode"] = r.episode;
  line["reward_mean"] = r.stats.mean(r.stats.reward_sum);
  line["accuracy"] = r.stats.mean(static_cast<double>(r.stats.correct));
  line["kept_groups"] = r.kept_groups;
  line["generated_groups"] = r.generated_groups;
  line["sample_utilization"] =
      r.generated_groups > 0 ? static_cast<double>(r.round_kept_groups) / static_cast<double>(r.generated_groups) : 1.0;
  line["buffered_groups"] = r.buffered_groups;
  line["response_length_mean"] = r.stats.mean(r.stats.len_sum);
  line["response_length_max"] = r.stats.max_len;
  line["truncated_fraction"] = r.stats.mean(static_cast<double>(r.stats.truncated));
  if (!r.stats.reasons.empty()) line["reward_reasons"] = r.stats.reasons;  // samples per reason (code rewards)
  if (r.stats.episodes > 0) {  // multi-turn: per trajectory, and shares of the trajectories
    const auto n = static_cast<double>(r.stats.episodes);
    line["turns_mean"] = static_cast<double>(r.stats.turns_sum) / n;
    line["turns_max"] = r.stats.turns_max;
    line["tool_calls"] = static_cast<double>(r.stats.tool_calls) / n;
    line["tool_errors"] = r.stats.tool_errors;
    line["inserted_tokens"] = static_cast<double>(r.stats.inserted_tokens) / n;
    auto count = [&](const std::map<std::string, int64_t>& m, const std::string& key) {
      const auto it = m.find(key);
      return it == m.end() ? int64_t{0} : it->second;
    };
    line["tito_mismatch"] = count(r.stats.tito, "mismatch");
    line["tito_rerender"] = count(r.stats.tito, "rerender");
    line["tito_noncanonical"] = count(r.stats.tito, "noncanonical");
    nlohmann::ordered_json ended;
    for (const auto& [why, k] : r.stats.ended_by) ended[why] = static_cast<double>(k) / n;
    line["ended_by"] = ended;
  }
  for (const char* key : {"loss", "pg_loss", "kl", "entropy", "clip_frac_low", "clip_frac_high", "clip_frac_dual",
                          "grad_norm", "lr", "n_skipped", "tis_weight_mean", "tis_clip_frac", "is_masked_frac", "mismatch_abs_mean",
                          "mismatch_abs_max", "mismatch_kl", "relayed_groups", "nonfinite", "old_logprobs_reused"}) {
    line[key] = value_of(r.train, key);
  }
  // Pipeline parallelism: the stages' mean share of the step's passes spent waiting.
  if (const auto bubble = r.train.find("pp_bubble"); bubble != r.train.end()) line["pp_bubble"] = bubble->second;
  // The mismatch by versions behind ("mismatch_by_versions/{k}/{figure}"), where any token was.
  nlohmann::ordered_json by_versions;
  for (const auto& [key, value] : r.train) {
    const std::string prefix = "mismatch_by_versions/";
    if (key.rfind(prefix, 0) != 0) continue;
    const auto slash = key.find('/', prefix.size());
    by_versions[key.substr(prefix.size(), slash - prefix.size())][key.substr(slash + 1)] = value;
  }
  if (!by_versions.empty()) line["mismatch_by_versions"] = by_versions;
  // PPO's critic: its updates' figures and the step's values and returns ("critic/{figure}").
  nlohmann::ordered_json critic;
  for (const auto& [key, value] : r.train) {
    if (key.rfind("critic/", 0) == 0) critic[key.substr(7)] = value;
  }
  if (!critic.empty()) line["critic"] = critic;
  line["optimizer_steps"] = r.optimizer_steps;
  line["policy_version"] = r.policy_version;
  line["tokens_per_s"] = r.stats.len_sum / std::max(total_seconds(r), 1e-9);
  for (const auto& [key, value] : r.extra.items()) line[key] = value;
  nlohmann::ordered_json time;
  for (const auto& [phase, seconds] : r.time) time[phase] = seconds;
  line["time"] = time;
  return line;
}

std::string console_line(const StepRecord& r) {
  auto m = [&](const char* key) { return value_of(r.train, key); };
  std::string text = fmt::format(
      "step {}/{} reward {:.3f} acc {:.3f} kept {} len {:.0f}/{} trunc {:.2f} loss {:.4f} kl {:.4f} ent {:.3f} "
      "clip {:.3f} gnorm {:.3f} lr {:.2e} {:.0f} tok/s |",
      r.step, r.total_steps, r.stats.mean(r.stats.reward_sum), r.stats.mean(static_cast<double>(r.stats.correct)),
      r.kept_groups, r.stats.mean(r.stats.len_sum), r.stats.max_len, r.stats.mean(static_cast<double>(r.stats.truncated)),
      m("loss"), m("kl"), m("entropy"), m("clip_frac_low") + m("clip_frac_high"), m("grad_norm"), m("lr"),
      r.stats.len_sum / std::max(total_seconds(r), 1e-9));
  if (r.train.count("critic/vf_loss") != 0) {
    text.insert(text.size() - 2, fmt::format(" vf {:.4f} vgnorm {:.3f}", m("critic/vf_loss"), m("critic/grad_norm")));
  }
  for (const auto& [phase, seconds] : r.time) {
    if (phase != "total") text += fmt::format(" {} {:.2f}s", phase, seconds);
  }
  return text;
}

void write_scalars(EventWriter& events, const nlohmann::ordered_json& line) {
  std::vector<std::pair<std::string, double>> values;
  std::function<void(const std::string&, const nlohmann::ordered_json&)> walk = [&](const std::string& tag,
                                                                                   const nlohmann::ordered_json& v) {
    if (v.is_object()) {
      for (const auto& [key, child] : v.items()) walk(tag.empty() ? key : tag + "/" + key, child);
    } else if (v.is_number() && tag != "step") {
      values.emplace_back(tag, v.get<double>());
    }
  };
  walk("", line);
  events.add_scalars(values, line.at("step").get<int64_t>());
}

void start_profile(const LoggingOptions& logging, int rank, const std::string& role) {
  if (logging.profile_dir.empty()) return;
  trace::enable(std::filesystem::path(logging.profile_dir) / logging.project / fmt::format("trace.rank-{}.json", rank), rank, role);
}

double eta_seconds(double elapsed, int64_t steps_done, int64_t steps_left) {
  return steps_done > 0 ? elapsed / static_cast<double>(steps_done) * static_cast<double>(steps_left) : -1.0;
}

RunLog::RunLog(const std::filesystem::path& run_dir, const RunConfig& config, std::optional<int64_t> resumed_step)
    : c_(config), metrics_(prepare_metrics_file(run_dir, config, resumed_step), std::ios::app),
      events_(std::make_unique<EventWriter>(run_dir)) {
  if (resumed_step) events_->restart_at(*resumed_step + 1);
  last_step_ = resumed_step.value_or(0);  // a resumed run that fails before its next step says where it stood
}

RunLog::~RunLog() {
  if (ended_) return;
  write_status("failed", std::uncaught_exceptions() > 0 ? "stopped by an error (the log says which)"
                                                        : "stopped before its last step");
}

void RunLog::finish() { write_status("finished", ""); }

void RunLog::fail(const std::string& error) { write_status("failed", error); }

void RunLog::write_status(const char* status, const std::string& error) {
  if (ended_) return;
  ended_ = true;
  nlohmann::ordered_json line{{"status", status}, {"steps", last_step_}};
  if (!error.empty()) line["error"] = error;
  metrics_ << line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  metrics_.flush();
}

void RunLog::write(const StepRecord& record) {
  auto line = to_json(record);
  // Under mpirun: the bytes this rank (trainer 0) moved since the last line, by kind.
  const CommunicationBytes now = communication_bytes();
  const CommunicationBytes& was = communicated_;
  if (now.total() > was.total()) {
    line["communication"] = {{"bytes", now.total() - was.total()},
                             {"all_reduce", now.all_reduce - was.all_reduce},
                             {"broadcast", now.broadcast - was.broadcast},
                             {"all_gather", now.all_gather - was.all_gather},
                             {"reduce", now.reduce - was.reduce},
                             {"reduce_scatter", now.reduce_scatter - was.reduce_scatter},
                             {"send", now.send - was.send}};
  }
  communicated_ = now;
  write(line, record.total_steps, console_line(record));
}

void RunLog::write(const nlohmann::ordered_json& line, int64_t total_steps, const std::string& console) {
  metrics_ << line.dump() << "\n";
  metrics_.flush();
  write_scalars(*events_, line);
  events_->flush();
  const int64_t step = line.at("step").get<int64_t>();
  last_step_ = step;
  if (step % c_.logging.log_interval == 0 || step == total_steps) spdlog::info("{}", console);
  ++steps_written_;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  progress::run(step, total_steps, eta_seconds(elapsed, steps_written_, total_steps - step));
}

bool checkpoint_due(const LoggingOptions& logging, int64_t step, int64_t total_steps) {
  return (logging.save_interval > 0 && step % logging.save_interval == 0) || step == total_steps;
}

void short_batch(const AlgoConfig& algo, int64_t step, int64_t groups, int64_t wanted) {
  if (!algo.dynamic_batching || groups >= wanted) return;
  if (algo.require_full_batch) {
    throw_user_error("step {}: {} of -tbs {} groups passed the filter after --max-dynamic-rounds {} extra rounds "
                     "(--require-full-batch); widen --filter-range, raise --max-dynamic-rounds, or drop "
                     "--require-full-batch to train on partial batches", step, groups, wanted, algo.max_dynamic_rounds);
  }
  spdlog::warn("step {}: dynamic batching kept {} of -tbs {} groups after --max-dynamic-rounds {}: training on {} "
               "(--require-full-batch makes this an error)", step, groups, wanted, algo.max_dynamic_rounds, groups);
}

bool rollouts_due(const LoggingOptions& logging, int64_t step) {
  return !logging.rollout_save_dir.empty() && step % logging.rollout_save_interval == 0;
}

void save_rollouts(const std::filesystem::path& dir, int64_t step, const std::vector<SampleGroup>& trained,
                   const std::vector<SampleGroup>& discarded) {
  std::filesystem::create_directories(dir);
  std::string text;
  for (const auto* list : {&trained, &discarded}) {
    for (const auto& g : *list) {
      for (const auto& s : g.samples) {
        nlohmann::ordered_json line;
        line["step"] = step;
        line["prompt"] = g.prompt;
        line["gt_answer"] = g.gt_answer;
        line["dataset_line"] = g.line;
        line["group"] = g.id;
        line["trained"] = list == &trained;
        line["policy_version"] = s.policy_version();
        line["response_tokens"] = s.response_ids.size();
        const nlohmann::json sample = to_json(s);  // the sample as checkpoints hold it
        for (const auto& [key, value] : sample.items()) line[key] = value;
        if (s.episode.is_object() && s.episode.contains("turns")) {  // multi-turn: the conversation beside the ids
          line["turns"] = s.episode.at("turns");
          line["episode"].erase("turns");
        }
        text += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      }
    }
  }
  write_file_atomic(dir / fmt::format("step-{}.jsonl", step), text);
}

}  // namespace rlcpp
