// The scanner's block-level path (AddText, Vectorscan or its fallback) and
// its parallel, chunked form give exactly the records that AddLine on each
// line gives: on the real-record corpus, split at every line, and on a
// large generated log.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "keyword_matcher.h"
#include "literal_search.h"
#include "rasd/ras/kernel_log_scanner.h"
#include "scanner_words.h"
#include "scanner_words_database.h"

namespace rasd::ras {
namespace {

// The reference: the per-line API the kmsg follower uses.
std::vector<ScannedRecord> ScanLineByLine(std::string_view text) {
  KernelLogScanner scanner;
  while (!text.empty()) {
    const std::size_t newline = text.find('\n');
    scanner.AddLine(text.substr(0, newline));
    if (newline == std::string_view::npos) break;
    text.remove_prefix(newline + 1);
  }
  return scanner.Finish();
}

// Everything a consumer sees of a record (positions differ by design).
void DescribeOne(const ScannedRecord& record, std::string& out) {
  record.AppendJson(out);
  for (const auto& line : record.lines) {
    out += "\n  | ";
    out += line;
  }
  out += '\n';
}

std::string Describe(const std::vector<ScannedRecord>& records) {
  std::string out;
  for (const auto& record : records) DescribeOne(record, out);
  return out;
}

std::string ScanChunked(std::string_view text, const std::vector<std::size_t>& boundaries,
                        unsigned threads, ChunkScanStats* stats = nullptr) {
  std::string out;
  const auto result = ScanKernelLogChunks(text, boundaries, threads, DescribeOne,
                                          [&out](std::string_view output) { out += output; });
  if (stats != nullptr) *stats = result;
  return out;
}

std::vector<std::size_t> LineStarts(std::string_view text) {
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] == '\n') starts.push_back(i + 1);
  }
  return starts;
}

// Every text of both corpora (the shared one and the public development
// records; not the held-out file), with a few unrelated lines between them
// (some with words that continue MCE and AER blocks, and stamps with "507").
std::string CorpusLog() {
  std::string log;
  int n = 0;
  for (const std::string& path : {std::string(RASD_TEST_DATA_DIR) + "/kernel-ras-records.jsonl",
                                  std::string(RASD_TEST_DATA_DIR) + "/public-records.jsonl",
                                  std::string(RASD_TEST_DATA_DIR) + "/families-records.jsonl"}) {
    std::ifstream file(path);
    for (std::string line; std::getline(file, line);) {
      auto json = nlohmann::json::parse(line, nullptr, false);
      if (json.is_discarded() || !json.contains("text")) continue;
      log += json["text"].get<std::string>();
      log += '\n';
      if (++n % 3 == 0) log += "[ 1507.507000] usb 1-1: can't set config #1, error -71\n";
      if (n % 4 == 0) log += "systemd[1]: Started Session 3 of user root.\n\n";
      if (n % 5 == 0) log += "[ 12.000000] TSC synchronization: ok\n";
    }
  }
  return log;
}

std::string GeneratedLog(std::size_t lines) {
  const std::string corpus = CorpusLog();
  std::vector<std::string_view> blocks;  // runs of corpus lines
  for (std::size_t at = 0; at < corpus.size();) {
    std::size_t end = at;
    for (int k = 0; k < 4 && end < corpus.size(); ++k) end = corpus.find('\n', end) + 1;
    blocks.push_back(std::string_view(corpus).substr(at, end - at));
    at = end;
  }
  const char* noise[] = {"usb 1-1: new high-speed USB device number 7 using xhci_hcd",
                         "systemd[1]: Started Session 42 of user root.",
                         "EXT4-fs (sda1): mounted filesystem with ordered data mode",
                         "Agent says hello",
                         "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready"};
  std::mt19937 random(7);
  std::string log;
  for (std::size_t i = 0; i < lines; ++i) {
    if (random() % 10 == 0) {
      log += blocks[random() % blocks.size()];
      continue;
    }
    log += fmt::format("[{}.{:06}] ", i / 1000, random() % 1000000);
    log += noise[random() % 5];
    log.append(random() % 40, 'x');
    log += '\n';
  }
  return log;
}

