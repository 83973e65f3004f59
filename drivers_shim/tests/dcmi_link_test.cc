// The Ascend chips' RoCE port state through DCMI: the pure diff, and the
// monitor over the stand-in libdcmi (testing/fake_dcmi.cc), which a test
// drives through its controls.

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <vector>

#include "dcmi_monitor.h"
#include "rasd/common/dynamic_library.h"
#include "testing/fake_control.h"

namespace rasd::drivers::ascend {
namespace {

using namespace std::chrono_literals;

TEST(DcmiLinkTest, TheFirstAnswerAndEveryChangeAreReportedAndDetectionInProgressIsNot) {
  std::optional<bool> last;
  EXPECT_FALSE(DiffNetworkHealth(0, last, DCMI_RDFX_DETECT_INIT)) << "starting: nothing known";
  EXPECT_FALSE(last.has_value());
  auto event = DiffNetworkHealth(2, last, DCMI_RDFX_DETECT_OK);
  ASSERT_TRUE(event) << "the first answer tells the daemon the link exists";
  EXPECT_EQ(event->kind, DriverErrorKind::kLinkUp);
  EXPECT_EQ(event->device, 2);
  ASSERT_TRUE(event->link);
  EXPECT_EQ(event->link->kind, LinkKind::kRoce);
  EXPECT_FALSE(DiffNetworkHealth(2, last, DCMI_RDFX_DETECT_OK)) << "unchanged";
  event = DiffNetworkHealth(2, last, DCMI_RDFX_DETECT_UNREACH);
  ASSERT_TRUE(event);
  EXPECT_EQ(event->kind, DriverErrorKind::kLinkDown);
  EXPECT_NE(event->message.find("3"), std::string::npos) << event->message;
  EXPECT_FALSE(DiffNetworkHealth(2, last, DCMI_RDFX_DETECT_RECV_TIMEOUT)) << "still down";
  EXPECT_FALSE(DiffNetworkHealth(2, last, DCMI_RDFX_DETECT_IP_SET)) << "no evidence either way";
  EXPECT_EQ(last, false);
  event = DiffNetworkHealth(2, last, DCMI_RDFX_DETECT_OK);
  ASSERT_TRUE(event);
  EXPECT_EQ(event->kind, DriverErrorKind::kLinkUp);
}

// The monitor polls the RoCE state with health and error codes; a chip whose
// query fails (no detection address) reports nothing.
TEST(DcmiLinkTest, TheMonitorReportsEachChipsRoceLinkByItsAclDevice) {
  auto library = common::DynamicLibrary::Open(RASD_FAKE_DCMI_PATH);
  ASSERT_TRUE(library) << library.error().message;
  decltype(&::fake_dcmi_reset) reset = nullptr;
  decltype(&::fake_dcmi_set_network_health) set_network = nullptr;
  ASSERT_TRUE(library->Bind(reset, "fake_dcmi_reset"));
  ASSERT_TRUE(library->Bind(set_network, "fake_dcmi_set_network_health"));
  reset();
  set_network(1, DCMI_RDFX_DETECT_OK);  // logic id 1 = ACL device 1; device 0's query fails
  auto monitor = DcmiMonitor::Create(RASD_FAKE_DCMI_PATH, {0, 1});
  ASSERT_TRUE(monitor) << monitor.error().message;
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<DriverErrorEvent> events;
  (*monitor)->Start(5ms, [&](DriverErrorEvent event) {
    std::lock_guard lock(mutex);
    events.push_back(std::move(event));
    arrived.notify_all();
  });
  auto wait_for = [&](std::size_t n) {
    std::unique_lock lock(mutex);
    return arrived.wait_for(lock, 5s, [&] { return events.size() >= n; });
  };
  ASSERT_TRUE(wait_for(1));
  set_network(1, DCMI_RDFX_DETECT_UNREACH);
  ASSERT_TRUE(wait_for(2));
  (*monitor)->Stop();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, DriverErrorKind::kLinkUp);
  EXPECT_EQ(events[0].device, 1);
  EXPECT_EQ(events[1].kind, DriverErrorKind::kLinkDown);
  EXPECT_EQ(events[1].device, 1);
  EXPECT_NE(events[1].message.find("card 2 chip 0"), std::string::npos) << events[1].message;
  reset();
}

}  // namespace
}  // namespace rasd::drivers::ascend
