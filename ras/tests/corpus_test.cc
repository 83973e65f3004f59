// Every record of the real-world corpus (shared/corpus/kernel-ras-records.jsonl)
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

std::string CorpusPath() { return std::string(RASD_CORPUS_DIR) + "/kernel-ras-records.jsonl"; }

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

INSTANTIATE_TEST_SUITE_P(Records, CorpusTest, ::testing::ValuesIn(LoadCorpus()), Print);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CorpusTest);

}  // namespace
}  // namespace rasd::ras
