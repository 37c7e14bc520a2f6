// `rlcpp report RUN_DIR [-o report.html]`: one self-contained HTML page of a run — inline SVG
// plots of the step metrics (reward and accuracy, eval accuracy per set, response length and
// truncation, KL, entropy, clip fraction, grad norm, LR, the time split) and a table of sample
// rollouts (the best and the worst of each step) from the rollout logs. No network, no scripts.
// Plots sit at fixed places on the page; a JSON block (id "plot-layout") lists each one's
// plotting area, so a test can look at the rendered pixels.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "app/commands.h"
#include "util/error.h"
#include "util/file.h"
#include "util/yaml.h"

namespace rlcpp {

namespace fs = std::filesystem;

namespace {

using Json = nlohmann::json;

struct Series {
  std::string name, color;
  std::vector<std::pair<double, double>> points;  // (step, value)
};

// How a plot's value axis is laid out: kFree fits the data; kFromZero starts at 0 (times, lengths,
// norms, KL); kFraction starts at 0 and shows at least [0, 1] (rewards, accuracies, fractions).
enum class Axis { kFree, kFromZero, kFraction };

struct Plot {
  std::string title;
  std::vector<Series> series;
  Axis axis = Axis::kFree;
};

// Round axis ticks: a step of 1, 2 or 5 times a power of ten that covers [lo, hi] in at most
// `max_ticks` intervals; the range is widened to whole steps.
struct Ticks {
  double lo, hi, step;
};

Ticks nice_ticks(double lo, double hi, int max_ticks) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / max_ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * power;
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * power >= raw * (1 - 1e-9)) {
      step = m * power;
      break;
    }
  }
  // Snap away float noise (0.30000000000000004) so the labels print round.
  auto snap = [&](double v) { return std::round(v / step) * step; };
  return {snap(std::floor(lo / step + 1e-9) * step), snap(std::ceil(hi / step - 1e-9) * step), step};
}

// Page geometry (CSS pixels): two columns of plots under a header, the table below them.
constexpr int kPlotWidth = 600, kPlotHeight = 260, kGap = 20, kTop = 110;
constexpr int kLeft = 52, kRight = 14, kTopPad = 40, kBottom = 30;  // plotting area inside a plot

std::string escape(const std::string& text) {
  std::string out;
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string number(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e4 || a < 1e-3) return fmt::format("{:.1e}", v);
  return fmt::format("{:.4g}", v);
}

// A value at a slash path of a metrics line ("eval/gsm8k/accuracy"), if it is a number.
std::optional<double> at_path(const Json& line, const std::string& path) {
  const Json* v = &line;
  size_t begin = 0;
  while (begin <= path.size()) {
    const size_t end = std::min(path.find('/', begin), path.size());
    const std::string key = path.substr(begin, end - begin);
    if (!v->is_object() || !v->contains(key)) return std::nullopt;
    v = &(*v)[key];
    begin = end + 1;
  }
  if (!v->is_number()) return std::nullopt;
  return v->get<double>();
}

Series series_of(const std::vector<Json>& lines, const std::string& path, std::string name, std::string color) {
  Series s{std::move(name), std::move(color), {}};
  for (const auto& line : lines) {
    if (auto v = at_path(line, path)) s.points.emplace_back(line.at("step").get<double>(), *v);
  }
  return s;
}

