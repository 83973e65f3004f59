#include "rasd/ras/pstore_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <set>

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


// systemd-pstore's archive as it leaves it (src/pstore/pstore.c): EFI parts
// under <id without its last 5 digits>/<last 3 digits>/ with the dmesg.txt it
// joined them into, an ERST run under its highest id, ramoops files flat.
class PstoreLayoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/rasd-pstore-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& path, const std::string& text) {
    std::filesystem::create_directories((root_ / path).parent_path());
    std::ofstream(root_ / path, std::ios::binary) << text;
  }
  common::HostEnv Host() const {
    return common::HostEnv(root_, std::make_shared<common::SystemClock>());
  }
  std::filesystem::path root_;
};

// A machine check split over two EFI parts: Part2 holds the older lines.
const char* kEfiPart2 =
    "Panic#1 Part2\n"
    "<0>[ 4010.112233] mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 4: "
    "a600000000020408\n";
const char* kEfiPart1 =
    "Panic#1 Part1\n"
    "<0>[ 4010.112240] mce: [Hardware Error]: TSC 0 ADDR fef4c9e0 \n"
    "<0>[ 4010.200000] Kernel panic - not syncing: Fatal machine check\n";
const char* kRamoops =
    "Panic#1 Part1\n"
    "<4>[  100.0] NVRM: Xid (PCI:0000:07:00): 79, pid=1234, name=python3, GPU has fallen off "
    "the bus.\n";

TEST_F(PstoreLayoutTest, EfiPartsInPstoreAreJoinedInTheLogsOrder) {
  Write("sys/fs/pstore/dmesg-efi-171234567801001", kEfiPart1);
  Write("sys/fs/pstore/dmesg-efi-171234567802001", kEfiPart2);
  auto records = FindPstoreRecords(Host());
  ASSERT_TRUE(records.has_value()) << records.error().ToString();
  ASSERT_EQ(records->size(), 1u) << "two parts of one dump";
  EXPECT_EQ((*records)[0].part_keys.size(), 2u);
  EXPECT_EQ((*records)[0].text, std::string(kEfiPart2) + kEfiPart1);
  const auto events = ReadPstoreEvents(Host());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].origin, "mce");
  EXPECT_EQ(events[0].address, Address::Of(0xfef4c9e0)) << "the block spans the two parts";
  EXPECT_TRUE(events[0].historical);
}

TEST_F(PstoreLayoutTest, SystemdArchiveIsReadInItsLayoutAndKeysFollowMovedFiles) {
  // Before systemd-pstore ran.
  Write("sys/fs/pstore/dmesg-efi-171234567801001", kEfiPart1);
  Write("sys/fs/pstore/dmesg-efi-171234567802001", kEfiPart2);
  Write("sys/fs/pstore/dmesg-erst-6830425385472557057",
        "Oops#1 Part1\n<3>[ 20.0] Memory failure: 0x30a6a90: recovery action for dirty LRU page: "
        "Recovered\n");
  Write("sys/fs/pstore/dmesg-ramoops-0", kRamoops);
  Write("sys/fs/pstore/console-ramoops-0", "EDAC MC0: 1 CE on x (page:0x1 offset:0x0)\n");
  auto live = FindPstoreRecords(Host());
  ASSERT_TRUE(live.has_value());
  ASSERT_EQ(live->size(), 3u);
  std::set<std::string> live_keys;
  for (const auto& record : *live)
    for (const auto& key : record.part_keys) live_keys.insert(key);

  // After: every file moved as systemd moves it.
  std::filesystem::remove_all(root_ / "sys/fs/pstore");
  std::filesystem::create_directories(root_ / "sys/fs/pstore");
  const std::string efi_dir = "var/lib/systemd/pstore/1712345678/001/";
  Write(efi_dir + "dmesg-efi-171234567801001", kEfiPart1);
  Write(efi_dir + "dmesg-efi-171234567802001", kEfiPart2);
  Write(efi_dir + "dmesg.txt", std::string(kEfiPart2) + kEfiPart1);
  const std::string erst_dir = "var/lib/systemd/pstore/6830425385472557057/";
  Write(erst_dir + "dmesg-erst-6830425385472557057",
        "Oops#1 Part1\n<3>[ 20.0] Memory failure: 0x30a6a90: recovery action for dirty LRU page: "
        "Recovered\n");
  Write(erst_dir + "dmesg.txt",
        "Oops#1 Part1\n<3>[ 20.0] Memory failure: 0x30a6a90: recovery action for dirty LRU page: "
        "Recovered\n");
  Write("var/lib/systemd/pstore/dmesg-ramoops-0", kRamoops);
  Write("var/lib/systemd/pstore/console-ramoops-0", "EDAC MC0: 1 CE\n");

  auto archived = FindPstoreRecords(Host());
  ASSERT_TRUE(archived.has_value()) << archived.error().ToString();
  ASSERT_EQ(archived->size(), 3u);
  std::set<std::string> archived_keys;
  for (const auto& record : *archived) {
    for (const auto& key : record.part_keys) archived_keys.insert(key);
    EXPECT_FALSE(record.IsNew([&](const std::string& key) { return live_keys.count(key) > 0; }))
        << record.name << ": read before it was moved";
  }
  EXPECT_EQ(archived_keys, live_keys);
  const auto efi = std::find_if(archived->begin(), archived->end(), [](const auto& record) {
    return record.name == "/var/lib/systemd/pstore/1712345678/001/dmesg.txt";
  });
  ASSERT_NE(efi, archived->end());
  EXPECT_TRUE(efi->assembled_key.has_value());

  const auto events = ReadPstoreEvents(Host());
  std::multiset<std::string> origins;
  for (const auto& event : events) origins.insert(event.origin);
  EXPECT_EQ(origins, (std::multiset<std::string>{"mce", "memory_failure", "nvidia_xid"}));

  // A later crash reuses dmesg-ramoops-0: systemd overwrites the archived
  // file, and the new content is a new dump.
  Write("var/lib/systemd/pstore/dmesg-ramoops-0",
        "Panic#1 Part1\n<4>[  7.0] NVRM: Xid (PCI:0000:08:00): 79, pid=1, name=x, GPU has fallen "
        "off the bus.\n");
  auto later = FindPstoreRecords(Host());
  ASSERT_TRUE(later.has_value());
  const auto ramoops = std::find_if(later->begin(), later->end(), [](const auto& record) {
    return record.name == "dmesg-ramoops-0";
  });
  ASSERT_NE(ramoops, later->end());
  EXPECT_TRUE(ramoops->IsNew([&](const std::string& key) { return live_keys.count(key) > 0; }));
}

