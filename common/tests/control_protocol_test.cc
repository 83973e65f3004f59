#include "rasd/common/control_protocol.h"

#include <gtest/gtest.h>

namespace rasd::common::control {
namespace {

TEST(LineFramerTest, SplitsLinesAcrossChunks) {
  LineFramer framer(100);
  std::string line;
  framer.Append("{\"command\":");
  EXPECT_EQ(framer.Next(line), LineFramer::Outcome::kNeedMore);
  framer.Append("\"ping\"}\n{\"a\":1}\r\n{\"b\"");
  ASSERT_EQ(framer.Next(line), LineFramer::Outcome::kLine);
  EXPECT_EQ(line, "{\"command\":\"ping\"}");
  ASSERT_EQ(framer.Next(line), LineFramer::Outcome::kLine);
  EXPECT_EQ(line, "{\"a\":1}");
  EXPECT_EQ(framer.Next(line), LineFramer::Outcome::kNeedMore);
  EXPECT_EQ(framer.TakeRemainder(), "{\"b\"");
  EXPECT_EQ(framer.Buffered(), 0u);
}

TEST(LineFramerTest, EmptyLinesAreLines) {
  LineFramer framer(10);
  std::string line = "x";
  framer.Append("\n");
  ASSERT_EQ(framer.Next(line), LineFramer::Outcome::kLine);
  EXPECT_EQ(line, "");
}

TEST(LineFramerTest, UnterminatedLineOverTheBoundIsTooLarge) {
  LineFramer framer(8);
  std::string line;
  framer.Append("12345678");
  EXPECT_EQ(framer.Next(line), LineFramer::Outcome::kNeedMore);  // exactly at the bound is fine
  framer.Append("9");
  EXPECT_EQ(framer.Next(line), LineFramer::Outcome::kTooLarge);
  // Sticky: the stream is out of sync and must be closed.
  framer.Append("\n{}\n");
  EXPECT_EQ(framer.Next(line), LineFramer::Outcome::kTooLarge);
}

TEST(LineFramerTest, TerminatedLineOverTheBoundIsTooLarge) {
  LineFramer framer(4);
  std::string line;
  framer.Append("ok\n123456\n");
  ASSERT_EQ(framer.Next(line), LineFramer::Outcome::kLine);
  EXPECT_EQ(line, "ok");
  EXPECT_EQ(framer.Next(line), LineFramer::Outcome::kTooLarge);
}

TEST(LineFramerTest, ManySmallLinesDoNotGrowTheBuffer) {
  LineFramer framer(64);
  std::string line;
  for (int i = 0; i < 10000; ++i) {
    framer.Append("{\"command\":\"ping\"}\n");
    ASSERT_EQ(framer.Next(line), LineFramer::Outcome::kLine);
  }
  EXPECT_EQ(framer.Buffered(), 0u);
}

TEST(ParseRequestTest, AcceptsCommandArgsAndId) {
  auto request = ParseRequest(R"({"command":"status","args":{"verbose":true},"id":7})");
  ASSERT_TRUE(request.has_value()) << request.error().ToString();
  EXPECT_EQ(request->command, "status");
  EXPECT_EQ(request->args["verbose"], true);
  EXPECT_EQ(request->id, 7);
}

TEST(ParseRequestTest, ArgsDefaultToEmptyObject) {
  auto request = ParseRequest(R"({"command":"ping"})");
  ASSERT_TRUE(request.has_value());
  EXPECT_TRUE(request->args.is_object());
  EXPECT_TRUE(request->id.is_null());
}

TEST(ParseRequestTest, RejectsMalformedInput) {
  struct Case {
    const char* text;
    ErrorCode code;
    const char* message_part;
  };
  const Case cases[] = {
      {"{not json", ErrorCode::kCorruptData, "not valid JSON"},
      {"", ErrorCode::kCorruptData, "not valid JSON"},
      {"[1,2]", ErrorCode::kInvalidArgument, "JSON object"},
      {R"({"args":{}})", ErrorCode::kInvalidArgument, "\"command\""},
      {R"({"command":5})", ErrorCode::kInvalidArgument, "\"command\""},
      {R"({"command":"ping","args":[1]})", ErrorCode::kInvalidArgument, "\"args\""},
      {R"({"command":"ping","extra":1})", ErrorCode::kInvalidArgument, "\"extra\""},
  };
  for (const auto& c : cases) {
    auto request = ParseRequest(c.text);
    ASSERT_FALSE(request.has_value()) << c.text;
    EXPECT_EQ(request.error().code, c.code) << c.text;
    EXPECT_NE(request.error().message.find(c.message_part), std::string::npos)
        << c.text << " -> " << request.error().message;
  }
}

TEST(ReplyTest, OkAndErrorRepliesHaveTheDocumentedShape) {
  const auto ok = MakeOkReply({{"pong", true}}, 3);
  EXPECT_EQ(ok["ok"], true);
  EXPECT_EQ(ok["result"]["pong"], true);
  EXPECT_EQ(ok["id"], 3);

  const auto error = MakeErrorReply(wire_error::kUnknownCommand, "no command \"x\"");
  EXPECT_EQ(error["ok"], false);
  EXPECT_EQ(error["error"]["code"], "unknown_command");
  EXPECT_EQ(error["error"]["message"], "no command \"x\"");
  EXPECT_FALSE(error.contains("id"));
}

TEST(ReplyTest, EncodeLineSurvivesInvalidUtf8) {
  const std::string bad = "caf\xC3\x28";
  const std::string line = EncodeLine(MakeErrorReply(wire_error::kUnknownCommand, bad));
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded());
}

}  // namespace
}  // namespace rasd::common::control
