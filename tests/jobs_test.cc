// Jobs inside the real rasd: an inference service under load and a
// collective over the simulated devices, started from the config; a Xid
// 79 record isolates a device through the policy, and the jobs move off it
// with no request lost and the collective's result equal to a fault-free
// run. Operators start and stop jobs with rasctl.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "test_support.h"

namespace rasd::testing {
namespace {

nlohmann::json Jobs(RasdInstance& rasd) {
  const auto result = rasd.Rasctl({"--json", "jobs"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return nlohmann::json::parse(result.out, nullptr, false)["jobs"];
}

nlohmann::json JobNamed(RasdInstance& rasd, const std::string& name) {
  for (const auto& job : Jobs(rasd))
    if (job["name"] == name) return job;
  return nullptr;
}

TEST(JobsTest, AFatalDeviceMovesTheJobsOffItWithNothingLost) {
  RasdInstance rasd;
  rasd.WriteConfig(R"(simulator:
  memory_mib: 64
jobs:
  - name: llm
    kind: inference
    load_rps: 500
  - name: allreduce
    kind: collective
    elements: 16384
    steps: 4000
    checkpoint_every: 10
)");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto llm = JobNamed(rasd, "llm");
        auto allreduce = JobNamed(rasd, "allreduce");
        return llm.is_object() && llm["requests"]["served"] > 200 && allreduce.is_object() &&
               allreduce["step"] > 50;
      },
      10s))
      << rasd.Stderr();
  rasd.AppendKmsg(
      "4,1,1000,-;NVRM: Xid (PCI:ffff:c3:00): 79, pid=1, GPU has fallen off the bus.\n");
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto allreduce = JobNamed(rasd, "allreduce");
        return allreduce.is_object() && allreduce["devices"] == nlohmann::json({0, 1, 3});
      },
      10s))
      << JobNamed(rasd, "allreduce").dump(2) << rasd.Stderr();
  auto llm = JobNamed(rasd, "llm");
  EXPECT_EQ(llm["devices"], nlohmann::json({0, 1, 3}));
  EXPECT_EQ(llm["state"], "degraded");
  ASSERT_TRUE(WaitUntil([&] { return JobNamed(rasd, "allreduce")["state"] == "finished"; }, 30s))
      << JobNamed(rasd, "allreduce").dump(2);
  auto allreduce = JobNamed(rasd, "allreduce");
  EXPECT_EQ(allreduce["checksums_match"], true) << "the same result as a fault-free run";
  EXPECT_GE(allreduce["reforms"], 1);
  llm = JobNamed(rasd, "llm");
  EXPECT_EQ(llm["requests"]["lost"], 0);
  EXPECT_EQ(llm["load"]["wrong"], 0);

  const auto table = rasd.Rasctl({"jobs"});
  EXPECT_NE(table.out.find("allreduce"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("checksums ok"), std::string::npos) << table.out;

  // Operators start and stop jobs; only admins may.
  EXPECT_EQ(rasd.Rasctl({"job", "start", "inference", "extra", "--devices", "0,1"}).exit_code, 0);
  EXPECT_EQ(JobNamed(rasd, "extra")["devices"], nlohmann::json({0, 1}));
  const auto duplicate = rasd.Rasctl({"job", "start", "inference", "extra"});
  EXPECT_EQ(duplicate.exit_code, 1);
  EXPECT_NE(duplicate.err.find("already_exists"), std::string::npos) << duplicate.err;
  if (CanActAsOtherUsers()) {
    EXPECT_EQ(rasd.Rasctl({"job", "stop", "extra"}, 65534, 65534).exit_code, 1) << "admin only";
  }
  EXPECT_EQ(rasd.Rasctl({"job", "stop", "extra"}).exit_code, 0);
  EXPECT_TRUE(JobNamed(rasd, "extra").is_null());
  // Requests through the control API, answered when a replica has run them.
  const auto first = rasd.Rasctl({"--json", "infer", "llm", "--seed", "5"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto answer = nlohmann::json::parse(first.out);
  EXPECT_EQ(answer["output"].size(), 16u);
  const auto again =
      nlohmann::json::parse(rasd.Rasctl({"--json", "infer", "llm", "--seed", "5"}).out);
  EXPECT_EQ(again["output"], answer["output"]) << "the same input, the same bits";
  EXPECT_EQ(rasd.Rasctl({"infer", "nope"}).exit_code, 1);
  const auto short_input = rasd.Rasctl({"infer", "llm", "--input", "1,2,3"});
  EXPECT_EQ(short_input.exit_code, 1);
  EXPECT_NE(short_input.err.find("the model takes 64"), std::string::npos) << short_input.err;
  if (CanActAsOtherUsers()) {
    EXPECT_EQ(rasd.Rasctl({"infer", "llm"}, 65534, 65534).exit_code, 1) << "admin only";
  }
  // Pipelined on one connection: every request answered, with its id.
  RawClient client(rasd.Socket());
  ASSERT_TRUE(client.Send(R"({"command":"infer","args":{"job":"llm","seed":1},"id":1})"
                          "\n"
                          R"({"command":"ping","id":2})"
                          "\n"
                          R"({"command":"infer","args":{"job":"llm","seed":2},"id":3})"
                          "\n"));
  std::set<int> ids;
  for (int i = 0; i < 3; ++i) {
    auto line = client.ReadLine(5s);
    ASSERT_TRUE(line.has_value()) << "reply " << i;
    const auto reply = nlohmann::json::parse(*line);
    EXPECT_EQ(reply["ok"], true) << *line;
    ids.insert(reply["id"].get<int>());
  }
  EXPECT_EQ(ids, (std::set<int>{1, 2, 3}));

  EXPECT_EQ(rasd.Stop(), 0) << "jobs stop with the daemon";
  if (!CanActAsOtherUsers())
    GTEST_SKIP() << "the checks as another user (uid 65534) need root; the rest passed";
}

// A device that computes wrong without reporting anything: screening finds
// it, it is isolated with the kernel that was wrong, the collective computes
// again what it may have touched, and the other devices stay in service.
TEST(JobsTest, ADeviceComputingWrongSilentlyIsIsolatedAndTheCollectiveResultStaysRight) {
  RasdInstance rasd;
  rasd.WriteConfig(R"(simulator:
  memory_mib: 64
screening:
  budget: 0.5
  elements: 65536
jobs:
  - name: chat
    kind: inference
    load_rps: 200
  - name: allreduce
    kind: collective
    elements: 16384
    steps: 1000000
    checkpoint_every: 10
)");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto devices = rasd.RasctlJson({"devices"})["devices"];
        for (const auto& device : devices)
          if (!device["screening"].is_object() || device["screening"]["screenings"] < 1)
            return false;
        return JobNamed(rasd, "allreduce")["step"] > 50;
      },
      30s))
      << "every device screened clean first\n"
      << rasd.Stderr();
  // The inference job cross-checks a sample of its answers on other
  // replicas, the collective a rank's part on another rank's device.
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto device = rasd.RasctlJson({"devices"})["devices"][0];
        return device["screening"]["cross_checks"].value("inference", 0) >= 1 &&
               device["screening"]["cross_checks"].value("collective", 0) >= 1;
      },
      30s))
      << rasd.RasctlJson({"devices"})["devices"][0].dump(2);
  const auto injected = rasd.Rasctl({"inject", "sdc", "--device", "2", "--rate", "1e-4"});
  ASSERT_EQ(injected.exit_code, 0) << injected.err;
  nlohmann::json device2;
  ASSERT_TRUE(WaitUntil(
      [&] {
        device2 = rasd.RasctlJson({"devices"})["devices"][2];
        return device2["state"] == "isolated";
      },
      60s))
      << device2.dump(2) << rasd.Stderr();
  const std::string reason = device2["reason"];
  EXPECT_TRUE(reason.starts_with("silent data corruption: ")) << reason;
  EXPECT_NE(reason.find("confirmed by 2 wrong result(s) in "), std::string::npos) << reason;
  EXPECT_EQ(device2["suggested_action"], "hardware-inspection");
  // The answers its replica gave since its last clean cross-check are named.
  bool listed = false;
  for (const auto& action : device2["recent_actions"])
    listed |= action["action"] == "isolate-device" &&
              action["detail"].get<std::string>().find("chat: ") != std::string::npos;
  EXPECT_TRUE(listed) << device2["recent_actions"].dump(2);
  // Then each of them runs again on another replica, and the review says
  // which were wrong.
  nlohmann::json review;
  EXPECT_TRUE(WaitUntil(
      [&] {
        const auto devices = rasd.RasctlJson({"devices"});
        for (const auto& action : devices["devices"][2]["recent_actions"])
          if (action["action"] == "review-answers") review = action;
        return review.is_object();
      },
      20s))
      << rasd.RasctlJson({"devices"})["devices"][2]["recent_actions"].dump(2);
  if (review.is_object()) {
    EXPECT_EQ(review["result"], "ok") << review.dump(2);
    EXPECT_NE(review["detail"].get<std::string>().find("inference job chat: "), std::string::npos)
        << review.dump(2);
    EXPECT_NE(review["detail"].get<std::string>().find("run again on other replicas: "),
              std::string::npos)
        << review.dump(2);
  }
  // Every answer the load generator found wrong was answered again, right.
  nlohmann::json load;
  EXPECT_TRUE(WaitUntil(
      [&] {
        load = JobNamed(rasd, "chat")["load"];
        return load["wrong_corrected"] == load["wrong"];
      },
      10s))
      << load.dump(2);
  EXPECT_EQ(load["corrections_wrong"], 0) << load.dump(2);
  EXPECT_GE(load["corrected"], load["wrong"]) << load.dump(2);
  // Confirmed by wrong screenings, outvoted results in the jobs, or both
  // (whichever came first).
  int wrong_results = device2["screening"]["mismatches"].get<int>();
  for (const auto& [kind, count] : device2["screening"]["cross_check_mismatches"].items())
    wrong_results += count.get<int>();
  EXPECT_GE(wrong_results, 2) << device2["screening"].dump(2);
  if (device2["screening"]["mismatches"] > 0) {
    EXPECT_FALSE(device2["screening"]["last"]["passed"]);
  }
  for (int healthy : {0, 1, 3}) {
    const auto device = rasd.RasctlJson({"devices"})["devices"][healthy];
    EXPECT_EQ(device["state"], "healthy") << device.dump(2);
    EXPECT_EQ(device["screening"]["mismatches"], 0) << device.dump(2);
  }
  nlohmann::json allreduce;
  ASSERT_TRUE(WaitUntil(
      [&] {
        allreduce = JobNamed(rasd, "allreduce");
        return allreduce["devices"] == nlohmann::json({0, 1, 3}) &&
               allreduce["distrust_rollbacks"] == 1 && allreduce["state"] == "running";
      },
      30s))
      << allreduce.dump(2);
  const int rolled_back_at = allreduce["step"];
  ASSERT_TRUE(
      WaitUntil([&] { return JobNamed(rasd, "allreduce")["step"] > rolled_back_at + 100; }, 30s));
  allreduce = JobNamed(rasd, "allreduce");
  EXPECT_EQ(allreduce["checksums_match"], true)
      << "every step the same as a fault-free run's, after the roll-back" << allreduce.dump(2);
  EXPECT_GT(allreduce["steps_redone"], 0);
  const auto table = rasd.Rasctl({"devices"});
  EXPECT_NE(table.out.find("SCREEN"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("wrong"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("last screening"), std::string::npos) << table.out;
  // The isolation outlives a restart, with its cause.
  rasd.Stop();
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  const auto again = rasd.RasctlJson({"devices"})["devices"][2];
  EXPECT_EQ(again["state"], "isolated") << again.dump(2);
  EXPECT_EQ(again["reason"], reason);
}

}  // namespace
}  // namespace rasd::testing
