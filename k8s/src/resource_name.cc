// The kubelet's check of a device plugin's resource name
// (IsExtendedResourceName in k8s.io/kubernetes/pkg/apis/core/v1/helper):
// a qualified name "domain/name" whose domain is not kubernetes.io's, and
// which stays a qualified name with "requests." in front.
#include <fmt/format.h>

#include <cctype>
#include <string>

#include "rasd/k8s/device_plugin.h"

namespace rasd::k8s {
namespace {

constexpr std::size_t kMaxDomainLength = 253;
constexpr std::size_t kMaxNameLength = 63;
constexpr std::string_view kRequestsPrefix = "requests.";

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// DNS-1123 subdomain: dot-separated labels of [a-z0-9-] that start and end
// alphanumeric.
bool IsDnsSubdomain(std::string_view domain) {
  if (domain.empty() || domain.size() > kMaxDomainLength) return false;
  std::size_t start = 0;
  while (true) {
    const auto dot = domain.find('.', start);
    const auto label = domain.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (label.empty() || !IsLowerAlnum(label.front()) || !IsLowerAlnum(label.back())) return false;
    for (char c : label) {
      if (!IsLowerAlnum(c) && c != '-') return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool IsQualifiedNamePart(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  if (!IsAlnum(name.front()) || !IsAlnum(name.back())) return false;
  for (char c : name) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

}  // namespace

Status ValidateResourceName(std::string_view name) {
  const auto slash = name.find('/');
  if (slash == std::string_view::npos) {
    return Fail(
        ErrorCode::kInvalidArgument,
        fmt::format("resource name '{}' needs a domain: domain/name, e.g. rasd.io/gpu", name));
  }
  const auto domain = name.substr(0, slash);
  const auto resource = name.substr(slash + 1);
  if (!IsDnsSubdomain(domain) || domain.size() + kRequestsPrefix.size() > kMaxDomainLength) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("resource name '{}': '{}' is not a DNS subdomain of at most {} "
                            "characters (lower-case letters, digits, '-' and '.')",
                            name, domain, kMaxDomainLength - kRequestsPrefix.size()));
  }
  if (domain == "kubernetes.io" || domain.ends_with(".kubernetes.io")) {
    return Fail(
        ErrorCode::kInvalidArgument,
        fmt::format("resource name '{}': the kubernetes.io domain is Kubernetes' own", name));
  }
  if (!IsQualifiedNamePart(resource)) {
    return Fail(
        ErrorCode::kInvalidArgument,
        fmt::format("resource name '{}': '{}' must be 1 to {} characters of letters, digits, "
                    "'-', '_' and '.', starting and ending with a letter or digit",
                    name, resource, kMaxNameLength));
  }
  return {};
}

}  // namespace rasd::k8s
