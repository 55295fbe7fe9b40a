// The scaling report's formats. The SVG is drawn by hand (a few polylines and labels) so the
// trainer needs no plotting library; every number is formatted here, once.
#include "tools/trainer/scaling_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/core/error.h"

namespace tandem::tools {
namespace {

std::string pct(double fraction) { return fmt::format("{:.1f}%", 100 * fraction); }

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// One chart panel: maps (replicas, value) into a box, with the x range of the rows and y from 0.
struct Panel {
  double left, top, width, height;
  double x_min, x_max, y_max;
  double x(double replicas) const {
    return x_max == x_min ? left + width / 2 : left + width * (replicas - x_min) / (x_max - x_min);
  }
  double y(double value) const { return top + height * (1 - value / y_max); }
};

std::string polyline(const Panel& p, const std::vector<ScalingRow>& rows, const std::vector<double>& values,
                     const std::string& color, const std::string& cls, bool dashed) {
  std::string points;
  for (size_t i = 0; i < rows.size(); ++i) {
    points += fmt::format("{}{:.1f},{:.1f}", i ? " " : "", p.x(rows[i].replicas), p.y(values[i]));
  }
  std::string out = fmt::format("<polyline class=\"{}\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>\n",
                                cls, points, color, dashed ? " stroke-dasharray=\"6,4\"" : "");
  if (!dashed) {
    for (size_t i = 0; i < rows.size(); ++i) {
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", p.x(rows[i].replicas),
                         p.y(values[i]), color);
    }
  }
  return out;
}

// The frame, the replica ticks under it, the y maximum and the panel's label.
std::string axes(const Panel& p, const std::vector<ScalingRow>& rows, const std::string& label,
                 const std::string& y_max_label) {
  std::string out = fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"#888\"/>\n", p.left,
      p.top, p.width, p.height);
  for (const auto& r : rows) {
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", p.x(r.replicas),
                       p.top + p.height + 16, r.replicas);
  }
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">replicas</text>\n",
                     p.left + p.width / 2, p.top + p.height + 34);
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", p.left - 4, p.top + 4,
                     y_max_label);
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">0</text>\n", p.left - 4, p.top + p.height);
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", p.left + p.width / 2,
                     p.top - 8, xml_escape(label));
  return out;
}

}  // namespace

void fill_efficiency(std::vector<ScalingRow>& rows) {
  TANDEM_CHECK(!rows.empty(), ErrorCode::kInvalidArgument, "scaling: no runs to report");
  auto base = std::min_element(rows.begin(), rows.end(),
                               [](const ScalingRow& a, const ScalingRow& b) { return a.replicas < b.replicas; });
  TANDEM_CHECK(base->images_per_sec > 0 && base->replicas > 0, ErrorCode::kInvalidArgument,
               "scaling: the {}-replica run measured no throughput, so efficiency has no baseline", base->replicas);
  double per_replica_base = base->images_per_sec / base->replicas;
  for (auto& r : rows) r.efficiency = r.images_per_sec / (r.replicas * per_replica_base);
}

double phase_share(const train::StepBreakdown& b, double phase_seconds) {
  double total = b.total();
  return total > 0 ? phase_seconds / total : 0.0;
}

