// Driver reports as RAS events: the class of a vendor code comes from the
// daemon's code tables (reloadable data), in the same origins as the
// kernel-log lines of those drivers.

#include "rasd/ras/driver_events.h"

#include <gtest/gtest.h>

namespace rasd::ras {
namespace {

drivers::DriverErrorEvent VendorReport(drivers::VendorCodeSpace space, std::optional<int> code) {
  drivers::DriverErrorEvent event;
  event.device = 2;
  event.kind = drivers::DriverErrorKind::kVendorCode;
  event.code_space = space;
  event.vendor_code = code;
  event.message = "report";
  return event;
}

TEST(DriverEventsTest, VendorCodesAreClassedByTheCodeTables) {
  const auto& codes = CodeTable::Default();
  auto xid = EventFromDriver(VendorReport(drivers::VendorCodeSpace::kNvidiaXid, 79), "nvml", codes);
  EXPECT_EQ(xid.origin, "nvidia_xid");
  EXPECT_EQ(xid.severity, Severity::kFatal);
  EXPECT_EQ(xid.vendor_code, 79);
  EXPECT_EQ(xid.device, 2);
  EXPECT_EQ(xid.source, "driver");

  auto app = EventFromDriver(VendorReport(drivers::VendorCodeSpace::kNvidiaXid, 13), "nvml", codes);
  EXPECT_EQ(app.severity, Severity::kInfo) << "an application fault";

  auto uce =
      EventFromDriver(VendorReport(drivers::VendorCodeSpace::kAscend, 507053), "ascend", codes);
  EXPECT_EQ(uce.origin, "ascend");
  EXPECT_EQ(uce.severity, Severity::kSrar);
  auto heartbeat =
      EventFromDriver(VendorReport(drivers::VendorCodeSpace::kAscend, 507010), "ascend", codes);
  EXPECT_EQ(heartbeat.severity, Severity::kFatal);

  // A code no table knows is recorded, never acted on.
  auto unknown =
      EventFromDriver(VendorReport(drivers::VendorCodeSpace::kAscend, 123456), "ascend", codes);
  EXPECT_EQ(unknown.severity, Severity::kInfo);
  auto no_space =
      EventFromDriver(VendorReport(drivers::VendorCodeSpace::kNone, std::nullopt), "nvml", codes);
  EXPECT_EQ(no_space.severity, Severity::kInfo);
  EXPECT_EQ(no_space.origin, "nvml");

  // A site's table wins: the daemon reloads it on SIGHUP.
  CodeTable site = codes;
  site.nvidia_xid[13] = Severity::kUce;
  EXPECT_EQ(EventFromDriver(VendorReport(drivers::VendorCodeSpace::kNvidiaXid, 13), "nvml", site)
                .severity,
            Severity::kUce);
}

// NVML's recovery-action field, reported as the Xid 154 that prints it: a
// reset or a reboot needed is FATAL, as the kernel line's words make it;
// drain P2P is recorded; the action travels on for the recovery table.
TEST(DriverEventsTest, AnXid154IsClassedByTheRecoveryActionItCarries) {
  const auto& codes = CodeTable::Default();
  for (const auto& [action, severity] : {std::pair{1, Severity::kFatal},
                                         {2, Severity::kFatal},
                                         {3, Severity::kInfo},
                                         {4, Severity::kFatal},
                                         {0, Severity::kInfo}}) {
    auto report = VendorReport(drivers::VendorCodeSpace::kNvidiaXid, 154);
    report.vendor_action = action;
    const auto event = EventFromDriver(report, "nvml", codes);
    EXPECT_EQ(event.severity, severity) << "action " << action;
    EXPECT_EQ(event.vendor_action, action);
  }
  EXPECT_EQ(EventFromDriver(VendorReport(drivers::VendorCodeSpace::kNvidiaXid, 154), "nvml", codes)
                .severity,
            Severity::kInfo)
      << "without an action: recorded";
  CodeTable site = codes;
  site.nvidia_xid[154] = Severity::kUce;
  auto report = VendorReport(drivers::VendorCodeSpace::kNvidiaXid, 154);
  report.vendor_action = 3;
  EXPECT_EQ(EventFromDriver(report, "nvml", site).severity, Severity::kUce) << "a site row wins";
}

TEST(DriverEventsTest, AReportNamingOnlyAPciAddressCarriesItAndItsCount) {
  drivers::DriverErrorEvent event;
  event.device = -1;
  event.pci_bdf = "0000:c2:00.0";
  event.kind = drivers::DriverErrorKind::kCorrectedEcc;
  event.count = 12;
  const auto converted = EventFromDriver(event, "nvml", CodeTable::Default());
  EXPECT_FALSE(converted.device) << "the daemon attributes it by PCI address";
  EXPECT_EQ(converted.pci_bdf, "0000:c2:00.0");
  EXPECT_EQ(converted.count, 12u);
  EXPECT_EQ(converted.severity, Severity::kCe);
}

}  // namespace
}  // namespace rasd::ras
