// Every row of docs/architecture.md's taxonomy, injected with rasctl into a running
// rasd with an inference job on its devices, produces the expected action,
// device state, stored event and metric; the job loses nothing.

#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_support.h"

namespace rasd::testing {
namespace {

nlohmann::json Json(RasdInstance& rasd, std::vector<std::string> args) {
  args.insert(args.begin(), "--json");
  const auto result = rasd.Rasctl(args);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return nlohmann::json::parse(result.out, nullptr, false);
}

// The newest action named `action` on `device`, waiting for it.
nlohmann::json WaitForAction(RasdInstance& rasd, int device, const std::string& action,
                             const std::string& rule = "") {
  nlohmann::json found;
  WaitUntil(
      [&] {
        // A named value: a range-for over a temporary's member dangles.
        const auto actions = Json(rasd, {"actions", "--device", std::to_string(device)});
        for (const auto& entry : actions["actions"]) {
          if (entry["action"] == action && (rule.empty() || entry["rule"] == rule)) {
            found = entry;
            return true;
          }
        }
        return false;
      },
      10s);
  return found;
}

std::string StateOf(RasdInstance& rasd, int device) {
  return Json(rasd, {"devices", std::to_string(device)})["devices"][0]["state"];
}

TEST(InjectTest, EachClassOfTheTaxonomyGetsItsActionAndTheJobLosesNothing) {
  RasdInstance rasd;
  rasd.WriteConfig(R"(simulator:
  memory_mib: 64
inject:
  allow_sources: true
ras:
  edac_poll_ms: 100
jobs:
  - name: llm
    kind: inference
    load_rps: 300
)");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  ASSERT_TRUE(
      WaitUntil([&] { return Json(rasd, {"jobs"})["jobs"][0]["requests"]["served"] > 100; }, 10s));

  // CE: a storm on one page retires it at the threshold (50 in 24 h).
  auto ce = Json(rasd, {"inject", "ce", "--device", "0", "--job", "llm", "--count", "60"});
  EXPECT_EQ(ce["count"], 60);
  auto retire = WaitForAction(rasd, 0, "retire-page");
  EXPECT_EQ(retire["rule"], "ce-device-memory");
  EXPECT_EQ(retire["result"], "ok") << retire.dump();
  EXPECT_EQ(Json(rasd, {"retired", "0"})["pages"].size(), 1u);

  // SRAR first, while llm is settled: the SRAO below is read by its owner
  // soon after, and that SRAR restarts llm (an address picked before a
  // restart lies in freed memory, never read again).
  // SRAR: the job's next read consumes the poison; exactly that job is
  // killed (and restarts itself); the device serves on.
  Json(rasd, {"inject", "srar", "--device", "3", "--job", "llm"});
  auto kill = WaitForAction(rasd, 3, "kill-consumer");
  EXPECT_EQ(kill["rule"], "srar-device-memory");
  EXPECT_NE(kill["detail"].get<std::string>().find("job llm stopped:"), std::string::npos) << kill.dump();
  EXPECT_EQ(StateOf(rasd, 3), "healthy");
  // The kill restarts llm, which allocates afresh: the injections below
  // pick their addresses in the restarted job's memory.
  const auto served = Json(rasd, {"jobs"})["jobs"][0]["requests"]["served"].get<std::int64_t>();
  ASSERT_TRUE(WaitUntil(
      [&] { return Json(rasd, {"jobs"})["jobs"][0]["requests"]["served"] > served + 100; }, 10s));

  // UCNA and SRAO: the page is retired and its owner is named.
  Json(rasd, {"inject", "ucna", "--device", "1", "--job", "llm"});
  auto at_risk = WaitForAction(rasd, 1, "mark-at-risk");
  EXPECT_EQ(at_risk["detail"], "job llm holds the poisoned page");
  Json(rasd, {"inject", "srao", "--device", "2", "--job", "llm"});
  // (Its owner reads the page soon after, which is an SRAR of its own.)
  EXPECT_EQ(WaitForAction(rasd, 2, "retire-page", "srao-device-memory")["result"], "ok");

