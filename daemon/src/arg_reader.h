#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/result.h"

namespace rasd::daemon {

// Reads a control command's arguments (a JSON object) with one error style
// for every command: a wrong type or an out-of-range value is
//   "bad argument 'KEY' for COMMAND: must be an integer in 1..10000"
// and a key the command does not take is
//   "unknown argument 'KEY' for COMMAND (takes: a, b, c)".
// Each accessor records the key as known and returns nullopt when the key
// is absent or wrong; Finish() then returns the first problem. Errors are
// kInvalidArgument.
//
// Typical use:
//   ArgReader args("drain", request.args);
//   auto device = args.Int("device", 0, 1 << 20);
//   auto reason = args.String("reason", 512);
//   if (auto ok = args.Finish(); !ok) return Fail(ok.error());
//
// Not thread-safe; lives for one request.
class ArgReader {
 public:
  // `args` must outlive the reader (it is read in place, not copied).
  ArgReader(std::string command, const nlohmann::json& args);
  ArgReader(std::string command, nlohmann::json&& args) = delete;

  std::optional<std::int64_t> Int(std::string_view key, std::int64_t min, std::int64_t max);
  std::optional<std::uint64_t> Unsigned(std::string_view key, std::uint64_t max);
  std::optional<double> Number(std::string_view key, double min, double max);
  std::optional<bool> Bool(std::string_view key);
  std::optional<std::string> String(std::string_view key, std::size_t max_bytes);
  // A list of integers in min..max, at most `max_items` of them.
  std::optional<std::vector<std::int64_t>> IntList(std::string_view key, std::int64_t min,
                                                   std::int64_t max, std::size_t max_items);
  // A list of numbers, at most `max_items`.
  std::optional<std::vector<float>> NumberList(std::string_view key, std::size_t max_items);

  // A required argument that is missing is an error of its own.
  template <typename T>
  std::optional<T> Required(std::optional<T> value, std::string_view key) {
    if (!value && !Has(key) && !problem_) {
      problem_ = Error{ErrorCode::kInvalidArgument, command_ + " needs " + std::string(key)};
    }
    return value;
  }

  bool Has(std::string_view key) const;
  // The raw value of `key` (null when absent), for a type of the caller's
  // own; the key counts as known.
  const nlohmann::json* Raw(std::string_view key) { return Find(key); }
  // The first problem: a bad value, a missing required argument, or an
  // unknown key (checked here, once every accessor has named its key).
  Status Finish();

 private:
  const nlohmann::json* Find(std::string_view key);
  void Bad(std::string_view key, const std::string& must);

  std::string command_;
  const nlohmann::json& args_;
  std::set<std::string, std::less<>> known_;
  std::optional<Error> problem_;
};

}  // namespace rasd::daemon
