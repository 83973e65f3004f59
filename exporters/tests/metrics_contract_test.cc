// docs/metrics.md is the contract: every metric it lists is exported, every
// exported metric is listed, and the Grafana dashboard and the alert rules
// use only listed metrics.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "rasd/exporters/metrics.h"

namespace rasd::exporters {
namespace {

std::string ReadFile(const std::string& relative) {
  std::ifstream file(std::string(RASD_SOURCE_DIR) + "/" + relative);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::set<std::string> Documented() {
  std::set<std::string> names;
  const std::regex row(R"(^\| `(rasd_[a-z0-9_]+)` \|)");
  std::istringstream doc(ReadFile("docs/metrics.md"));
  for (std::string line; std::getline(doc, line);) {
    std::smatch match;
    if (std::regex_search(line, match, row)) names.insert(match[1]);
  }
  return names;
}

// rasd_* names in a text, histogram series folded to their family.
std::set<std::string> NamesIn(const std::string& text) {
  std::set<std::string> names;
  const std::regex name(R"(rasd_[a-z0-9_]+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), name); it != std::sregex_iterator();
       ++it) {
    std::string found = it->str();
    for (const char* suffix : {"_bucket", "_count", "_sum"}) {
      const std::string tail = suffix;
      if (found.size() > tail.size() && found.ends_with(tail) &&
          found.find("_seconds") != std::string::npos)
        found.resize(found.size() - tail.size());
    }
    names.insert(found);
  }
  return names;
}

TEST(MetricsContractTest, TheDocumentListsExactlyWhatIsExported) {
  const auto documented = Documented();
  ASSERT_GE(documented.size(), 20u) << "docs/metrics.md lost its table?";
  std::set<std::string> exported;
  const MetricsSnapshot empty;
  std::istringstream text(RenderText(empty));
  for (std::string line; std::getline(text, line);) {
    if (line.starts_with("# TYPE ")) exported.insert(line.substr(7, line.find(' ', 7) - 7));
  }
  EXPECT_EQ(exported, documented);
}

TEST(MetricsContractTest, TheDashboardAndTheAlertsUseOnlyDocumentedMetrics) {
  const auto documented = Documented();
  const auto dashboard = nlohmann::json::parse(ReadFile("packaging/grafana/rasd-dashboard.json"));
  std::string expressions;
  for (const auto& panel : dashboard["panels"]) {
    ASSERT_FALSE(panel["targets"].empty()) << panel["title"];
    for (const auto& target : panel["targets"])
      expressions += target["expr"].get<std::string>() + "\n";
  }
  const auto used = NamesIn(expressions);
  EXPECT_GE(used.size(), 10u);
  for (const auto& name : used) EXPECT_TRUE(documented.contains(name)) << "dashboard: " << name;
  for (const auto& name : NamesIn(ReadFile("packaging/prometheus/rasd-alerts.yml")))
    EXPECT_TRUE(documented.contains(name)) << "alerts: " << name;
}

}  // namespace
}  // namespace rasd::exporters
