#include "rasd/ras/pstore_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace rasd::ras {
namespace {

TEST(PstoreSourceTest, RasRecordsOfACrashedBootAreHistoricalEvents) {
  char pattern[] = "/tmp/rasd-pstore-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::filesystem::path root = pattern;
  std::filesystem::create_directories(root / "sys/fs/pstore");
  // A dmesg dump as the ERST back end keeps it: a header, then printk lines.
  std::ofstream(root / "sys/fs/pstore/dmesg-erst-6830425385472557057")
      << "Panic#1 Part1\n"
         "<6>[ 4000.000001] usb 1-1: new device\n"
         "<0>[ 4010.112233] mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 4: "
         "a600000000020408\n"
         "<0>[ 4010.112240] mce: [Hardware Error]: TSC 0 ADDR fef4c9e0 \n"
         "<0>[ 4010.200000] Kernel panic - not syncing: Fatal machine check\n";
  std::ofstream(root / "sys/fs/pstore/console-ramoops-0")
      << "EDAC MC0: 1 CE on x (page:0x1 offset:0x0)\n";
  common::HostEnv host(root, std::make_shared<common::SystemClock>());
  const auto events = ReadPstoreEvents(host);
  ASSERT_EQ(events.size(), 1u) << "only dmesg entries are kernel logs of a crash";
  EXPECT_EQ(events[0].origin, "mce");
  EXPECT_EQ(events[0].severity, Severity::kFatal);
  EXPECT_TRUE(events[0].historical);
  EXPECT_EQ(events[0].source, "pstore");
  EXPECT_EQ(events[0].address, Address::Of(0xfef4c9e0));
  EXPECT_EQ(events[0].summary.rfind("dmesg-erst-6830425385472557057: ", 0), 0u)
      << events[0].summary;
  std::filesystem::remove_all(root);

  common::HostEnv empty("/nonexistent", std::make_shared<common::SystemClock>());
  EXPECT_TRUE(ReadPstoreEvents(empty).empty());
}

}  // namespace
}  // namespace rasd::ras