  // UCE, FATAL, an Xid 79: isolated.
  Json(rasd, {"inject", "uce", "--device", "1"});
  Json(rasd, {"inject", "fatal", "--device", "2"});
  Json(rasd, {"inject", "xid", "79", "--device", "3"});
  for (int device : {1, 2, 3}) {
    ASSERT_TRUE(WaitUntil([&] { return StateOf(rasd, device) == "isolated"; }, 10s)) << device;
  }
  EXPECT_EQ(WaitForAction(rasd, 1, "isolate-device")["rule"], "uce-device");
  EXPECT_EQ(WaitForAction(rasd, 2, "isolate-device")["rule"], "fatal-device");

  // INFO (an application fault): recorded, nothing done.
  const auto before = Json(rasd, {"actions", "--device", "0"})["actions"].size();
  Json(rasd, {"inject", "xid", "13", "--device", "0"});
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto events = Json(rasd, {"events", "--device", "0"});
        for (const auto& event : events["events"])
          if (event["vendor_code"] == 13) return event["severity"] == "INFO";
        return false;
      },
      5s));
  EXPECT_EQ(Json(rasd, {"actions", "--device", "0"})["actions"].size(), before);
  EXPECT_EQ(StateOf(rasd, 0), "healthy");

  // Sources: a kernel record and a simulated EDAC counter.
  Json(rasd, {"inject", "kmsg",
              "EDAC MC0: 1 CE memory read error on DIMM_A1 (channel:0 slot:0 page:0x777 "
              "offset:0x0 grain:32 syndrome:0x0)"});
  // The first write makes the simulated DIMM (its count is the baseline,
  // as counts since boot are); the second is an increase. Each inject
  // polls EDAC before it answers, so the baseline is taken in between.
  Json(rasd, {"inject", "edac", "--mc", "0", "--dimm", "3", "--ce", "5"});
  Json(rasd, {"inject", "edac", "--mc", "0", "--dimm", "3", "--ce", "3"});
  ASSERT_TRUE(WaitUntil(
      [&] {
        int found = 0;
        const auto events = Json(rasd, {"events", "--severity", "CE"});
        for (const auto& event : events["events"]) {
          if (event["source"] == "inject" && event["origin"] == "edac") found |= 1;
          if (event["source"] == "edac_sysfs" && event["count"] == 3) found |= 2;
        }
        return found == 3;
      },
      5s))
      << Json(rasd, {"events", "--severity", "CE"}).dump(1) << rasd.Stderr();

  // The repaired device comes back; the faulty ones do not (their fault is
  // still there: the self-test fails).
  EXPECT_EQ(rasd.Rasctl({"undrain", "3"}).exit_code, 0);
  EXPECT_EQ(StateOf(rasd, 3), "healthy");
  for (const char* device : {"1", "2"}) {
    const auto refused = rasd.Rasctl({"undrain", device});
    EXPECT_EQ(refused.exit_code, 1) << device;
    EXPECT_NE(refused.err.find("self-test failed"), std::string::npos) << refused.err;
  }

  // The job served throughout; nothing lost or wrong.
  const auto job = Json(rasd, {"jobs"})["jobs"][0];
  EXPECT_EQ(job["requests"]["lost"], 0) << job.dump();
  EXPECT_EQ(job["load"]["wrong"], 0);
  const auto status = Json(rasd, {"status"});
  EXPECT_GE(status["actions"]["kill-consumer ok"], 1);
  EXPECT_GE(status["actions"]["isolate-device ok"], 3);

  // And the metrics say so.
  const std::string metrics = Http(status["metrics"]["port"].get<int>(), "GET", "/metrics");
  for (const char* line : {
           R"(rasd_device_health{device="1",state="isolated"} 1)",
           R"(rasd_device_health{device="2",state="isolated"} 1)",
           R"(rasd_device_health{device="3",state="healthy"} 1)",
           R"(rasd_ras_events_total{origin="sim",severity="CE",device="0"} 60)",
           R"(rasd_requests_total{job="llm",outcome="lost"} 0)",
       }) {
    EXPECT_NE(metrics.find(std::string(line) + "\n"), std::string::npos) << line;
  }
  EXPECT_NE(metrics.find(R"(rasd_actions_total{action="kill-consumer",result="ok"})"),
            std::string::npos);
  EXPECT_NE(metrics.find(R"(rasd_retired_pages_total{device="0"} 1)"), std::string::npos);
}

