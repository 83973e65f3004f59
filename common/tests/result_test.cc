#include "rasd/common/result.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <set>

namespace rasd {
namespace {

Result<int> Half(int value) {
  if (value % 2 != 0)
    return Fail(ErrorCode::kInvalidArgument, "odd value " + std::to_string(value));
  return value / 2;
}

TEST(ResultTest, CarriesValueOrError) {
  const Result<int> good = Half(8);
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(*good, 4);

  const Result<int> bad = Half(3);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.error().message, "odd value 3");
  EXPECT_EQ(bad.error().ToString(), "invalid_argument: odd value 3");
}

TEST(ResultTest, StatusHasNoValue) {
  const Status ok = {};
  EXPECT_TRUE(ok.has_value());
  const Status failed = Fail(ErrorCode::kTimeout, "too slow");
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(ErrorCodeName(failed.error().code), "timeout");
}

TEST(ResultTest, ErrnoErrorMapsCommonErrnos) {
  EXPECT_EQ(ErrnoError("open x", ENOENT).code, ErrorCode::kNotFound);
  EXPECT_EQ(ErrnoError("open x", EACCES).code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(ErrnoError("write x", ENOSPC).code, ErrorCode::kIoError);
  EXPECT_EQ(ErrnoError("open x", ENOENT).message, "open x: No such file or directory");
}

TEST(ResultTest, EveryCodeHasADistinctName) {
  std::set<std::string_view> names;
  for (int code = 0; code <= static_cast<int>(ErrorCode::kInternal); ++code) {
    const auto name = ErrorCodeName(static_cast<ErrorCode>(code));
    EXPECT_NE(name, "unknown");
    EXPECT_TRUE(names.insert(name).second) << name;
  }
}

}  // namespace
}  // namespace rasd
