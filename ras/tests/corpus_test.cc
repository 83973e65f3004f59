// Every record of the real-world corpus (tests/data/kernel-ras-records.jsonl)
// decodes to its expected origin, severity, xid, pci_bdf, mc and address.
// A regression in any decoder fails the record it breaks, by id.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rasd/ras/kernel_log_scanner.h"

namespace rasd::ras {
namespace {

struct CorpusRecord {
  std::string id;
  std::string text;
  nlohmann::json expected;
};

// Failure messages name the record, not its bytes.
void PrintTo(const CorpusRecord& record, std::ostream* out) { *out << record.id; }

std::string CorpusPath() { return std::string(RASD_TEST_DATA_DIR) + "/kernel-ras-records.jsonl"; }

std::vector<CorpusRecord> LoadCorpus() {
  std::vector<CorpusRecord> records;
  std::ifstream file(CorpusPath());
  std::string line;
  while (std::getline(file, line)) {
    auto json = nlohmann::json::parse(line, nullptr, false);
    if (json.is_discarded() || !json.contains("text")) continue;
    records.push_back({json.value("id", "?"), json["text"].get<std::string>(), json["expected"]});
  }
  return records;
}

std::string Print(const ::testing::TestParamInfo<CorpusRecord>& info) {
  std::string name;
  for (char c : info.param.id) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

class CorpusTest : public ::testing::TestWithParam<CorpusRecord> {};

TEST(CorpusFileTest, TheCorpusIsThere) {
  const auto records = LoadCorpus();
  ASSERT_GE(records.size(), 70u) << "expected the real-record corpus at " << CorpusPath()
                                 << " (shared/ beside the checkout)";
}

TEST_P(CorpusTest, DecodesToTheExpectedFields) {
  const CorpusRecord& record = GetParam();
  const auto scanned = ScanKernelLog(record.text);
  const auto main = MainRecord(scanned);
  ASSERT_TRUE(main.has_value()) << "nothing recognised in:\n" << record.text;
  const nlohmann::json actual = main->ToJson();
  for (const char* field : {"origin", "severity", "xid", "pci_bdf", "mc", "address"}) {
    EXPECT_EQ(actual[field], record.expected[field])
        << field << " of " << record.id << "\nmain record: " << actual.dump() << "\ntext:\n"
        << record.text;
  }
}

std::string Dumped(const ScannedRecord& record) {
  return record.ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string Appended(const ScannedRecord& record) {
  std::string out;
  record.AppendJson(out);
  return out;
}

TEST_P(CorpusTest, TheFastJsonWriterGivesNlohmannsBytes) {
  for (const auto& scanned : ScanKernelLog(GetParam().text)) {
    EXPECT_EQ(Appended(scanned), Dumped(scanned));
  }
}

// The plain-text test looks at eight bytes at a time: an escaped or
// non-ASCII byte is found at every offset of the lanes and at the tail.
TEST(ScannedRecordJsonTest, ASpecialByteIsEscapedWhereverItFalls) {
  ScannedRecord record;
  record.origin = "mce";
  for (const char special : {'"', '\\', '\n', '\x01', '\x1f', '\x7f', '\x80', ' '}) {
    for (std::size_t length = 1; length <= 27; ++length) {
      for (std::size_t at = 0; at < length; ++at) {
        record.message.assign(length, 'a');
        record.message[at] = special;
        EXPECT_EQ(Appended(record), Dumped(record)) << "byte " << int(special) << " at " << at;
      }
    }
  }
}

TEST(ScannedRecordJsonTest, EscapesAndReplacesAsNlohmannDoes) {
  ScannedRecord record;
  record.origin = "edac";
  record.severity = Severity::kSrar;
  record.notice = true;
  record.historical = true;
  record.xid = 79;
  record.mc = 2;
  record.pci_bdf = "0000:3b:00.0";
  record.address = Address::Of(0xdead000);
  record.count = 12345678901ULL;
  for (const std::string& message :
       {std::string("plain"), std::string("quote \" back \\ slash / tab\tnl\ncr\r\b\f"),
        std::string("ctl \x01\x1f del \x7f"), std::string("utf-8 \xc3\xa9 ok"),
        std::string("broken \xc3 \xff\xfe utf-8"), std::string("nul \0 inside", 13),
        std::string()}) {
    record.message = message;
    EXPECT_EQ(Appended(record), Dumped(record)) << message;
  }
  record = ScannedRecord{};
  EXPECT_EQ(Appended(record), Dumped(record));
}

INSTANTIATE_TEST_SUITE_P(Records, CorpusTest, ::testing::ValuesIn(LoadCorpus()), Print);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CorpusTest);

}  // namespace
}  // namespace rasd::ras