std::string svg_plot(const Plot& plot, int x0, int y0) {
  const int w = kPlotWidth, h = kPlotHeight;
  const int ax = kLeft, ay = kTopPad, aw = w - kLeft - kRight, ah = h - kTopPad - kBottom;
  double xmin = 1e300, xmax = -1e300, ymin = 1e300, ymax = -1e300;
  for (const auto& s : plot.series) {
    for (const auto& [x, y] : s.points) {
      xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymin = std::min(ymin, y), ymax = std::max(ymax, y);
    }
  }
  std::string out = fmt::format(
      "<svg class=\"plot\" style=\"position:absolute;left:{}px;top:{}px\" width=\"{}\" height=\"{}\" "
      "xmlns=\"http://www.w3.org/2000/svg\"><rect width=\"{}\" height=\"{}\" fill=\"#ffffff\" stroke=\"#d0d0d0\"/>"
      "<text x=\"10\" y=\"18\" font-size=\"14\" font-weight=\"bold\" fill=\"#222\">{}</text>",
      x0, y0, w, h, w, h, escape(plot.title));
  int legend_x = 10;
  for (const auto& s : plot.series) {
    out += fmt::format("<rect x=\"{}\" y=\"25\" width=\"10\" height=\"3\" fill=\"{}\"/><text x=\"{}\" y=\"31\" "
                       "font-size=\"11\" fill=\"#444\">{}</text>",
                       legend_x, s.color, legend_x + 14, escape(s.name));
    legend_x += 24 + 7 * static_cast<int>(s.name.size());
  }
  if (xmin > xmax) {
    return out + fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" fill=\"#888\">no data</text></svg>", ax + 10,
                             ay + ah / 2);
  }
  if (xmax == xmin) xmin -= 1, xmax += 1;
  if (plot.axis != Axis::kFree) ymin = std::min(ymin, 0.0);
  if (plot.axis == Axis::kFraction) ymax = std::max(ymax, 1.0);
  if (ymax == ymin) {  // a constant (a flat zero too): a round range of its own size around it
    const double half = ymin == 0 ? 1.0 : std::fabs(ymin) * 0.5;
    ymax += half;
    if (plot.axis == Axis::kFree) ymin -= half;
  }
  const Ticks y_ticks = nice_ticks(ymin, ymax, 5);
  ymin = y_ticks.lo, ymax = y_ticks.hi;
  auto px = [&](double x) { return ax + (x - xmin) / (xmax - xmin) * aw; };
  auto py = [&](double y) { return ay + ah - (y - ymin) / (ymax - ymin) * ah; };
  for (double y = ymin; y <= ymax + y_ticks.step * 1e-6; y += y_ticks.step) {  // grid lines at round values
    const double at = std::fabs(y) < y_ticks.step * 1e-6 ? 0.0 : y;
    out += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#eeeeee\"/>"
                       "<text x=\"{}\" y=\"{:.1f}\" font-size=\"10\" fill=\"#666\" text-anchor=\"end\">{}</text>",
                       ax, ax + aw, py(at), py(at), ax - 4, py(at) + 3, number(at));
  }
  const double x_step = std::max(1.0, nice_ticks(xmin, xmax, 6).step);  // whole steps on the x axis
  for (double x = std::ceil(xmin / x_step) * x_step; x <= xmax; x += x_step) {
    out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"10\" fill=\"#666\" text-anchor=\"middle\">{}</text>", px(x),
                       ay + ah + 14, number(x));
  }
  out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#666\" text-anchor=\"middle\">step</text>",
                     ax + aw / 2, h - 3);
  for (const auto& s : plot.series) {
    std::string points;
    for (const auto& [x, y] : s.points) points += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    out += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>", s.color, points);
    if (s.points.size() <= 60) {
      for (const auto& [x, y] : s.points) {
        out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>", px(x), py(y), s.color);
      }
    }
  }
  return out + "</svg>";
}

std::vector<Json> read_jsonl(const fs::path& path) {
  std::vector<Json> lines;
  std::ifstream in(path);
  std::string text;
  int64_t n = 0;
  while (std::getline(in, text)) {
    ++n;
    if (text.empty()) continue;
    try {
      Json line = Json::parse(text);
      if (line.contains("status") && !line.contains("step")) continue;  // the run's status line
      lines.push_back(std::move(line));
    } catch (const Json::exception& e) {
      throw_user_error("{}:{}: not a JSON line ({})", path.string(), n, e.what());
    }
  }
  return lines;
}

// The rollout files of the run (-rsd DIR writes DIR/<project>/step-N.jsonl), by step.
std::map<int64_t, fs::path> rollout_files(const fs::path& run_dir) {
  std::map<int64_t, fs::path> files;
  const fs::path config_path = run_dir / "config.yaml";
  if (!fs::is_regular_file(config_path)) return files;
  const Json config = load_yaml_file(config_path);
  if (!config.contains("logging")) return files;
  const auto& logging = config["logging"];
  const std::string dir = logging.value("rollout_save_dir", std::string());
  const std::string project = logging.value("project", std::string());
  if (dir.empty() || dir == "null") return files;
  for (const fs::path& base : {fs::path(dir) / project, run_dir.parent_path().parent_path() / dir / project}) {
    if (!fs::is_directory(base)) continue;
    for (const auto& entry : fs::directory_iterator(base)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("step-", 0) == 0 && entry.path().extension() == ".jsonl") {
        try {
          files[std::stoll(name.substr(5))] = entry.path();
        } catch (const std::exception&) {
        }
      }
    }
    if (!files.empty()) break;
  }
  return files;
}

std::string clip(const std::string& text, size_t n) { return text.size() <= n ? text : text.substr(0, n) + " …"; }