TEST(InjectTest, HostRowsThroughTheKernelLogSeam) {
  RasdInstance rasd;
  rasd.WriteConfig("inject:\n  allow_sources: true\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  // CE on one host page, 50 times: soft-offline (off by default: "disabled").
  std::string storm;
  for (int i = 0; i < 50; ++i) {
    storm +=
        "EDAC MC0: 1 CE memory read error on DIMM_A1 (channel:0 slot:0 page:0x4242 "
        "offset:0x10 grain:32 syndrome:0x0)\n";
  }
  EXPECT_EQ(Json(rasd, {"inject", "kmsg", storm})["events"], 50);
  // UCE on host memory: recorded; FATAL on the host: drain the node.
  Json(rasd, {"inject", "kmsg",
              "EDAC MC0: 1 UE memory read error on DIMM_A1 (channel:0 slot:0 page:0x5151 "
              "offset:0x0 grain:32 syndrome:0x0)"});
  Json(rasd, {"inject", "kmsg",
              "{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 0\n"
              "{1}[Hardware Error]: event severity: fatal"});
  std::map<std::string, nlohmann::json> by_action;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto actions = Json(rasd, {"actions"});
        for (const auto& action : actions["actions"]) by_action[action["action"]] = action;
        return by_action.contains("soft-offline-page") && by_action.contains("drain-node");
      },
      5s));
  EXPECT_EQ(by_action["soft-offline-page"]["result"], "disabled");
  EXPECT_EQ(by_action["soft-offline-page"]["rule"], "ce-host-memory");
  EXPECT_EQ(by_action["drain-node"]["result"], "skipped");
  EXPECT_EQ(by_action["drain-node"]["rule"], "fatal-host");
  const auto uce = Json(rasd, {"events", "--severity", "UCE"});
  ASSERT_EQ(uce["events"].size(), 1u);
  EXPECT_EQ(uce["events"][0]["origin"], "edac");
  EXPECT_FALSE(by_action.contains("isolate-device")) << "host errors isolate no device";
}

