#include "rasd/common/control_protocol.h"

namespace rasd::common::control {

LineFramer::LineFramer(std::size_t max_line_bytes) : max_line_bytes_(max_line_bytes) {}

void LineFramer::Append(std::string_view bytes) {
  if (too_large_) return;
  // Compact lazily so that many small lines do not cost a memmove each.
  if (consumed_ > 0 && consumed_ >= buffer_.size() / 2) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  buffer_.append(bytes);
}

LineFramer::Outcome LineFramer::Next(std::string& line) {
  if (too_large_) return Outcome::kTooLarge;
  const std::size_t newline = buffer_.find('\n', consumed_);
  if (newline == std::string::npos) {
    if (Buffered() > max_line_bytes_) {
      too_large_ = true;
      return Outcome::kTooLarge;
    }
    return Outcome::kNeedMore;
  }
  std::size_t length = newline - consumed_;
  if (length > max_line_bytes_) {
    too_large_ = true;
    return Outcome::kTooLarge;
  }
  if (length > 0 && buffer_[consumed_ + length - 1] == '\r') --length;
  line.assign(buffer_, consumed_, length);
  consumed_ = newline + 1;
  return Outcome::kLine;
}

std::string LineFramer::TakeRemainder() {
  std::string rest = buffer_.substr(consumed_);
  buffer_.clear();
  consumed_ = 0;
  return rest;
}

Result<Request> ParseRequest(std::string_view line) {
  nlohmann::json message = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded()) {
    return Fail(ErrorCode::kCorruptData, "request is not valid JSON");
  }
  if (!message.is_object()) {
    return Fail(ErrorCode::kInvalidArgument, "request must be a JSON object");
  }
  Request request;
  if (auto id = message.find("id"); id != message.end()) request.id = *id;
  const auto command = message.find("command");
  if (command == message.end() || !command->is_string()) {
    return Fail(ErrorCode::kInvalidArgument, "request needs a string field \"command\"");
  }
  request.command = command->get<std::string>();
  if (auto args = message.find("args"); args != message.end() && !args->is_null()) {
    if (!args->is_object()) {
      return Fail(ErrorCode::kInvalidArgument, "\"args\" must be a JSON object");
    }
    request.args = *args;
  }
  for (const auto& [key, value] : message.items()) {
    if (key != "command" && key != "args" && key != "id") {
      return Fail(ErrorCode::kInvalidArgument, "unknown request field \"" + key + "\"");
    }
  }
  return request;
}

nlohmann::json MakeOkReply(nlohmann::json result, const nlohmann::json& id) {
  nlohmann::json reply = {{"ok", true}, {"result", std::move(result)}};
  if (!id.is_null()) reply["id"] = id;
  return reply;
}

nlohmann::json MakeErrorReply(std::string_view code, std::string_view message,
                              const nlohmann::json& id) {
  nlohmann::json reply = {
      {"ok", false}, {"error", {{"code", std::string(code)}, {"message", std::string(message)}}}};
  if (!id.is_null()) reply["id"] = id;
  return reply;
}

std::string EncodeLine(const nlohmann::json& message) {
  std::string line = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line.push_back('\n');
  return line;
}

}  // namespace rasd::common::control
