#include "rasd/ras/pstore_source.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>

#include "rasd/ras/kernel_log_scanner.h"

namespace rasd::ras {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxFileBytes = 4 << 20;
constexpr std::size_t kMaxInflatedBytes = 16 << 20;

bool HasPrefix(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}
bool HasSuffix(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// A file of a crash dump, as read.
struct PartFile {
  std::string name;
  std::string content;
};

// Inflates what the kernel's pstore compression wrote (zlib's deflate, with
// or without its header); nullopt for anything else.
std::optional<std::string> Inflate(std::string_view compressed) {
  for (const int window_bits : {-MAX_WBITS, MAX_WBITS + 32}) {  // raw, then zlib or gzip
    z_stream stream{};
    if (inflateInit2(&stream, window_bits) != Z_OK) return std::nullopt;
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
    stream.avail_in = static_cast<uInt>(compressed.size());
    std::string out;
    char buffer[16384];
    int rc = Z_OK;
    while (rc == Z_OK && out.size() < kMaxInflatedBytes) {
      stream.next_out = reinterpret_cast<Bytef*>(buffer);
      stream.avail_out = sizeof buffer;
      rc = inflate(&stream, Z_NO_FLUSH);
      out.append(buffer, sizeof buffer - stream.avail_out);
      if (rc == Z_BUF_ERROR && stream.avail_in == 0) break;  // ended early: keep what came out
    }
    inflateEnd(&stream);
    if ((rc == Z_STREAM_END || rc == Z_BUF_ERROR || rc == Z_OK) && !out.empty()) return out;
  }
  return std::nullopt;
}

PstoreRecord RecordOf(std::string name, const std::vector<PartFile>& parts_in_log_order,
                      const std::optional<PartFile>& assembled) {
  PstoreRecord record;
  record.name = std::move(name);
  for (const auto& part : parts_in_log_order) record.part_keys.push_back(ContentKey(part.name, part.content));
  if (assembled) {
    record.assembled_key = ContentKey(assembled->name, assembled->content);
    record.text = assembled->content;
    return record;
  }
  for (const auto& part : parts_in_log_order) {
    if (!HasSuffix(part.name, ".enc.z")) {
      record.text += part.content;
      continue;
    }
    if (auto inflated = Inflate(part.content)) {
      record.text += *inflated;
    } else {
      record.undecodable = true;
    }
  }
  return record;
}

// The dmesg dumps among the kernel's pstore files, grouped as
// systemd-pstore groups them (its process_dmesg_files()).
std::vector<PstoreRecord> GroupKernelFiles(std::vector<PartFile> files) {
  std::sort(files.begin(), files.end(),
            [](const PartFile& a, const PartFile& b) { return a.name < b.name; });
  // Group name -> parts in the order systemd appends them (reverse name order).
  std::vector<std::pair<std::string, std::vector<PartFile>>> groups;
  auto add = [&](const std::string& group, PartFile file) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& entry) { return entry.first == group; });
    if (it == groups.end()) {
      groups.emplace_back(group, std::vector<PartFile>{});
      it = std::prev(groups.end());
    }
    it->second.push_back(std::move(file));
  };
  std::optional<unsigned long long> last_erst_id;
  std::string erst_group;
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    const std::string_view name = it->name;
    if (!HasPrefix(name, "dmesg-")) continue;
    if (HasSuffix(name, ".enc.z")) {
      add(std::string(name), std::move(*it));
      continue;
    }
    if (HasPrefix(name, "dmesg-efi-") && name.size() - 10 >= 6) {
      const std::string_view id = name.substr(10);
      add(fmt::format("efi {}/{}", id.substr(0, id.size() - 5), id.substr(id.size() - 3)),
          std::move(*it));
      continue;
    }
    if (HasPrefix(name, "dmesg-erst-")) {
      const std::string_view digits = name.substr(11);
      unsigned long long id = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
      if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty()) {
        if (!last_erst_id || *last_erst_id - 1 != id) erst_group = "erst " + std::string(digits);
        last_erst_id = id;
        add(erst_group, std::move(*it));
        continue;
      }
    }
    add(std::string(name), std::move(*it));  // ramoops and the rest: a file is a dump
  }
  std::vector<PstoreRecord> records;
  for (auto& [group, parts] : groups) {
    // Named after the part holding the newest lines, as before systemd.
    const std::string name = parts.back().name;
    records.push_back(RecordOf(name, parts, std::nullopt));
  }
  return records;
}

enum class DirState { kAbsent, kNoPermission, kRead };

DirState ListFiles(const fs::path& dir, std::vector<fs::path>& files,
                   std::vector<fs::path>* subdirs) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    return ec == std::errc::permission_denied ? DirState::kNoPermission : DirState::kAbsent;
  }
  for (fs::directory_iterator end; it != end; it.increment(ec)) {
    if (ec) break;
    std::error_code type_ec;
    if (it->is_directory(type_ec)) {
      if (subdirs != nullptr) subdirs->push_back(it->path());
    } else if (it->is_regular_file(type_ec)) {
      files.push_back(it->path());
    }
  }
  return DirState::kRead;
}

