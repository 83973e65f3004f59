#include <gtest/gtest.h>

#include "rasd/k8s/device_plugin.h"

namespace rasd::k8s {
namespace {

TEST(DevicePluginResourceNameTest, AcceptsWhatTheKubeletAccepts) {
  for (const auto* name : {"rasd.io/gpu", "example.com/npu", "a.b-c.d/Gpu_1.x", "rasd.io/g"}) {
    const auto valid = ValidateResourceName(name);
    EXPECT_TRUE(valid) << name << ": " << valid.error().ToString();
  }
}

TEST(DevicePluginResourceNameTest, RefusesWhatTheKubeletRefuses) {
  for (const auto* name : {
           "gpu",                // no domain: a native resource
           "/gpu",               // empty domain
           "rasd.io/",           // empty name
           "Rasd.io/gpu",        // upper-case domain
           "rasd..io/gpu",       // empty label
           "-rasd.io/gpu",       // label starts with '-'
           "kubernetes.io/gpu",  // Kubernetes' own
           "node.kubernetes.io/gpu",
           "rasd.io/gpu/0",  // a slash in the name
           "rasd.io/-gpu",   // name starts with '-'
           "rasd.io/gpu.",   // name ends with '.'
           "rasd.io/g pu",   // a space
       }) {
    const auto valid = ValidateResourceName(name);
    ASSERT_FALSE(valid) << name;
    EXPECT_EQ(valid.error().code, ErrorCode::kInvalidArgument) << name;
  }
  EXPECT_FALSE(ValidateResourceName("rasd.io/" + std::string(64, 'g')));
  EXPECT_TRUE(ValidateResourceName("rasd.io/" + std::string(63, 'g')));
  // "requests." + domain must stay a DNS subdomain (253): a domain of 244 at most.
  const std::string long_domain = std::string(60, 'a') + "." + std::string(60, 'b') + "." +
                                  std::string(60, 'c') + "." + std::string(60, 'd');  // 243
  EXPECT_TRUE(ValidateResourceName(long_domain + "/gpu"));
  EXPECT_TRUE(ValidateResourceName(long_domain + "e/gpu"));
  EXPECT_FALSE(ValidateResourceName(long_domain + "ee/gpu"));
}

}  // namespace
}  // namespace rasd::k8s
