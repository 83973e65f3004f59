#pragma once

#include <cstdint>
#include <filesystem>
#include <span>

#include "rasd/common/result.h"

namespace rasd::ras {

// What a SQLite write-ahead log file holds, as far as its size and header
// tell (https://www.sqlite.org/fileformat2.html#walformat), read before
// SQLite opens the database: SQLite itself takes a log with a bad header for
// an empty one and starts without the commits it held.
enum class WalContents {
  kAbsent,    // no file
  kNoFrames,  // 0 bytes, or a valid header and less than one whole frame
  kFrames,    // a valid header and at least one whole frame
};

// Checks a log's 32-byte header: magic 0x377f0682 or 0x377f0683, format
// 3007000, a page size that is a power of two from 512 to 65536, and the
// header checksum. The page size, or kCorruptData naming what is wrong.
Result<std::uint32_t> CheckWalHeader(std::span<const std::uint8_t, 32> header);

// Reads `wal_path`'s size and header. A file of 1 to 31 bytes, or one whose
// header CheckWalHeader refuses, is kCorruptData; a file that cannot be read
// is kIoError.
Result<WalContents> InspectWriteAheadLog(const std::filesystem::path& wal_path);

}  // namespace rasd::ras