std::string scaling_markdown(const std::vector<ScalingRow>& rows, const std::string& mode) {
  const std::string unit = rows.empty() || rows.front().unit == "images" ? "Images" : "Tokens";
  std::string out = fmt::format(
      "{} scaling\n\n"
      "| Replicas | Global batch | Per-replica batch | {}/s | Efficiency | Step p50 ms | Step p95 ms "
      "| Input | Copy | Forward | Backward | All-reduce | Optimizer | Processes | Inter-process ms |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      mode == "weak" ? "Weak (fixed per-replica batch)" : "Strong (fixed global batch)", unit);
  for (const auto& r : rows) {
    const auto& b = r.breakdown;
    out += fmt::format("| {} | {} | {} | {:.1f} | {} | {:.1f} | {:.1f} | {} | {} | {} | {} | {} | {} | {} | {:.2f} |\n",
                       r.replicas, r.global_batch, r.per_replica_batch, r.images_per_sec, pct(r.efficiency),
                       r.step_p50_ms, r.step_p95_ms, pct(phase_share(b, b.input_wait)), pct(phase_share(b, b.copy)),
                       pct(phase_share(b, b.forward)), pct(phase_share(b, b.backward)),
                       pct(phase_share(b, b.all_reduce)), pct(phase_share(b, b.optimizer)), r.processes,
                       r.inter_process_ms);
  }
  out += "\nAll-reduce: the step's wait for the gradients, inside the process and across. Inter-process ms: "
         "replica 0's time per step in collectives across processes (Gloo), part of that wait where it is not "
         "hidden behind backward.\n";
  return out;
}

std::string scaling_csv(const std::vector<ScalingRow>& rows) {
  std::string out =
      "replicas,global_batch,per_replica_batch,images_per_sec,efficiency,step_p50_ms,step_p95_ms,"
      "input_wait_share,copy_share,forward_share,backward_share,all_reduce_share,optimizer_share,processes,"
      "inter_process_ms\n";
  for (const auto& r : rows) {
    const auto& b = r.breakdown;
    out += fmt::format("{},{},{},{:.3f},{:.4f},{:.3f},{:.3f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{},{:.3f}\n",
                       r.replicas, r.global_batch, r.per_replica_batch, r.images_per_sec, r.efficiency, r.step_p50_ms,
                       r.step_p95_ms, phase_share(b, b.input_wait), phase_share(b, b.copy),
                       phase_share(b, b.forward), phase_share(b, b.backward), phase_share(b, b.all_reduce),
                       phase_share(b, b.optimizer), r.processes, r.inter_process_ms);
  }
  return out;
}

std::string scaling_svg(const std::vector<ScalingRow>& rows, const std::string& title) {
  TANDEM_CHECK(!rows.empty(), ErrorCode::kInvalidArgument, "scaling: no runs to chart");
  std::vector<ScalingRow> sorted = rows;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.replicas < b.replicas; });
  double per_replica_base = sorted.front().images_per_sec / std::max(1, sorted.front().replicas);
  std::vector<double> measured, ideal, efficiency, full;
  for (const auto& r : sorted) {
    measured.push_back(r.images_per_sec);
    ideal.push_back(r.replicas * per_replica_base);
    efficiency.push_back(r.efficiency);
    full.push_back(1.0);
  }
  double x_min = sorted.front().replicas, x_max = sorted.back().replicas;
  double tp_max = std::max(*std::max_element(measured.begin(), measured.end()),
                           *std::max_element(ideal.begin(), ideal.end()));
  double eff_max = std::max(1.0, *std::max_element(efficiency.begin(), efficiency.end()));
  Panel tp{70, 50, 300, 220, x_min, x_max, tp_max > 0 ? tp_max * 1.1 : 1.0};
  Panel eff{490, 50, 300, 220, x_min, x_max, eff_max * 1.1};
  std::string out =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"840\" height=\"340\" viewBox=\"0 0 840 340\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"840\" height=\"340\" fill=\"white\"/>\n";
  out += fmt::format("<text x=\"420\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
                     xml_escape(title));
  out += axes(tp, sorted, sorted.front().unit + "/s (dashed: ideal N x throughput_1)", fmt::format("{:.0f}", tp.y_max));
  out += polyline(tp, sorted, ideal, "#999", "ideal", true);
  out += polyline(tp, sorted, measured, "#1f77b4", "throughput", false);
  out += axes(eff, sorted, "efficiency (dashed: 100%)", pct(eff.y_max));
  out += polyline(eff, sorted, full, "#999", "ideal-efficiency", true);
  out += polyline(eff, sorted, efficiency, "#d62728", "efficiency", false);
  out += "</svg>\n";
  return out;
}

}  // namespace tandem::tools