std::optional<PartFile> Read(const common::HostEnv& host, const fs::path& path) {
  // `path` is already under the root: read it relative to it.
  const auto relative = "/" + path.lexically_relative(host.Root()).string();
  auto content = host.ReadFile(relative, kMaxFileBytes);
  if (!content) return std::nullopt;
  return PartFile{path.filename().string(), std::move(*content)};
}

// systemd-pstore's archive: files it could not group lie at the top; each
// dump it grouped is a directory (one or two levels down) holding its part
// files and the dmesg.txt it assembled from them.
void ReadArchiveDir(const common::HostEnv& host, const fs::path& dir, int depth,
                    std::vector<PstoreRecord>& records) {
  std::vector<fs::path> files, subdirs;
  if (ListFiles(dir, files, &subdirs) != DirState::kRead) return;
  std::sort(files.begin(), files.end());
  std::sort(subdirs.begin(), subdirs.end());
  std::vector<PartFile> parts;
  std::optional<PartFile> assembled;
  for (const auto& path : files) {
    const std::string name = path.filename().string();
    if (depth > 0 && name == "dmesg.txt") {
      assembled = Read(host, path);
    } else if (HasPrefix(name, "dmesg-")) {
      if (auto part = Read(host, path)) parts.push_back(std::move(*part));
    }
  }
  if (depth == 0) {
    for (auto& record : GroupKernelFiles(std::move(parts))) records.push_back(std::move(record));
  } else if (!parts.empty() || assembled) {
    std::sort(parts.begin(), parts.end(),
              [](const PartFile& a, const PartFile& b) { return a.name > b.name; });
    const std::string relative = dir.lexically_relative(host.Root()).string();
    records.push_back(RecordOf("/" + relative + "/dmesg.txt", parts, assembled));
  }
  if (depth < 2) {
    for (const auto& subdir : subdirs) ReadArchiveDir(host, subdir, depth + 1, records);
  }
}

}  // namespace

std::string ContentKey(std::string_view name, std::string_view content) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : content) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return fmt::format("{}:{}:{:016x}", name, content.size(), hash);
}

std::vector<std::string> PstoreRecord::AllKeys() const {
  std::vector<std::string> keys = part_keys;
  if (assembled_key) keys.push_back(*assembled_key);
  return keys;
}

Result<std::vector<PstoreRecord>> FindPstoreRecords(const common::HostEnv& host) {
  std::vector<PstoreRecord> records;
  std::vector<fs::path> files;
  const DirState live = ListFiles(host.Resolve(kPstoreDir), files, nullptr);
  std::vector<PartFile> parts;
  for (const auto& path : files) {
    if (!HasPrefix(path.filename().string(), "dmesg-")) continue;
    if (auto part = Read(host, path)) parts.push_back(std::move(*part));
  }
  records = GroupKernelFiles(std::move(parts));
  std::vector<fs::path> unused;
  const DirState archive = ListFiles(host.Resolve(kPstoreArchiveDir), unused, nullptr);
  if (archive == DirState::kRead) ReadArchiveDir(host, host.Resolve(kPstoreArchiveDir), 0, records);
  if (live == DirState::kRead || archive == DirState::kRead) return records;
  if (live == DirState::kNoPermission || archive == DirState::kNoPermission) {
    return Fail(ErrorCode::kPermissionDenied,
                fmt::format("cannot read {} or {}: permission denied",
                            host.Resolve(kPstoreDir).string(),
                            host.Resolve(kPstoreArchiveDir).string()));
  }
  return Fail(ErrorCode::kNotFound,
              fmt::format("neither {} nor {} exists", host.Resolve(kPstoreDir).string(),
                          host.Resolve(kPstoreArchiveDir).string()));
}

std::vector<RasEvent> DecodePstoreRecord(const PstoreRecord& record, const CodeTable& codes,
                                         std::chrono::system_clock::time_point now) {
  std::vector<RasEvent> events;
  if (record.undecodable) {
    RasEvent event;
    event.time = now;
    event.source = "pstore";
    event.origin = "pstore";
    event.historical = true;
    event.summary = record.name +
                    ": a crash dump the kernel kept compressed with an algorithm other than "
                    "deflate; not decoded";
    events.push_back(std::move(event));
  }
  for (const auto& scanned : ScanKernelLog(record.text, codes)) {
    RasEvent event = EventFromRecord(scanned, "pstore", now);
    event.historical = true;
    event.summary = record.name + ": " + event.summary;
    events.push_back(std::move(event));
  }
  return events;
}

std::vector<RasEvent> ReadPstoreEvents(const common::HostEnv& host, const CodeTable& codes) {
  std::vector<RasEvent> events;
  auto records = FindPstoreRecords(host);
  if (!records) return events;
  const auto now = host.GetClock().Wall();
  for (const auto& record : *records) {
    auto decoded = DecodePstoreRecord(record, codes, now);
    events.insert(events.end(), std::make_move_iterator(decoded.begin()),
                  std::make_move_iterator(decoded.end()));
  }
  return events;
}

}  // namespace rasd::ras