// A response as the report shows it: the text, or a multi-turn rollout's conversation (each turn
// with its role; inserted turns, never trained, marked so).
std::string response_cell(const Json& line) {
  if (!line.contains("turns") || !line["turns"].is_array()) return escape(clip(line.value("response", std::string()), 800));
  std::string out;
  for (const auto& turn : line["turns"]) {
    const bool trained = turn.value("trained", false);
    out += fmt::format("<b>{}</b>{}: {}\n", escape(turn.value("role", std::string())), trained ? "" : " (inserted)",
                       escape(clip(turn.value("content", std::string()), 300)));
  }
  if (line.contains("episode") && line["episode"].is_object()) {
    out += fmt::format("<i>ended by {}, token-exact: {}</i>", escape(line["episode"].value("ended_by", std::string())),
                       escape(line["episode"].value("tito", std::string())));
  }
  return out;
}

std::string samples_table(const std::map<int64_t, fs::path>& files) {
  if (files.empty()) {
    return "<p class=\"note\">No rollout logs: run with <code>-rsd DIR</code> to see sample rollouts here.</p>";
  }
  std::string rows;
  int shown = 0;
  for (auto it = files.rbegin(); it != files.rend() && shown < 30; ++it, ++shown) {
    auto lines = read_jsonl(it->second);
    if (lines.empty()) continue;
    auto by_reward = [](const Json& a, const Json& b) { return a.value("reward", 0.0) < b.value("reward", 0.0); };
    const auto best = *std::max_element(lines.begin(), lines.end(), by_reward);
    const auto worst = *std::min_element(lines.begin(), lines.end(), by_reward);
    for (const auto* pick : {&best, &worst}) {
      rows += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><pre>{}</pre></td><td><pre>{}</pre></td></tr>",
                          it->first, pick == &best ? "best" : "worst", number(pick->value("reward", 0.0)),
                          escape(pick->value("gt_answer", std::string())),
                          escape(clip(pick->value("prompt", std::string()), 400)), response_cell(*pick));
    }
  }
  return "<table><tr><th>step</th><th></th><th>reward</th><th>answer</th><th>prompt</th><th>response</th></tr>" + rows +
         "</table>";
}

