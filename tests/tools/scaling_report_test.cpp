// trainer scaling's report: efficiency arithmetic, phase shares, the markdown table, the CSV's
// header and rows, and an SVG that is well-formed with both panels' lines and the ideal lines.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "tools/trainer/scaling_report.h"

namespace tandem::tools {
namespace {

using ::testing::HasSubstr;

ScalingRow row(int replicas, double images_per_sec) {
  ScalingRow r;
  r.replicas = replicas;
  r.global_batch = 128;
  r.per_replica_batch = 128 / replicas;
  r.images_per_sec = images_per_sec;
  r.step_p50_ms = 100.0 / replicas;
  r.step_p95_ms = 120.0 / replicas;
  r.breakdown.input_wait = 0.1;
  r.breakdown.forward = 0.3;
  r.breakdown.backward = 0.4;
  r.breakdown.all_reduce = 0.2;
  return r;
}

std::vector<ScalingRow> sample() {
  std::vector<ScalingRow> rows = {row(1, 100), row(2, 150), row(4, 200)};
  fill_efficiency(rows);
  return rows;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    out.push_back(text.substr(start, end - start));
  }
  return out;
}

TEST(ScalingReport, EfficiencyIsThroughputOverNTimesTheOneReplicaThroughput) {
  auto rows = sample();
  EXPECT_DOUBLE_EQ(rows[0].efficiency, 1.0);
  EXPECT_DOUBLE_EQ(rows[1].efficiency, 0.75);  // 150 / (2 x 100)
  EXPECT_DOUBLE_EQ(rows[2].efficiency, 0.5);   // 200 / (4 x 100)
}

TEST(ScalingReport, WithoutAOneReplicaRunTheSmallestRunIsTheBaseline) {
  std::vector<ScalingRow> rows = {row(4, 360), row(2, 200)};
  fill_efficiency(rows);
  EXPECT_DOUBLE_EQ(rows[1].efficiency, 1.0);
  EXPECT_DOUBLE_EQ(rows[0].efficiency, 0.9);  // 360 / (4 x 100)
}

TEST(ScalingReport, NoRowsOrNoBaselineThroughputIsAnError) {
  std::vector<ScalingRow> none;
  EXPECT_THROW(fill_efficiency(none), Error);
  std::vector<ScalingRow> zero = {row(1, 0), row(2, 10)};
  EXPECT_THROW(fill_efficiency(zero), Error);
}

TEST(ScalingReport, PhaseShareIsAFractionOfTheTotal) {
  ScalingRow r = row(1, 1);
  EXPECT_DOUBLE_EQ(phase_share(r.breakdown, r.breakdown.all_reduce), 0.2);
  EXPECT_DOUBLE_EQ(phase_share(train::StepBreakdown{}, 0.0), 0.0);
}

TEST(ScalingReport, MarkdownHasAHeaderAndOneLinePerRun) {
  std::string md = scaling_markdown(sample(), "strong");
  EXPECT_THAT(md, HasSubstr("Strong (fixed global batch)"));
  EXPECT_THAT(md, HasSubstr("| All-reduce |"));
  EXPECT_THAT(md, HasSubstr("| 2 | 128 | 64 | 150.0 | 75.0% | 50.0 | 60.0 | 10.0% | 0.0% | 30.0% | 40.0% | 20.0% | 0.0% | 1 "
                            "| 0.00 |"));
  std::vector<ScalingRow> across = sample();
  across[2].processes = 2;
  across[2].inter_process_ms = 3.25;
  EXPECT_THAT(scaling_markdown(across, "strong"), HasSubstr("| 0.0% | 2 | 3.25 |"));
  EXPECT_THAT(scaling_markdown(sample(), "weak"), HasSubstr("Weak (fixed per-replica batch)"));
}

TEST(ScalingReport, CsvHasTheHeaderAndOneRowPerRun) {
  auto csv = lines(scaling_csv(sample()));
  ASSERT_EQ(csv.size(), 4u);
  EXPECT_EQ(csv[0],
            "replicas,global_batch,per_replica_batch,images_per_sec,efficiency,step_p50_ms,step_p95_ms,"
            "input_wait_share,copy_share,forward_share,backward_share,all_reduce_share,optimizer_share,processes,"
            "inter_process_ms");
  EXPECT_EQ(csv[1], "1,128,128,100.000,1.0000,100.000,120.000,0.1000,0.0000,0.3000,0.4000,0.2000,0.0000,1,0.000");
  EXPECT_EQ(csv[3], "4,128,32,200.000,0.5000,25.000,30.000,0.1000,0.0000,0.3000,0.4000,0.2000,0.0000,1,0.000");
}

// Every opening tag is closed in order (self-closing tags count as both); no stray '&' or '<'.
bool balanced(const std::string& svg) {
  std::vector<std::string> stack;
  std::regex tag(R"(<(/?)([A-Za-z?][^\s/>]*)[^>]*?(/?)>)");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tag); it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    std::string name = m[2];
    if (name.starts_with("?")) continue;  // the XML declaration
    if (m[1] == "/") {
      if (stack.empty() || stack.back() != name) return false;
      stack.pop_back();
    } else if (m[3] != "/") {
      stack.push_back(name);
    }
  }
  return stack.empty();
}

TEST(ScalingReport, SvgIsWellFormedWithBothPanelsAndTheIdealLines) {
  std::string svg = scaling_svg(sample(), "strong scaling: a&b <config>");
  EXPECT_TRUE(svg.starts_with("<?xml"));
  EXPECT_TRUE(balanced(svg)) << svg;
  EXPECT_THAT(svg, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_THAT(svg, HasSubstr("a&amp;b &lt;config&gt;"));
  EXPECT_THAT(svg, HasSubstr("class=\"throughput\""));
  EXPECT_THAT(svg, HasSubstr("class=\"efficiency\""));
  EXPECT_THAT(svg, HasSubstr("class=\"ideal\""));
  EXPECT_THAT(svg, HasSubstr("stroke-dasharray"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("class=\"ideal\" points=\"([^\"]*)\"")));
  EXPECT_EQ(lines(std::string(m[1]) + "\n").size(), 1u);
  EXPECT_EQ(std::count(m[1].first, m[1].second, ','), 3);  // one point per replica count
}

TEST(ScalingReport, SvgDrawsASingleRunWithoutDividingByZero) {
  std::vector<ScalingRow> rows = {row(1, 50)};
  fill_efficiency(rows);
  std::string svg = scaling_svg(rows, "one");
  EXPECT_TRUE(balanced(svg));
  EXPECT_THAT(svg, ::testing::Not(HasSubstr("nan")));
  EXPECT_THAT(svg, ::testing::Not(HasSubstr("inf")));
}

}  // namespace
}  // namespace tandem::tools