TEST(InjectTest, SourcesAndHardwareNeedTheConfigAndOnlyAdminsInject) {
  RasdInstance rasd;
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  auto refused = rasd.Rasctl({"inject", "kmsg", "EDAC MC0: 1 CE"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("inject.allow_sources"), std::string::npos) << refused.err;
  for (const std::vector<std::string>& hardware :
       {std::vector<std::string>{"inject", "einj", "--address", "0x1000"},
        std::vector<std::string>{"inject", "hwpoison"}}) {
    refused = rasd.Rasctl(hardware);
    EXPECT_EQ(refused.exit_code, 1);
    EXPECT_NE(refused.err.find("inject.allow_hardware"), std::string::npos) << refused.err;
  }
  if (CanActAsOtherUsers()) {
    EXPECT_EQ(rasd.Rasctl({"inject", "uce", "--device", "0"}, 65534, 65534).exit_code, 1);
  }
  EXPECT_EQ(rasd.Rasctl({"inject", "uce"}).exit_code, 1) << "no device";
  EXPECT_EQ(rasd.Rasctl({"inject", "xid"}).exit_code, 2) << "no Xid number";
  const auto nothing = rasd.Rasctl({"inject", "ce", "--device", "0"});
  EXPECT_EQ(nothing.exit_code, 1) << "no job holds memory there and no --address";
  EXPECT_NE(nothing.err.find("give --address"), std::string::npos) << nothing.err;
  // Silent corruption: options in any order, its end, and its mistakes.
  const auto sdc = Json(rasd, {"inject", "sdc", "--seed", "5", "--rate", "1e-3", "--device", "1"});
  EXPECT_EQ(sdc["kind"], "sdc") << sdc.dump();
  EXPECT_EQ(sdc["device"], 1);
  EXPECT_EQ(sdc["seed"], 5);
  EXPECT_EQ(Json(rasd, {"inject", "sdc", "--device", "1", "--rate", "0"})["rate"], 0.0);
  const auto no_rate = rasd.Rasctl({"inject", "sdc", "--device", "1"});
  EXPECT_EQ(no_rate.exit_code, 1);
  EXPECT_NE(no_rate.err.find("needs --rate"), std::string::npos) << no_rate.err;
  EXPECT_EQ(rasd.Rasctl({"inject", "sdc", "--device", "1", "--rate", "2"}).exit_code, 2)
      << "a rate past 1 is a usage error";
  const auto no_kernel =
      rasd.Rasctl({"inject", "sdc", "--device", "1", "--rate", "0.5", "--kernel", "gemmm"});
  EXPECT_EQ(no_kernel.exit_code, 1);
  EXPECT_NE(no_kernel.err.find("no kernel 'gemmm'"), std::string::npos) << no_kernel.err;
  if (!CanActAsOtherUsers())
    GTEST_SKIP() << "the checks as another user (uid 65534) need root; the rest passed";
}

TEST(InjectTest, EinjWritesTheKernelsFilesWhereTheConfigAllowsIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "hardware injection is refused unless rasd runs as root";
  RasdInstance rasd;
  // A fixture debugfs with the kernel's EINJ files.
  const auto einj = rasd.HostRoot() / "sys/kernel/debug/apei/einj";
  std::filesystem::create_directories(einj);
  WriteText(einj / "available_error_type", "0x00000008\tMemory Correctable\n");
  for (const char* file : {"error_type", "param1", "param2", "error_inject"})
    WriteText(einj / file, "");
  rasd.WriteConfig("inject:\n  allow_hardware: true\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  const auto injected = Json(rasd, {"inject", "einj", "--address", "0x12345000"});
  EXPECT_EQ(injected["address"], "0x12345000");
  EXPECT_EQ(ReadText(einj / "error_type"), "0x8\n");
  EXPECT_EQ(ReadText(einj / "param1"), "0x12345000\n");
  EXPECT_EQ(ReadText(einj / "error_inject"), "1\n");
  std::filesystem::remove_all(einj);
  const auto missing = rasd.Rasctl({"inject", "einj", "--address", "0x1000"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("no ACPI EINJ"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace rasd::testing

namespace rasd::testing {
namespace {

// One fault, one event: an injected fault is reported the way a real one
// would be, once, and gets its actions once.
TEST(InjectExactlyTest, EachDeviceFaultKindGivesItsOneEventAndItsActionsOnce) {
  RasdInstance rasd;
  rasd.WriteConfig(R"(simulator:
  memory_mib: 64
liveness:
  period_ms: 0
jobs:
  - name: llm
    kind: inference
    load_rps: 300
)");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  ASSERT_TRUE(
      WaitUntil([&] { return Json(rasd, {"jobs"})["jobs"][0]["requests"]["served"] > 50; }, 10s));
  auto events_on = [&](int device) {
    return Json(rasd, {"events", "--device", std::to_string(device)})["events"];
  };
  // Everything injected before it has been handled once a corrected error
  // injected after it is stored on device 0: the simulator's reports are
  // handled in order, each batch whole (its actions included) before the
  // next. What is asserted then cannot still be on its way.
  std::size_t fences = 0;
  auto fence = [&] {
    Json(rasd, {"inject", "ce", "--device", "0", "--job", "llm"});
    ++fences;
    return WaitUntil([&] { return events_on(0).size() >= fences; }, 10s);
  };
  auto actions_on = [&](int device) {
    std::multiset<std::string> names;
    const auto actions = Json(rasd, {"actions", "--device", std::to_string(device)});
    for (const auto& action : actions["actions"])
      names.insert(action["action"].get<std::string>() + " " + action["result"].get<std::string>());
    return names;
  };

  // SRAR: the poison is found by the read that consumes it: one SRAR event,
  // the consumer killed and the page retired, once, for "SRAR".
  Json(rasd, {"inject", "srar", "--device", "3", "--job", "llm"});
  ASSERT_TRUE(WaitUntil([&] { return actions_on(3).size() >= 2; }, 10s));
  ASSERT_TRUE(fence());
  const auto srar = events_on(3);
  ASSERT_EQ(srar.size(), 1U) << srar.dump(1);
  EXPECT_EQ(srar[0]["severity"], "SRAR");
  EXPECT_EQ(actions_on(3),
            (std::multiset<std::string>{"kill-consumer ok", "retire-page ok"}));
  const auto pages = Json(rasd, {"retired", "3"})["pages"];
  ASSERT_EQ(pages.size(), 1U);
  EXPECT_NE(pages[0]["reason"].get<std::string>().find("SRAR"), std::string::npos)
      << pages.dump();

  // UCE (a sticky fault) and FATAL (off the bus): one event each, drained and isolated.
  Json(rasd, {"inject", "uce", "--device", "1"});
  Json(rasd, {"inject", "fatal", "--device", "2"});
  for (int device : {1, 2}) {
    ASSERT_TRUE(WaitUntil([&] { return actions_on(device).size() >= 2; }, 10s)) << device;
  }
  ASSERT_TRUE(fence());
  for (const auto& [device, severity] : {std::pair{1, "UCE"}, std::pair{2, "FATAL"}}) {
    const auto events = events_on(device);
    ASSERT_EQ(events.size(), 1U) << device << events.dump(1);
    EXPECT_EQ(events[0]["severity"], severity);
    EXPECT_EQ(actions_on(device),
              (std::multiset<std::string>{"drain-device ok", "isolate-device ok"}))
        << device;
  }
}

// A device that fails only when busy: nothing reports it, so nothing acts;
// an operator's drain and undrain runs the self-test, whose load phase
// refuses it (the one-at-a-time checks alone would pass it).
TEST(InjectExactlyTest, AFaultOnlyUnderLoadIsReportedByNothingAndFailsTheUndrainsSelfTest) {
  RasdInstance rasd;
  rasd.WriteConfig(R"(simulator:
  memory_mib: 64
liveness:
  period_ms: 0
)");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  const auto injected = Json(rasd, {"inject", "load", "--device", "2"});
  EXPECT_NE(injected["note"].get<std::string>().find("load phase"), std::string::npos)
      << injected.dump();
  // A fence: the simulator's reports are handled in order, so once a
  // corrected error injected after the load fault is stored, anything the
  // load fault made would be stored already.
  Json(rasd, {"inject", "ce", "--device", "2", "--address", "0x10000"});
  ASSERT_TRUE(WaitUntil(
      [&] {
        return !Json(rasd, {"events", "--device", "2"})["events"].empty();
      },
      10s));
  const auto events = Json(rasd, {"events", "--device", "2"})["events"];
  ASSERT_EQ(events.size(), 1U) << events.dump(1);
  EXPECT_EQ(events[0]["severity"], "CE") << "the fence's own event only";
  EXPECT_TRUE(Json(rasd, {"actions", "--device", "2"})["actions"].empty());
  EXPECT_EQ(StateOf(rasd, 2), "healthy") << "nothing noticed";

  ASSERT_EQ(rasd.Rasctl({"drain", "2", "--reason", "burn-in"}).exit_code, 0);
  const auto undrain = rasd.Rasctl({"undrain", "2"});
  EXPECT_NE(undrain.exit_code, 0) << undrain.out;
  EXPECT_NE((undrain.out + undrain.err).find("load 4 streams"), std::string::npos)
      << undrain.out << undrain.err;
  EXPECT_NE(StateOf(rasd, 2), "healthy");
  const auto device = Json(rasd, {"devices", "2"})["devices"][0];
  EXPECT_EQ(device["self_test"]["passed"], false) << device.dump();
  // The same test passes on a sound device.
  ASSERT_EQ(rasd.Rasctl({"drain", "1"}).exit_code, 0);
  const auto sound = rasd.Rasctl({"undrain", "1"});
  EXPECT_EQ(sound.exit_code, 0) << sound.err;
  EXPECT_NE(sound.out.find("load 4 streams"), std::string::npos) << sound.out;
}

// An SRAR in an LLM job's KV cache does not stop the job: the job
// contains it (kill-consumer aborts nothing), the poisoned page's blocks
// leave its use and the page is retired, the sequences on them are
// recomputed, and no answer is lost or wrong.
TEST(InjectTest, AnSrarInAnLlmJobsKvCacheCostsItsSequencesNotTheJob) {
  RasdInstance rasd;
  rasd.WriteConfig(R"(simulator:
  memory_mib: 64
jobs:
  - name: chat
    kind: llm
    devices: [0, 1]
    load_rps: 100
    tokens_per_block: 4
)");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  auto chat = [&] { return Json(rasd, {"jobs"})["jobs"][0]; };
  ASSERT_TRUE(WaitUntil([&] { return chat()["requests"]["served"] > 20; }, 10s)) << chat().dump();
  EXPECT_EQ(chat()["kind"], "llm");
  EXPECT_GT(chat()["kv_blocks"]["total"], 0);

  const auto injected = Json(rasd, {"inject", "srar", "--device", "0", "--job", "chat"});
  auto kill = WaitForAction(rasd, 0, "kill-consumer");
  EXPECT_NE(kill["detail"].get<std::string>().find("job chat contained it"), std::string::npos)
      << kill.dump() << injected.dump();
  EXPECT_EQ(kill["result"], "ok");
  EXPECT_EQ(WaitForAction(rasd, 0, "retire-page")["result"], "ok");
  const auto served = chat()["requests"]["served"].get<std::int64_t>();
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto job = chat();
        return job["kv_blocks"]["retired"] >= 4 && job["requests"]["served"] > served + 50;
      },
      20s))
      << chat().dump();
  const auto job = chat();
  EXPECT_EQ(job["state"], "serving") << "nothing stopped the job";
  EXPECT_EQ(job["requests"]["lost"], 0);
  EXPECT_EQ(job["load"]["wrong"], 0);
  EXPECT_EQ(job["load"]["errors"], 0);
  ASSERT_EQ(job["replicas"].size(), 2u) << job.dump();
  EXPECT_GE(job["replicas"][0]["kv_blocks"]["retired"], 4) << "the faulty page is on device 0";
  EXPECT_EQ(job["replicas"][1]["kv_blocks"]["retired"], 0);
  const auto table = rasd.Rasctl({"jobs"});
  EXPECT_NE(table.out.find("recomputed after memory faults"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("device 0: KV blocks"), std::string::npos) << table.out;

  // The metrics show the retired blocks on the replica that had them.
  const std::string metrics =
      Http(Json(rasd, {"status"})["metrics"]["port"].get<int>(), "GET", "/metrics");
  const std::string retired = R"(rasd_llm_kv_blocks{job="chat",device="0",state="retired"} )";
  const auto at = metrics.find(retired);
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_GE(std::stoi(metrics.substr(at + retired.size())), 4);
  EXPECT_NE(metrics.find(R"(rasd_llm_kv_blocks{job="chat",device="1",state="retired"} 0)"),
            std::string::npos);
  EXPECT_NE(metrics.find(R"(rasd_llm_sequences{job="chat",device="0",state="running"})"),
            std::string::npos);
}

}  // namespace
}  // namespace rasd::testing
