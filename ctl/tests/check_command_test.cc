#include "check_command.h"

#include <gtest/gtest.h>

namespace rasd::ctl {
namespace {

nlohmann::json Reply(const std::string& health, nlohmann::json findings, int devices = 4) {
  return {{"health", health},
          {"devices", {{"count", devices}}},
          {"findings", std::move(findings)},
          {"scheduler", {{"kind", "none"}}}};
}

TEST(CheckVerdictTest, HealthyIsOkWithTheDeviceCount) {
  const auto verdict = VerdictFrom(Reply("ok", nlohmann::json::array()), "");
  EXPECT_EQ(verdict.health, CheckHealth::kOk);
  EXPECT_EQ(verdict.line, "rasd: OK: 4 device(s) healthy");
  EXPECT_EQ(verdict.summary, "OK: 4 device(s) healthy");
  EXPECT_EQ(verdict.headline, "4 device(s) healthy");
}

TEST(CheckVerdictTest, AProblemNamesTheFirstFindingAndCountsTheOthersWithin80Characters) {
  const auto verdict = VerdictFrom(
      Reply("problem",
            {{{"level", "problem"}, {"device", 2}, {"state", "isolated"},
              {"reason", "Xid 79: GPU has fallen off the bus " + std::string(100, 'x')}},
             {{"level", "problem"}, {"device", 3}, {"state", "draining"}, {"reason", "operator"}},
             {{"level", "degraded"}, {"device", 0}, {"state", "degraded"}, {"reason", "ce"}}}),
      "");
  EXPECT_EQ(verdict.health, CheckHealth::kProblem);
  EXPECT_LE(verdict.line.size(), 80u) << verdict.line;
  EXPECT_TRUE(verdict.line.starts_with("rasd: device 2 isolated: Xid 79: GPU has fallen off"))
      << verdict.line;
  EXPECT_TRUE(verdict.line.ends_with("... (+1 more)")) << verdict.line;
  ASSERT_EQ(verdict.details.size(), 3u);  // the text format shows all, whole
  EXPECT_EQ(verdict.details[2], "device 0 degraded: ce");
}

TEST(CheckVerdictTest, ANodeFaultIsNamedAsSuch) {
  const auto verdict = VerdictFrom(
      Reply("problem", {{{"level", "problem"}, {"device", nullptr}, {"state", "node-fault"},
                         {"reason", "APEI: fatal"}}}),
      "");
  EXPECT_EQ(verdict.line, "rasd: node fault: APEI: fatal");
  EXPECT_EQ(verdict.summary, "node fault: APEI: fatal") << "the drain reason, kept apart";
}

TEST(CheckVerdictTest, DegradedIsOkAndSaysWhichDevice) {
  const auto verdict = VerdictFrom(
      Reply("degraded", {{{"level", "degraded"}, {"device", 1}, {"state", "degraded"},
                          {"reason", "CE rate"}}}),
      "");
  EXPECT_EQ(verdict.health, CheckHealth::kDegraded);
  EXPECT_EQ(verdict.line, "rasd: OK, device 1 degraded: CE rate");
}

TEST(CheckVerdictTest, NoAnswerOrNoVerdictIsUnknownNeverHealthy) {
  auto verdict = VerdictFrom(std::nullopt, "rasd does not answer: connection refused");
  EXPECT_EQ(verdict.health, CheckHealth::kUnknown);
  EXPECT_EQ(verdict.line, "rasd: unknown: rasd does not answer: connection refused");
  EXPECT_EQ(VerdictFrom(nlohmann::json::object(), "").health, CheckHealth::kUnknown);
  EXPECT_EQ(VerdictFrom(nlohmann::json{{"health", 3}}, "").health, CheckHealth::kUnknown);
  EXPECT_EQ(VerdictFrom(Reply("sideways", nlohmann::json::array()), "").health,
            CheckHealth::kUnknown);
  // A problem verdict with no finding to name is not trusted as OK either.
  EXPECT_EQ(VerdictFrom(Reply("problem", nlohmann::json::array()), "").health,
            CheckHealth::kUnknown);
}

TEST(OneLineTest, CutsOnACharacterBoundaryAndBlanksControls) {
  EXPECT_EQ(OneLine("a\nb\x1b[31mc", 80), "a b [31mc");
  const std::string cut = OneLine(std::string(76, 'x') + "\xc3\xa9\xc3\xa9\xc3\xa9", 80);
  EXPECT_LE(cut.size(), 80u);
  EXPECT_EQ(cut, std::string(76, 'x') + "...");
  EXPECT_EQ(OneLine(std::string(77, 'x') + "\xc3\xa9", 80), std::string(77, 'x') + "\xc3\xa9");
}

}  // namespace
}  // namespace rasd::ctl
