// The second corpus of real records (tests/data/public-records.jsonl and held-out.jsonl, gathered from public
// bug trackers, mailing lists and vendor pages; each record names its
// source). The development file is checked record by record. The held-out
// file was kept out of the decoders' development: it is checked only as a
// score, so that it keeps measuring how well they generalise, and a test
// fails when the score falls below what was measured when it was last
// raised (the floors below; README "Kernel log decoding" has the history).

#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rasd/ras/kernel_log_scanner.h"

namespace rasd::ras {
namespace {

constexpr const char* kFields[] = {"origin", "severity", "xid", "pci_bdf", "mc", "address"};

struct PublicRecord {
  std::string id;
  std::string family;
  std::string text;
  nlohmann::json expected;
};

void PrintTo(const PublicRecord& record, std::ostream* out) { *out << record.id; }

std::vector<PublicRecord> Load(const std::string& name) {
  std::vector<PublicRecord> records;
  std::ifstream file(std::string(RASD_TEST_DATA_DIR) + "/" + name);
  std::string line;
  while (std::getline(file, line)) {
    auto json = nlohmann::json::parse(line, nullptr, false);
    if (json.is_discarded() || !json.contains("text")) continue;
    records.push_back({json.value("id", "?"), json.value("family", "?"),
                       json["text"].get<std::string>(), json["expected"]});
  }
  return records;
}

// Development records whose label picks a record other than the one
// MainRecord picks (the corpus' rule: worst severity, then an error report
// before a notice, then the first). Origin and severity still have to match;
// the fields named here may differ, for the reason given.
const std::map<std::string, std::vector<std::string>, std::less<>> kLabelledDifferently = {
    // The label merges the controller-registration notice's device with the
    // IBECC block's address; MainRecord keeps to one record.
    {"lkml-poplawski-igen6-ibecc-boot", {"pci_bdf", "mc"}},
    {"lkml-ramses-igen6-polled-flood-locale", {"pci_bdf"}},
    // All notices: the label takes the "Giving out device" line, MainRecord the first notice.
    {"ovirt88-amd64-edac-boot-journal-fqdn", {"pci_bdf", "mc"}},
    // The label's note says the address is ADDR 46a9f888, its expected field says null.
    {"aslab123-mcelog-old-northbridge-ce", {"address"}},
};

// A publisher joined four lines into one; the severity line is inside it.
const std::map<std::string, std::vector<std::string>, std::less<>> kNotDecoded = {
    {"npd846-ghes-corrected-joined-lines", {"severity"}},
};

class PublicCorpusTest : public ::testing::TestWithParam<PublicRecord> {};

TEST(PublicCorpusFileTest, BothFilesAreThere) {
  EXPECT_GE(Load("public-records.jsonl").size(), 60U);
  EXPECT_GE(Load("held-out.jsonl").size(), 35U);
}

TEST_P(PublicCorpusTest, DecodesToTheExpectedFields) {
  const PublicRecord& record = GetParam();
  const auto main = MainRecord(ScanKernelLog(record.text));
  ASSERT_TRUE(main.has_value()) << record.id << ": nothing recognised in:\n" << record.text;
  const nlohmann::json actual = main->ToJson();
  std::vector<std::string> may_differ;
  if (auto it = kLabelledDifferently.find(record.id); it != kLabelledDifferently.end())
    may_differ = it->second;
  if (auto it = kNotDecoded.find(record.id); it != kNotDecoded.end()) may_differ = it->second;
  for (const char* field : kFields) {
    if (std::find(may_differ.begin(), may_differ.end(), field) != may_differ.end()) continue;
    EXPECT_EQ(actual[field], record.expected[field])
        << field << " of " << record.id << " (" << record.family << ")\nmain record: "
        << actual.dump() << "\ntext:\n"
        << record.text;
  }
}

std::string Name(const ::testing::TestParamInfo<PublicRecord>& info) {
  std::string name;
  for (char c : info.param.id) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Development, PublicCorpusTest,
                         ::testing::ValuesIn(Load("public-records.jsonl")), Name);

// The third corpus (families-records.jsonl, families-held-out.jsonl): the
// record families next to the ones above (CXL, ARM, vendor CPER, NVSwitch
// and GSP, mlx5, amdgpu resets, Gaudi, CANN, soft offline, SIGBUS, the x86
// reset reason). A driver's notice may also be left out altogether: "no
// false alarm" is INFO or nothing.
class FamiliesCorpusTest : public ::testing::TestWithParam<PublicRecord> {};

TEST(FamiliesCorpusFileTest, BothFilesAreThere) {
  EXPECT_GE(Load("families-records.jsonl").size(), 120U);
  EXPECT_GE(Load("families-held-out.jsonl").size(), 55U);
}

// Records the decoders still get wrong, with why. Each must still be wrong
// (the test fails once one is fixed, so that it leaves this list): a miss
// is known and counted, never silently passed.
const std::map<std::string, std::string, std::less<>> kKnownMisses = {
    {"amd-mca-eccnotes-zen1-lsu-poison-consumed-ignored",
     "the memory-failure line of the same page wins the tie over the MCE"},
    {"cxl-bowman-v2-dsp-port-uce-cachemem-panic", "the panic line names no device"},
    {"cxl-bowman-v13-rp-uce-walk-ten-traces-panic", "the panic line names no device"},
    {"nvidia_smi_q-dgxrunbook-remap-pending-uncorr1-ecc-unknown",
     "the GPU's header line before the ECC Mode section is not read for its address"},
    {"memory-failure-tonyluck-recovered-then-mce-killing",
     "the kill line names no page, and the PFN of the line before is not carried to it"},
    {"rasmcctl-xueshuai-summary-arm-disk-mf", "ras-mc-ctl --summary's location is not read"},
    {"rasmcctl-zhdoc-summary-dimm-b1-disk-6646", "ras-mc-ctl --summary's location is not read"},
    {"smiq-korean-blog-rtxpro6000-ecc-all-zero",
     "an all-zero ECC section is a notice that takes no address from the GPU's header"},
};

bool DecodesExactly(const PublicRecord& record) {
  const auto main = MainRecord(ScanKernelLog(record.text));
  if (!main) return record.expected["severity"] == "INFO";
  const nlohmann::json actual = main->ToJson();
  for (const char* field : kFields)
    if (actual[field] != record.expected[field]) return false;
  return true;
}

TEST_P(FamiliesCorpusTest, DecodesToTheExpectedFieldsOrLeavesANoticeOut) {
  const PublicRecord& record = GetParam();
  if (auto miss = kKnownMisses.find(record.id); miss != kKnownMisses.end()) {
    EXPECT_FALSE(DecodesExactly(record))
        << record.id << " decodes right now: take it off kKnownMisses (" << miss->second << ")";
    return;
  }
  const auto main = MainRecord(ScanKernelLog(record.text));
  if (!main) {
    EXPECT_EQ(record.expected["severity"], "INFO") << record.id << ": nothing recognised in:\n"
                                                   << record.text;
    return;
  }
  const nlohmann::json actual = main->ToJson();
  for (const char* field : kFields) {
    EXPECT_EQ(actual[field], record.expected[field])
        << field << " of " << record.id << " (" << record.family
        << ")\nmain record: " << actual.dump() << "\ntext:\n"
        << record.text;
  }
}

INSTANTIATE_TEST_SUITE_P(Development, FamiliesCorpusTest,
                         ::testing::ValuesIn(Load("families-records.jsonl")), Name);

// Only the totals are printed: a failure names no record, so that reading
// it does not turn the held-out file into development data.
TEST(HeldOutCorpusTest, ScoreStaysAtLeastItsFloor) {
  const auto records = Load("held-out.jsonl");
  ASSERT_FALSE(records.empty());
  std::size_t found = 0, severity = 0, all = 0;
  for (const auto& record : records) {
    const auto main = MainRecord(ScanKernelLog(record.text));
    if (!main) continue;
    ++found;
    const nlohmann::json actual = main->ToJson();
    if (actual["severity"] == record.expected["severity"]) ++severity;
    bool every = true;
    for (const char* field : kFields) every = every && actual[field] == record.expected[field];
    if (every) ++all;
  }
  const double n = static_cast<double>(records.size());
  // Measured 2026-12-01: found 36/39, severity 33/39, all six fields 31/39
  // (before this work: 20, 18 and 14 of 39).
  EXPECT_GE(static_cast<double>(found) / n, 0.90) << found << "/" << records.size() << " found";
  EXPECT_GE(static_cast<double>(severity) / n, 0.82)
      << severity << "/" << records.size() << " with the right severity";
  EXPECT_GE(static_cast<double>(all) / n, 0.77)
      << all << "/" << records.size() << " with all six fields right";
}

// As HeldOutCorpusTest: totals only, by family, never a record.
TEST(FamiliesHeldOutCorpusTest, ScoreStaysAtLeastItsFloor) {
  const auto records = Load("families-held-out.jsonl");
  ASSERT_FALSE(records.empty());
  std::map<std::string, std::array<std::size_t, 3>> by_family;  // records, severity, all
  std::size_t severity = 0, all = 0;
  for (const auto& record : records) {
    auto& family = by_family[record.family];
    ++family[0];
    const auto main = MainRecord(ScanKernelLog(record.text));
    bool severity_right = false, all_right = false;
    if (!main) {
      severity_right = all_right = record.expected["severity"] == "INFO";
    } else {
      const nlohmann::json actual = main->ToJson();
      severity_right = actual["severity"] == record.expected["severity"];
      all_right = true;
      for (const char* field : kFields)
        all_right = all_right && actual[field] == record.expected[field];
    }
    severity += severity_right ? 1 : 0;
    all += all_right ? 1 : 0;
    family[1] += severity_right ? 1 : 0;
    family[2] += all_right ? 1 : 0;
  }
  std::string figures;
  for (const auto& [name, counts] : by_family)
    figures += name + ": " + std::to_string(counts[1]) + "/" + std::to_string(counts[0]) +
               " severity, " + std::to_string(counts[2]) + " all fields\n";
  std::cout << figures;
  const double n = static_cast<double>(records.size());
  // Measured 2026-12-03 on its first 35 records (Gaudi, CANN, mlx5, amdgpu
  // resets, NVSwitch, GSP, nvidia-smi -q): severity 35/35, all six fields
  // 35/35. Measured 2026-12-04 on the 23 added then (CXL, ARM and
  // non-standard records, AMD MCA, reset reasons, block errors, devlink,
  // soft offline, ras-mc-ctl), the first time they were decoded: severity
  // 14/23, all six fields 14/23; 49/58 and 49/58 in all. Measured
  // 2026-12-04 on the 25 added next (hidden from the start), the first time
  // they were decoded: severity 19/25, all six 17/25 by scripts/corpus-score,
  // which counts a notice left out as a miss; after decoders were written
  // from the sources for the development third's misses, by this test:
  // 79/83 and 77/83 in all. Measured 2026-12-05 on 37 more, gathered from
  // sources none of the files cite and scored before anything was changed:
  // severity 32/37 by this test's rule (a notice left out is right; 30/37
  // by scripts/corpus-score, which counts it a miss), all six 29/37 by
  // scripts/corpus-score; the 6 of them drawn into this file by sha1(id) % 3 scored
  // 6/6 then; with the development 31's misses decoded from their sources,
  // 85/89 and 83/89 in all.
  EXPECT_GE(static_cast<double>(severity) / n, 0.94)
      << severity << "/" << records.size() << " with the right severity\n"
      << figures;
  EXPECT_GE(static_cast<double>(all) / n, 0.92)
      << all << "/" << records.size() << " with all six fields right\n"
      << figures;
}

}  // namespace
}  // namespace rasd::ras
