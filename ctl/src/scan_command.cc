#include "scan_command.h"

#include <fmt/format.h>

#include <istream>
#include <map>
#include <ostream>
#include <string>

#include "rasd/ras/kernel_log_scanner.h"

namespace rasd::ctl {
namespace {

std::string Detail(const ras::ScannedRecord& record) {
  std::string detail;
  auto add = [&detail](const std::string& part) {
    if (!detail.empty()) detail += ' ';
    detail += part;
  };
  if (record.xid) add(fmt::format("xid={}", *record.xid));
  if (record.pci_bdf) add("pci=" + *record.pci_bdf);
  if (record.mc) add(fmt::format("mc={}", *record.mc));
  if (record.address) add("addr=" + *record.address);
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
  // Records are printed as soon as they are complete, so memory stays flat
  // however long the log.
  auto print = [&](const std::vector<ras::ScannedRecord>& records) {
    for (const auto& record : records) {
      ++total;
      summary[{record.origin, record.severity}] += 1;
      if (json) {
        out << record.ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
            << '\n';
        continue;
      }
      if (!header) {
        out << fmt::format("{:<6} {:<15} {:<40} {}\n", "CLASS", "ORIGIN", "DETAIL", "MESSAGE");
        header = true;
      }
      std::string message = record.message;
      if (message.size() > 100) message = message.substr(0, 97) + "...";
      out << fmt::format("{:<6} {:<15} {:<40} {}\n", ras::SeverityName(record.severity),
                         record.origin, Detail(record), message);
    }
  };
  std::string line;
  std::uint64_t lines = 0;
  while (std::getline(in, line)) {
    scanner.AddLine(line);
    if (++lines % 1024 == 0) print(scanner.TakeCompleted());
  }
  print(scanner.Finish());
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
