// One error style for every control command's arguments.

#include "arg_reader.h"

#include <gtest/gtest.h>

namespace rasd::daemon {
namespace {

using nlohmann::json;

TEST(ArgReaderTest, ReadsWhatIsThereAndLeavesTheRestUnset) {
  const json args = {{"device", 3}, {"reason", "fan"}, {"force", true}, {"devices", {0, 1}}};
  ArgReader reader("undrain", args);
  EXPECT_EQ(reader.Int("device", 0, 7), 3);
  EXPECT_EQ(reader.String("reason", 512), "fan");
  EXPECT_EQ(reader.Bool("force"), true);
  EXPECT_EQ(reader.IntList("devices", 0, 7, 8), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(reader.Int("deadline_ms", 0, 10), std::nullopt);
  EXPECT_TRUE(reader.Finish().has_value());
}

TEST(ArgReaderTest, AWrongTypeOrRangeNamesTheKeyTheCommandAndWhatItMustBe) {
  struct Case {
    json args;
    std::string message;
  };
  const Case cases[] = {
      {{{"device", "two"}}, "bad argument 'device' for drain: must be an integer in 0..7"},
      {{{"device", 8}}, "bad argument 'device' for drain: must be an integer in 0..7"},
      {{{"device", -1}}, "bad argument 'device' for drain: must be an integer in 0..7"},
      {{{"device", 18446744073709551615ULL}},
       "bad argument 'device' for drain: must be an integer in 0..7"},
      {{{"device", 1.5}}, "bad argument 'device' for drain: must be an integer in 0..7"},
      {{{"device", 1}, {"reason", std::string(513, 'x')}},
       "bad argument 'reason' for drain: must be a string of at most 512 bytes"},
      {{{"device", 1}, {"force", "yes"}}, "bad argument 'force' for drain: must be true or false"},
  };
  for (const auto& [args, message] : cases) {
    ArgReader reader("drain", args);
    (void)reader.Int("device", 0, 7);
    (void)reader.String("reason", 512);
    (void)reader.Bool("force");
    auto finished = reader.Finish();
    ASSERT_FALSE(finished.has_value()) << args.dump();
    EXPECT_EQ(finished.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(finished.error().message, message) << args.dump();
  }
}

TEST(ArgReaderTest, UnknownKeysAreListedAgainstWhatTheCommandTakes) {
  const json typo = {{"device", 1}, {"devcie", 2}};
  ArgReader reader("isolate", typo);
  (void)reader.Int("device", 0, 7);
  (void)reader.String("reason", 512);
  auto finished = reader.Finish();
  ASSERT_FALSE(finished.has_value());
  EXPECT_EQ(finished.error().message,
            "unknown argument 'devcie' for isolate (takes: device, reason)");
  const json extra = {{"x", 1}};
  ArgReader none("jobs", extra);
  EXPECT_EQ(none.Finish().error().message, "unknown argument 'x' for jobs (it takes none)");
}

TEST(ArgReaderTest, RequiredArgumentsAndNonObjects) {
  const json empty = json::object(), number = {{"name", 7}}, array = json::array({1, 2}), null;
  ArgReader missing("job-stop", empty);
  EXPECT_FALSE(missing.Required(missing.String("name", 128), "name").has_value());
  EXPECT_EQ(missing.Finish().error().message, "job-stop needs name");
  ArgReader wrong_type("job-stop", number);
  (void)wrong_type.Required(wrong_type.String("name", 128), "name");
  EXPECT_EQ(wrong_type.Finish().error().message,
            "bad argument 'name' for job-stop: must be a string of at most 128 bytes");
  ArgReader list("events", array);
  EXPECT_EQ(list.Finish().error().message, "events: arguments must be an object");
  ArgReader null_args("status", null);
  EXPECT_TRUE(null_args.Finish().has_value()) << "no arguments at all is fine";
}

TEST(ArgReaderTest, NumberListsAreBounded) {
  const json good = {{"input", {1, 2.5, 3}}}, long_list = {{"input", {1, 2, 3, 4}}},
             mixed = {{"input", {1, "x"}}};
  ArgReader reader("infer", good);
  EXPECT_EQ(reader.NumberList("input", 3), (std::vector<float>{1, 2.5, 3}));
  ArgReader too_long("infer", long_list);
  (void)too_long.NumberList("input", 3);
  EXPECT_EQ(too_long.Finish().error().message,
            "bad argument 'input' for infer: must be a list of at most 3 numbers");
  ArgReader not_numbers("infer", mixed);
  (void)not_numbers.NumberList("input", 3);
  EXPECT_FALSE(not_numbers.Finish().has_value());
}

}  // namespace
}  // namespace rasd::daemon
