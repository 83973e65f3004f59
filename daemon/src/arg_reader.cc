#include "arg_reader.h"

#include <fmt/format.h>

namespace rasd::daemon {

ArgReader::ArgReader(std::string command, const nlohmann::json& args)
    : command_(std::move(command)), args_(args) {
  if (!args_.is_object() && !args_.is_null()) {
    problem_ = Error{ErrorCode::kInvalidArgument, command_ + ": arguments must be an object"};
  }
}

bool ArgReader::Has(std::string_view key) const { return args_.is_object() && args_.contains(key); }

const nlohmann::json* ArgReader::Find(std::string_view key) {
  known_.emplace(key);
  if (!args_.is_object()) return nullptr;
  auto found = args_.find(key);
  return found == args_.end() ? nullptr : &*found;
}

void ArgReader::Bad(std::string_view key, const std::string& must) {
  if (problem_) return;
  problem_ = Error{ErrorCode::kInvalidArgument,
                   fmt::format("bad argument '{}' for {}: must be {}", key, command_, must)};
}

std::optional<std::int64_t> ArgReader::Int(std::string_view key, std::int64_t min,
                                           std::int64_t max) {
  const nlohmann::json* value = Find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_number_integer()) {
    // Unsigned values above INT64_MAX read as negative: check both ways.
    if (value->is_number_unsigned() &&
        value->get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
      Bad(key, fmt::format("an integer in {}..{}", min, max));
      return std::nullopt;
    }
    const auto number = value->get<std::int64_t>();
    if (number >= min && number <= max) return number;
  }
  Bad(key, fmt::format("an integer in {}..{}", min, max));
  return std::nullopt;
}

std::optional<std::uint64_t> ArgReader::Unsigned(std::string_view key, std::uint64_t max) {
  const nlohmann::json* value = Find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_number_unsigned() && value->get<std::uint64_t>() <= max)
    return value->get<std::uint64_t>();
  Bad(key, fmt::format("an integer in 0..{}", max));
  return std::nullopt;
}

std::optional<double> ArgReader::Number(std::string_view key, double min, double max) {
  const nlohmann::json* value = Find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_number()) {
    const double number = value->get<double>();
    if (number >= min && number <= max) return number;
  }
  Bad(key, fmt::format("a number in {}..{}", min, max));
  return std::nullopt;
}

std::optional<bool> ArgReader::Bool(std::string_view key) {
  const nlohmann::json* value = Find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_boolean()) return value->get<bool>();
  Bad(key, "true or false");
  return std::nullopt;
}

std::optional<std::string> ArgReader::String(std::string_view key, std::size_t max_bytes) {
  const nlohmann::json* value = Find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_string() && value->get_ref<const std::string&>().size() <= max_bytes)
    return value->get<std::string>();
  Bad(key, fmt::format("a string of at most {} bytes", max_bytes));
  return std::nullopt;
}

std::optional<std::vector<std::int64_t>> ArgReader::IntList(std::string_view key, std::int64_t min,
                                                            std::int64_t max,
                                                            std::size_t max_items) {
  const nlohmann::json* value = Find(key);
  if (value == nullptr) return std::nullopt;
  const std::string must =
      fmt::format("a list of at most {} integers in {}..{}", max_items, min, max);
  if (!value->is_array() || value->size() > max_items) {
    Bad(key, must);
    return std::nullopt;
  }
  std::vector<std::int64_t> list;
  for (const auto& item : *value) {
    if (!item.is_number_integer() || item.get<std::int64_t>() < min ||
        item.get<std::int64_t>() > max) {
      Bad(key, must);
      return std::nullopt;
    }
    list.push_back(item.get<std::int64_t>());
  }
  return list;
}

std::optional<std::vector<float>> ArgReader::NumberList(std::string_view key,
                                                        std::size_t max_items) {
  const nlohmann::json* value = Find(key);
  if (value == nullptr) return std::nullopt;
  const std::string must = fmt::format("a list of at most {} numbers", max_items);
  if (!value->is_array() || value->size() > max_items) {
    Bad(key, must);
    return std::nullopt;
  }
  std::vector<float> list;
  list.reserve(value->size());
  for (const auto& item : *value) {
    if (!item.is_number()) {
      Bad(key, must);
      return std::nullopt;
    }
    list.push_back(item.get<float>());
  }
  return list;
}

Status ArgReader::Finish() {
  if (problem_) return Fail(*problem_);
  if (!args_.is_object()) return {};
  for (const auto& [key, value] : args_.items()) {
    if (known_.contains(key)) continue;
    std::string takes;
    for (const auto& name : known_) takes += (takes.empty() ? "" : ", ") + name;
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("unknown argument '{}' for {} ({})", key, command_,
                            takes.empty() ? "it takes none" : "takes: " + takes));
  }
  return {};
}

}  // namespace rasd::daemon