TEST(ScanTextTest, AddTextGivesWhatAddLineGivesOnTheCorpus) {
  const std::string log = CorpusLog();
  const auto reference = ScanLineByLine(log);
  ASSERT_GT(reference.size(), 130u);
  EXPECT_EQ(Describe(ScanKernelLog(log)), Describe(reference));
  // Lines split between calls at line ends.
  KernelLogScanner scanner;
  const auto starts = LineStarts(log);
  std::size_t from = 0;
  for (std::size_t i = 0; i < starts.size(); i += 7) {
    scanner.AddText(std::string_view(log).substr(from, starts[i] - from));
    from = starts[i];
  }
  scanner.AddText(std::string_view(log).substr(from));
  EXPECT_EQ(Describe(scanner.Finish()), Describe(reference));
  EXPECT_EQ(scanner.LinesRead(), starts.size() + 1);
}

TEST(ScanTextTest, EdgesOfTheText) {
  for (std::string text :
       {"", "\n", "\n\n", "EDAC MC0: 1 CE memory read error on DIMM", "x\r\nEDAC",
        "EDAC MC0: 1 CE on DIMM (page:0x1 offset:0x2)\n\n\nmce: [Hardware Error]: "
        "CPU 0: Machine Check: 0 Bank 5: be00000000800400\nTSC 0 ADDR 1234\n"}) {
    EXPECT_EQ(Describe(ScanKernelLog(text)), Describe(ScanLineByLine(text))) << text;
  }
}

TEST(ScanTextTest, TheSearchFindsWhatTheKeywordMatcherFinds) {
  const std::vector<std::pair<std::string_view, std::uint32_t>> words = {
      {"EDAC", 1}, {"mce", 2}, {"MCE", 4}, {"Hardware Error", 8}, {"507", 16}, {"TSC ", 32}};
  const LiteralSearch search(words);
  const KeywordMatcher matcher(words);
  auto scratch = search.NewScratch();
  std::string text;
  std::mt19937 random(3);
  const char alphabet[] = "EDACmceMCHardw rro507TS\n";
  for (int i = 0; i < 200000; ++i) text += alphabet[random() % (sizeof(alphabet) - 1)];
  text += "Hardware Error EDAC mce507";
  std::vector<LiteralSearch::Hit> found;
  std::vector<KeywordMatcher::Hit> expected;
  search.FindAll(text, *scratch, found);
  matcher.FindAll(text, expected);
  ASSERT_EQ(found.size(), expected.size()) << LiteralSearch::Engine();
  std::vector<std::pair<std::size_t, std::uint32_t>> a, b;
  for (const auto& hit : found) a.emplace_back(hit.end, hit.group);
  for (const auto& hit : expected) b.emplace_back(hit.end, hit.group);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
  for (std::size_t i = 1; i < found.size(); ++i) EXPECT_LE(found[i - 1].end, found[i].end);
}

std::vector<std::pair<std::size_t, std::uint32_t>> Hits(const LiteralSearch& search,
                                                        std::string_view text) {
  auto scratch = search.NewScratch();
  std::vector<LiteralSearch::Hit> found;
  search.FindAll(text, *scratch, found);
  std::vector<std::pair<std::size_t, std::uint32_t>> hits;
  for (const auto& hit : found) hits.emplace_back(hit.end, hit.group);
  return hits;
}

TEST(ScanTextTest, TheWordDatabaseBuiltWithRasdLoadsAndFindsWhatTheWordsCompiledFind) {
  const auto words = scanner_words::AllWordsInOrder();
  const std::string_view built(reinterpret_cast<const char*>(kScannerWordsDatabase),
                               kScannerWordsDatabaseSize);
  const LiteralSearch loaded(words, built);
  const LiteralSearch compiled(words);
  if (LiteralSearch::Engine() == "vectorscan") {
    // Built and run on one machine: the bytes fit, and the start skips
    // the compiler.
    EXPECT_EQ(loaded.origin(), LiteralSearch::Origin::kLoaded);
    EXPECT_EQ(compiled.origin(), LiteralSearch::Origin::kCompiled);
  } else {
    EXPECT_TRUE(built.empty());
    EXPECT_EQ(loaded.origin(), LiteralSearch::Origin::kKeywordMatcher);
  }
  const std::string log = CorpusLog();
  const auto expected = Hits(compiled, log);
  EXPECT_GT(expected.size(), 1000U);
  EXPECT_EQ(Hits(loaded, log), expected);
}

