#include "scan_command.h"

#include <fmt/format.h>

#include <istream>
#include <map>
#include <ostream>
#include <string>

#include "rasd/ras/kernel_log_scanner.h"

namespace rasd::ctl {
namespace {

constexpr std::size_t kReadChunk = 1 << 20;
constexpr std::size_t kOutputChunk = 1 << 16;

std::string Detail(const ras::ScannedRecord& record) {
  std::string detail;
  auto add = [&detail](const std::string& part) {
    if (!detail.empty()) detail += ' ';
    detail += part;
  };
  if (record.xid) add(fmt::format("xid={}", *record.xid));
  if (record.pci_bdf) add("pci=" + *record.pci_bdf);
  if (record.mc) add(fmt::format("mc={}", *record.mc));
  if (record.address) add("addr=" + record.address->printed);
  if (record.count > 1) add(fmt::format("count={}", record.count));
  if (record.historical) add("previous-boot");
  return detail.empty() ? "-" : detail;
}

}  // namespace

int RunScan(std::istream& in, bool json, std::ostream& out) {
  ras::KernelLogScanner scanner;
  std::map<std::pair<std::string, ras::Severity>, std::uint64_t> summary;
  std::uint64_t total = 0;
  bool header = false;
  std::string pending_output;
  auto flush_output = [&] {
    out.write(pending_output.data(), static_cast<std::streamsize>(pending_output.size()));
    pending_output.clear();
  };
  // Records are printed as soon as they are complete, so memory stays flat
  // however long the log.
  auto print = [&](const std::vector<ras::ScannedRecord>& records) {
    for (const auto& record : records) {
      ++total;
      summary[{record.origin, record.severity}] += 1;
      if (json) {
        record.AppendJson(pending_output);
        pending_output += '\n';
        continue;
      }
      if (!header) {
        pending_output +=
            fmt::format("{:<6} {:<15} {:<40} {}\n", "CLASS", "ORIGIN", "DETAIL", "MESSAGE");
        header = true;
      }
      std::string message = record.message;
      if (message.size() > 100) message = message.substr(0, 97) + "...";
      pending_output += fmt::format("{:<6} {:<15} {:<40} {}\n", ras::SeverityName(record.severity),
                                    record.origin, Detail(record), message);
    }
    if (pending_output.size() >= kOutputChunk) flush_output();
  };
  // Read in large blocks and split the lines in place: a log of millions of
  // lines is scanned at close to the speed of grep.
  std::vector<char> block(kReadChunk);
  std::string carry;  // a line cut by the block's end
  std::uint64_t lines = 0;
  auto add_line = [&](std::string_view line) {
    scanner.AddLine(line);
    if (++lines % 4096 == 0) print(scanner.TakeCompleted());
  };
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    const auto got = static_cast<std::size_t>(in.gcount());
    if (got == 0) break;
    std::string_view data(block.data(), got);
    while (true) {
      const std::size_t newline = data.find('\n');
      if (newline == std::string_view::npos) {
        carry.append(data);
        break;
      }
      if (carry.empty()) {
        add_line(data.substr(0, newline));
      } else {
        carry.append(data.substr(0, newline));
        add_line(carry);
        carry.clear();
      }
      data.remove_prefix(newline + 1);
    }
  }
  if (!carry.empty()) add_line(carry);
  print(scanner.Finish());
  flush_output();
  if (json) return 0;
  out << fmt::format("\n{} record(s)", total);
  if (scanner.UndecodedLines() > 0) {
    out << fmt::format(", {} line(s) looked like RAS records but did not decode",
                       scanner.UndecodedLines());
  }
  out << '\n';
  for (const auto& [key, count] : summary) {
    out << fmt::format("  {:<15} {:<6} {}\n", key.first, ras::SeverityName(key.second), count);
  }
  return 0;
}

}  // namespace rasd::ctl