std::string render_report(const fs::path& run_dir) {
  const fs::path metrics_path = run_dir / "metrics.jsonl";
  if (!fs::is_regular_file(metrics_path)) {
    throw_user_error("{}: no metrics.jsonl there; give a run directory (save_dir/project) of rlcpp train", run_dir.string());
  }
  const auto lines = read_jsonl(metrics_path);
  if (lines.empty()) throw_user_error("{}: no steps yet", metrics_path.string());
  const char* palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  std::vector<Plot> plots;
  plots.push_back({"Reward and accuracy", {series_of(lines, "reward_mean", "reward", palette[0]),
                                           series_of(lines, "accuracy", "accuracy", palette[2])}, Axis::kFraction});
  std::set<std::string> eval_sets;
  for (const auto& line : lines) {
    if (line.contains("eval") && line["eval"].is_object()) {
      for (const auto& [name, v] : line["eval"].items()) eval_sets.insert(name);
    }
  }
  Plot eval{"Eval accuracy", {}, Axis::kFraction};
  int color = 0;
  for (const auto& name : eval_sets) eval.series.push_back(series_of(lines, "eval/" + name + "/accuracy", name, palette[color++ % 8]));
  if (!eval.series.empty()) plots.push_back(eval);
  // Code rewards: each step's samples by the grader's reason (passed, timeout, wrong_answer, ...).
  std::set<std::string> reasons;
  for (const auto& line : lines) {
    if (line.contains("reward_reasons") && line["reward_reasons"].is_object()) {
      for (const auto& [name, v] : line["reward_reasons"].items()) reasons.insert(name);
    }
  }
  Plot reason_plot{"Samples by reward reason", {}, Axis::kFromZero};
  color = 0;
  for (const auto& name : reasons) {
    reason_plot.series.push_back(series_of(lines, "reward_reasons/" + name, name, palette[color++ % 8]));
  }
  if (!reason_plot.series.empty()) plots.push_back(reason_plot);
  // Multi-turn: turns and tool calls per trajectory, tool errors and token-exactness mismatches per step.
  if (std::any_of(lines.begin(), lines.end(), [](const Json& l) { return l.contains("turns_mean"); })) {
    plots.push_back({"Multi-turn episodes", {series_of(lines, "turns_mean", "turns per trajectory", palette[0]),
                                             series_of(lines, "tool_calls", "tool calls per trajectory", palette[2]),
                                             series_of(lines, "tool_errors", "tool errors", palette[1]),
                                             series_of(lines, "tito_mismatch", "tito mismatches", palette[3])},
                     Axis::kFromZero});
  }
  plots.push_back({"Response length (tokens)", {series_of(lines, "response_length_mean", "mean", palette[0]),
                                                series_of(lines, "response_length_max", "max", palette[3])}, Axis::kFromZero});
  plots.push_back({"Truncated fraction", {series_of(lines, "truncated_fraction", "truncated", palette[1])}, Axis::kFraction});
  plots.push_back({"KL", {series_of(lines, "kl", "kl", palette[4])}, Axis::kFromZero});
  plots.push_back({"Entropy", {series_of(lines, "entropy", "entropy", palette[5])}, Axis::kFromZero});
  Series clip_frac{"clip fraction (low + high)", palette[6], {}};
  for (const auto& line : lines) {
    clip_frac.points.emplace_back(line.at("step").get<double>(),
                                  at_path(line, "clip_frac_low").value_or(0) + at_path(line, "clip_frac_high").value_or(0));
  }
  plots.push_back({"Clip fraction", {clip_frac}, Axis::kFraction});
  plots.push_back({"Gradient norm", {series_of(lines, "grad_norm", "grad norm", palette[7])}, Axis::kFromZero});
  plots.push_back({"Learning rate", {series_of(lines, "lr", "lr", palette[0])}, Axis::kFromZero});
  Plot time{"Time per step (s)", {}, Axis::kFromZero};
  color = 0;
  const Json phases = lines.back().value("time", Json::object());
  for (const auto& [phase, v] : phases.items()) {
    time.series.push_back(series_of(lines, "time/" + phase, phase, palette[color++ % 8]));
  }
  plots.push_back(time);

  std::string body;
  Json layout = Json::array();
  for (size_t k = 0; k < plots.size(); ++k) {
    const int x = kGap + static_cast<int>(k % 2) * (kPlotWidth + kGap);
    const int y = kTop + static_cast<int>(k / 2) * (kPlotHeight + kGap);
    body += svg_plot(plots[k], x, y);
    layout.push_back({{"title", plots[k].title},
                      {"x", x + kLeft},
                      {"y", y + kTopPad},
                      {"width", kPlotWidth - kLeft - kRight},
                      {"height", kPlotHeight - kTopPad - kBottom}});
  }
  const int table_top = kTop + static_cast<int>((plots.size() + 1) / 2) * (kPlotHeight + kGap) + kGap;
  const auto& last = lines.back();
  const std::string title = fmt::format("{} — {} steps", run_dir.filename().string(), last.at("step").get<int64_t>());
  return fmt::format(R"(<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{}</title>
<style>
body {{ margin: 0; font-family: sans-serif; background: #f7f7f7; color: #222; }}
header {{ position: absolute; left: {}px; top: 16px; }}
header h1 {{ font-size: 20px; margin: 0 0 6px 0; }}
header p {{ margin: 0; font-size: 13px; color: #555; }}
#samples {{ position: absolute; left: {}px; top: {}px; width: {}px; padding-bottom: 40px; }}
table {{ border-collapse: collapse; font-size: 12px; background: #fff; }}
td, th {{ border: 1px solid #ddd; padding: 4px; vertical-align: top; text-align: left; }}
pre {{ white-space: pre-wrap; margin: 0; font-size: 11px; max-width: 420px; }}
.note {{ color: #666; font-size: 13px; }}
</style></head>
<body>
<header><h1>{}</h1><p>{}: reward {} (accuracy {}), policy version {}, {} optimizer steps</p></header>
{}
<div id="samples"><h2>Sample rollouts (best and worst of each step, newest first)</h2>{}</div>
<script type="application/json" id="plot-layout">{}</script>
</body></html>
)",
                     escape(title), kGap, kGap, table_top, 2 * kPlotWidth + kGap, escape(title),
                     escape(metrics_path.string()), number(last.value("reward_mean", 0.0)),
                     number(last.value("accuracy", 0.0)), last.value("policy_version", int64_t{0}),
                     last.value("optimizer_steps", int64_t{0}), body, samples_table(rollout_files(run_dir)),
                     layout.dump());
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "a self-contained HTML report of a run (plots and sample rollouts)");
  auto run_dir = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  cmd->add_option("run_dir", *run_dir, "the run directory (save_dir/project)")->required();
  cmd->add_option("-o,--output", *output, "the HTML file (default: RUN_DIR/report.html)");
  cmd->callback([run_dir, output] {
    const fs::path out = output->empty() ? fs::path(*run_dir) / "report.html" : fs::path(*output);
    write_file_atomic(out, render_report(*run_dir));
    std::cout << out.string() << "\n";
  });
}

}  // namespace rlcpp