TEST(ScanTextTest, BytesThatDoNotFitTheWordsAreCompiledOverInstead) {
  const auto words = scanner_words::AllWordsInOrder();
  const std::string built(reinterpret_cast<const char*>(kScannerWordsDatabase),
                          kScannerWordsDatabaseSize);
  auto fewer = words;
  fewer.pop_back();
  std::string damaged = built;
  if (damaged.size() > 64) damaged[damaged.size() / 2] ^= 0x5a;
  const std::string text = "EDAC MC0: 1 CE\nmce: [Hardware Error]: Machine Check\nAgent TSC \n";
  const auto expected_all = Hits(LiteralSearch(words), text);
  const auto expected_fewer = Hits(LiteralSearch(fewer), text);
  ASSERT_FALSE(expected_all.empty());
  for (const auto& [label, search, expected] :
       {std::tuple{"other words", std::make_shared<LiteralSearch>(fewer, built), expected_fewer},
        std::tuple{"no bytes", std::make_shared<LiteralSearch>(words, ""), expected_all},
        std::tuple{"cut short", std::make_shared<LiteralSearch>(words, built.substr(0, 40)),
                   expected_all},
        std::tuple{"damaged", std::make_shared<LiteralSearch>(words, damaged), expected_all}}) {
    EXPECT_NE(search->origin(), LiteralSearch::Origin::kLoaded) << label;
    EXPECT_EQ(Hits(*search, text), expected) << label;
  }
}

TEST(ChunkedScanTest, ABoundaryAtEveryLineOfTheCorpusChangesNothing) {
  const std::string log = CorpusLog();
  const std::string reference = Describe(ScanLineByLine(log));
  const auto starts = LineStarts(log);
  for (std::size_t boundary : starts) {
    ASSERT_EQ(ScanChunked(log, {boundary}, 2), reference) << "split at " << boundary;
  }
  // And at all of them at once: every line its own part.
  ChunkScanStats stats;
  EXPECT_EQ(ScanChunked(log, starts, 3, &stats), reference);
  EXPECT_EQ(stats.lines, starts.size() + 1);
  KernelLogScanner serial;
  serial.AddText(log);
  EXPECT_EQ(stats.undecoded, serial.UndecodedLines());
  EXPECT_EQ(ScanChunked(log, starts, 1), reference);
  EXPECT_EQ(stats.records, ScanLineByLine(log).size());
}

TEST(ChunkedScanTest, ALargeLogInParallelEqualsTheSerialScan) {
  const std::string log = GeneratedLog(200'000);
  const auto reference = ScanLineByLine(log);
  ASSERT_GT(reference.size(), 10'000u);
  std::string parallel;
  ChunkedLogScanner scanner(4, DescribeOne,
                            [&parallel](std::string_view output) { parallel += output; });
  // In pieces, as rasctl reads a file, each split into parts of 64 KiB.
  const std::string_view text(log);
  const std::size_t piece = 1 << 20;
  std::size_t from = 0;
  while (from < text.size()) {
    std::size_t end = std::min(text.size(), from + piece);
    if (end < text.size()) end = text.rfind('\n', end - 1) + 1;
    scanner.Add(text.substr(from, end - from), std::size_t{64} << 10);
    from = end;
  }
  const auto stats = scanner.Finish();
  EXPECT_EQ(stats.lines, LineStarts(log).size() + 1);
  EXPECT_EQ(stats.records, reference.size());
  EXPECT_EQ(parallel, Describe(reference));
}

}  // namespace
}  // namespace rasd::ras
