#include <gtest/gtest.h>

#include <vector>

#include "acl_errors.h"
#include "dcmi_monitor.h"

namespace rasd::drivers::ascend {
namespace {

TEST(AscendErrorsTest, AclCodesMapToDriverErrorCodes) {
  EXPECT_EQ(AclErrorCode(100000), ErrorCode::kInvalidArgument);  // invalid param
  EXPECT_EQ(AclErrorCode(107000), ErrorCode::kInvalidArgument);  // runtime param invalid
  EXPECT_EQ(AclErrorCode(107001), ErrorCode::kInvalidArgument);  // invalid device id
  EXPECT_EQ(AclErrorCode(200000), ErrorCode::kOutOfMemory);      // bad alloc
  EXPECT_EQ(AclErrorCode(207001), ErrorCode::kOutOfMemory);      // memory allocation
  EXPECT_EQ(AclErrorCode(207018), ErrorCode::kOutOfMemory);      // device OOM
  EXPECT_EQ(AclErrorCode(207000), ErrorCode::kNotSupported);
  EXPECT_EQ(AclErrorCode(507046), ErrorCode::kTimeout);  // stream sync timeout
  EXPECT_EQ(AclErrorCode(107023), ErrorCode::kAborted);  // stream aborting
  EXPECT_EQ(AclErrorCode(507053), ErrorCode::kDeviceFault);
  EXPECT_EQ(AclErrorCode(507054), ErrorCode::kDeviceFault);
  EXPECT_EQ(AclErrorCode(507010), ErrorCode::kDeviceFault);
  EXPECT_EQ(AclErrorCode(507899), ErrorCode::kDeviceFault);  // driver internal
  EXPECT_EQ(AclErrorCode(500000), ErrorCode::kDeviceFault);
}

TEST(AscendErrorsTest, OnlyRuntimeDeviceFaultsAreReported) {
  for (int code : {507053, 507054, 507010, 507000, 507015, 507099, 507899, 507901}) {
    EXPECT_TRUE(IsReportedRuntimeCode(code)) << code;
  }
  // Answers, not faults; and codes outside 507xxx.
  for (int code : {0, 507004, 507006, 507046, 507047, 508000, 100000, 207001}) {
    EXPECT_FALSE(IsReportedRuntimeCode(code)) << code;
  }
}

TEST(AscendErrorsTest, MessageNamesCallDeviceCodeAndDetail) {
  const Error error = AclError("aclrtSynchronizeStreamWithTimeout", 507053, 1, "UCE at 0x1000");
  EXPECT_EQ(error.code, ErrorCode::kDeviceFault);
  EXPECT_EQ(error.message,
            "aclrtSynchronizeStreamWithTimeout on device 1 failed: ACL error 507053 (device "
            "memory error (UCE)): UCE at 0x1000");
  EXPECT_EQ(AclError("aclInit", 123456, std::nullopt).message, "aclInit failed: ACL error 123456");
}

TEST(AscendErrorsTest, ChipHealthIsReportedWhenItChanges) {
  ChipHealth last;
  EXPECT_TRUE(DiffChipHealth(0, last, 0, {}).empty());
  auto events = DiffChipHealth(3, last, 2, {});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].device, 3);
  EXPECT_EQ(events[0].kind, DriverErrorKind::kVendorCode);
  EXPECT_EQ(events[0].code_space, VendorCodeSpace::kAscend);
  EXPECT_FALSE(events[0].vendor_code.has_value()) << "a health level is not a code";
  EXPECT_NE(events[0].message.find("major alarm"), std::string::npos) << events[0].message;
  EXPECT_TRUE(DiffChipHealth(3, last, 2, {}).empty()) << "the same level is reported once";
  EXPECT_EQ(DiffChipHealth(3, last, 3, {}).size(), 1u) << "a new level is reported";
  EXPECT_TRUE(DiffChipHealth(3, last, 0, {}).empty());
  EXPECT_EQ(DiffChipHealth(3, last, 3, {}).size(), 1u) << "back after clearing";
}

TEST(AscendErrorsTest, EachErrorCodeIsReportedOnceUntilItClears) {
  ChipHealth last;
  const std::vector<unsigned int> first = {0x80E01801u, 0x80C98000u};
  auto events = DiffChipHealth(1, last, 0, first);
  ASSERT_EQ(events.size(), 2u);
  for (const auto& event : events) {
    EXPECT_EQ(event.kind, DriverErrorKind::kVendorCode);
    EXPECT_EQ(event.code_space, VendorCodeSpace::kAscend);
    ASSERT_TRUE(event.vendor_code.has_value());
  }
  EXPECT_EQ(static_cast<unsigned int>(*events[0].vendor_code), 0x80C98000u);
  EXPECT_NE(events[0].message.find("0x80C98000"), std::string::npos) << events[0].message;
  EXPECT_TRUE(DiffChipHealth(1, last, 0, first).empty());
  const std::vector<unsigned int> second = {0x80E01801u};
  EXPECT_TRUE(DiffChipHealth(1, last, 0, second).empty()) << "a clearing code is not news";
  events = DiffChipHealth(1, last, 0, first);
  ASSERT_EQ(events.size(), 1u) << "a code that cleared and came back is reported again";
  EXPECT_EQ(static_cast<unsigned int>(*events[0].vendor_code), 0x80C98000u);
}

}  // namespace
}  // namespace rasd::drivers::ascend