TEST_F(PstoreLayoutTest, ADmesgTxtWithoutPartsIsADumpOfItsOwn) {
  // Unlink=no and an operator who cleaned up the parts: dmesg.txt alone.
  Write("var/lib/systemd/pstore/6830425385472557057/dmesg.txt", kRamoops);
  auto records = FindPstoreRecords(Host());
  ASSERT_TRUE(records.has_value());
  ASSERT_EQ(records->size(), 1u);
  EXPECT_TRUE(records->front().part_keys.empty());
  EXPECT_TRUE(records->front().IsNew([](const std::string&) { return false; }));
  EXPECT_FALSE(records->front().IsNew([](const std::string&) { return true; }));
}

TEST_F(PstoreLayoutTest, CompressedDumpsAreInflatedOrReportedAsUndecodable) {
  const std::string text = kRamoops;
  std::string compressed(compressBound(static_cast<uLong>(text.size())) + 64, '\0');
  z_stream stream{};
  ASSERT_EQ(deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8,
                         Z_DEFAULT_STRATEGY),
            Z_OK);  // raw deflate, as the kernel's pstore writes it
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(compressed.data());
  stream.avail_out = static_cast<uInt>(compressed.size());
  ASSERT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  compressed.resize(stream.total_out);
  deflateEnd(&stream);
  Write("var/lib/systemd/pstore/dmesg-ramoops-0.enc.z", compressed);
  Write("var/lib/systemd/pstore/dmesg-ramoops-1.enc.z", std::string("\x89LZ4 not deflate\xff", 18));
  auto events = ReadPstoreEvents(Host());
  ASSERT_EQ(events.size(), 2u);
  std::sort(events.begin(), events.end(),
            [](const auto& a, const auto& b) { return a.summary < b.summary; });
  EXPECT_EQ(events[0].origin, "nvidia_xid");
  EXPECT_EQ(events[0].summary.rfind("dmesg-ramoops-0.enc.z: ", 0), 0u) << events[0].summary;
  EXPECT_EQ(events[1].severity, Severity::kInfo);
  EXPECT_NE(events[1].summary.find("not decoded"), std::string::npos) << events[1].summary;
}

TEST_F(PstoreLayoutTest, NeitherPlaceIsNotFound) {
  auto records = FindPstoreRecords(Host());
  ASSERT_FALSE(records.has_value());
  EXPECT_EQ(records.error().code, ErrorCode::kNotFound);
  EXPECT_NE(records.error().message.find("var/lib/systemd/pstore"), std::string::npos);
  std::filesystem::create_directories(root_ / "sys/fs/pstore");
  records = FindPstoreRecords(Host());
  ASSERT_TRUE(records.has_value()) << "an empty pstore is there, with no dump";
  EXPECT_TRUE(records->empty());
}

}  // namespace
}  // namespace rasd::ras
