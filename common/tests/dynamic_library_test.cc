#include "rasd/common/dynamic_library.h"

#include <gtest/gtest.h>

namespace rasd::common {
namespace {

TEST(DynamicLibraryTest, MissingLibraryIsUnavailableWithTheLoadersReason) {
  auto library = DynamicLibrary::Open("librasd-no-such-library.so.1");
  ASSERT_FALSE(library);
  EXPECT_EQ(library.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(library.error().message.find("librasd-no-such-library.so.1"), std::string::npos);
  EXPECT_NE(library.error().message.find("No such file"), std::string::npos)
      << library.error().message;
}

TEST(DynamicLibraryTest, BindsAFunctionAndNamesAMissingSymbol) {
  // libm is on every glibc system, under this soname.
  auto library = DynamicLibrary::Open("libm.so.6");
  ASSERT_TRUE(library) << library.error().ToString();
  double (*cosine)(double) = nullptr;
  ASSERT_TRUE(library->Bind(cosine, "cos"));
  EXPECT_DOUBLE_EQ(cosine(0.0), 1.0);

  void (*missing)() = nullptr;
  auto bound = library->Bind(missing, "rasd_not_a_symbol");
  ASSERT_FALSE(bound);
  EXPECT_EQ(bound.error().code, ErrorCode::kNotFound);
  EXPECT_NE(bound.error().message.find("rasd_not_a_symbol"), std::string::npos);
  EXPECT_EQ(missing, nullptr);

  DynamicLibrary moved = std::move(*library);
  EXPECT_TRUE(moved.Symbol("sin"));
}

}  // namespace
}  // namespace rasd::common
