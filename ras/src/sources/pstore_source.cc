#include "rasd/ras/pstore_source.h"

#include <algorithm>
#include <filesystem>

#include "rasd/ras/kernel_log_scanner.h"

namespace rasd::ras {

std::vector<RasEvent> ReadPstoreEvents(const common::HostEnv& host, const CodeTable& codes) {
  std::vector<std::string> entries;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(host.Resolve("/sys/fs/pstore"), ec), end;
       !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("dmesg-", 0) == 0) entries.push_back(name);
  }
  std::sort(entries.begin(), entries.end());
  std::vector<RasEvent> events;
  const auto now = std::chrono::system_clock::now();
  for (const auto& name : entries) {
    auto text = host.ReadFile("/sys/fs/pstore/" + name, 4 << 20);
    if (!text) continue;
    for (const auto& record : ScanKernelLog(*text, codes)) {
      RasEvent event = EventFromRecord(record, "pstore", now);
      event.historical = true;
      event.summary = name + ": " + event.summary;
      events.push_back(std::move(event));
    }
  }
  return events;
}

}  // namespace rasd::ras
