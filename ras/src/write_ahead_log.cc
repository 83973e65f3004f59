#include "write_ahead_log.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include "rasd/common/unique_fd.h"

namespace rasd::ras {
namespace {

constexpr std::uint32_t kWalMagicLittleEndian = 0x377f0682;  // checksum words little-endian
constexpr std::uint32_t kWalMagicBigEndian = 0x377f0683;
constexpr std::uint32_t kWalFormatVersion = 3007000;
constexpr std::size_t kWalHeaderBytes = 32;
constexpr std::size_t kWalFrameHeaderBytes = 24;

std::uint32_t BigEndian32(const std::uint8_t* bytes) {
  return std::uint32_t{bytes[0]} << 24 | std::uint32_t{bytes[1]} << 16 |
         std::uint32_t{bytes[2]} << 8 | std::uint32_t{bytes[3]};
}

std::uint32_t LittleEndian32(const std::uint8_t* bytes) {
  return std::uint32_t{bytes[3]} << 24 | std::uint32_t{bytes[2]} << 16 |
         std::uint32_t{bytes[1]} << 8 | std::uint32_t{bytes[0]};
}

}  // namespace

Result<std::uint32_t> CheckWalHeader(std::span<const std::uint8_t, 32> header) {
  const std::uint32_t magic = BigEndian32(header.data());
  if (magic != kWalMagicLittleEndian && magic != kWalMagicBigEndian) {
    return Fail(ErrorCode::kCorruptData,
                fmt::format("not a SQLite write-ahead log (magic 0x{:08x})", magic));
  }
  if (const std::uint32_t version = BigEndian32(header.data() + 4); version != kWalFormatVersion) {
    return Fail(ErrorCode::kCorruptData,
                fmt::format("write-ahead log format {} is not {}", version, kWalFormatVersion));
  }
  const std::uint32_t page_size = BigEndian32(header.data() + 8);
  if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1)) != 0) {
    return Fail(ErrorCode::kCorruptData,
                fmt::format("write-ahead log page size {} is not a power of two from 512 to 65536",
                            page_size));
  }
  // SQLite's checksum over the first 24 bytes, in the word order the magic
  // names (wal.c, walChecksumBytes).
  const bool big_endian = magic == kWalMagicBigEndian;
  std::uint32_t s0 = 0, s1 = 0;
  for (std::size_t i = 0; i < 24; i += 8) {
    const std::uint8_t* words = header.data() + i;
    s0 += (big_endian ? BigEndian32(words) : LittleEndian32(words)) + s1;
    s1 += (big_endian ? BigEndian32(words + 4) : LittleEndian32(words + 4)) + s0;
  }
  if (s0 != BigEndian32(header.data() + 24) || s1 != BigEndian32(header.data() + 28)) {
    return Fail(ErrorCode::kCorruptData, "write-ahead log header checksum does not match");
  }
  return page_size;
}

Result<WalContents> InspectWriteAheadLog(const std::filesystem::path& wal_path) {
  common::UniqueFd fd(::open(wal_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    if (errno == ENOENT) return WalContents::kAbsent;
    return Fail(ErrnoError("open " + wal_path.string(), errno));
  }
  struct stat st {};
  if (::fstat(fd.Get(), &st) != 0) return Fail(ErrnoError("stat " + wal_path.string(), errno));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size == 0) return WalContents::kNoFrames;
  std::array<std::uint8_t, kWalHeaderBytes> header{};
  if (size < kWalHeaderBytes) {
    return Fail(ErrorCode::kCorruptData,
                fmt::format("{} is {} bytes, shorter than a write-ahead log header",
                            wal_path.string(), size));
  }
  const ssize_t got = ::pread(fd.Get(), header.data(), header.size(), 0);
  if (got != static_cast<ssize_t>(header.size())) {
    return Fail(got < 0 ? ErrnoError("read " + wal_path.string(), errno)
                        : Error{ErrorCode::kIoError, "short read of " + wal_path.string()});
  }
  auto page_size = CheckWalHeader(header);
  if (!page_size) {
    return Fail(ErrorCode::kCorruptData,
                fmt::format("{}: {}", wal_path.string(), page_size.error().message));
  }
  return size >= kWalHeaderBytes + kWalFrameHeaderBytes + *page_size ? WalContents::kFrames
                                                                      : WalContents::kNoFrames;
}

}  // namespace rasd::ras
