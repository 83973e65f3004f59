// The fake-kubelet executable against a real DevicePlugin: what an
// integration test of the daemon will read from it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "rasd/k8s/device_plugin.h"

namespace rasd::k8s {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kWait{5000};

class StaticSource final : public DeviceSource {
 public:
  std::vector<PluginDevice> Devices() override {
    std::lock_guard lock(mutex_);
    return devices_;
  }
  Result<std::map<std::string, std::string>> AllocationEnvironment(
      const std::vector<std::string>& ids) override {
    std::string joined;
    for (const auto& id : ids) joined += (joined.empty() ? "" : ",") + id;
    return std::map<std::string, std::string>{{"RASD_DEVICES", joined}};
  }
  void SetHealthy(bool healthy) {
    std::lock_guard lock(mutex_);
    devices_[1].healthy = healthy;
  }

 private:
  std::mutex mutex_;
  std::vector<PluginDevice> devices_{{.id = "gpu0", .numa_node = 0}, {.id = "gpu1"}};
};

// fake-kubelet as a child: its stdin and stdout are pipes.
class FakeKubeletProcess {
 public:
  explicit FakeKubeletProcess(const std::filesystem::path& dir) {
    int to_child[2], from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(to_child[0], STDIN_FILENO);
      ::dup2(from_child[1], STDOUT_FILENO);
      ::execl(RASD_FAKE_KUBELET_BIN, RASD_FAKE_KUBELET_BIN, dir.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    stdin_ = to_child[1];
    stdout_ = from_child[0];
  }

  ~FakeKubeletProcess() {
    if (stdin_ >= 0) ::close(stdin_);
    if (stdout_ >= 0) ::close(stdout_);
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  bool Started() const { return pid_ > 0 && stdin_ >= 0; }

  void Send(const std::string& line) {
    const auto text = line + "\n";
    ASSERT_EQ(::write(stdin_, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }

  // The next line whose "event" is `event`, skipping others; nullopt at the
  // deadline or the end of output.
  std::optional<nlohmann::json> WaitForEvent(const std::string& event) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (true) {
      const auto newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        auto line = nlohmann::json::parse(buffer_.substr(0, newline), nullptr, false);
        buffer_.erase(0, newline + 1);
        if (line.is_discarded()) continue;
        const auto name = line.value("event", "");
        ++counts_[name];
        if (name == event) return line;
        continue;
      }
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left <= milliseconds::zero()) return std::nullopt;
      pollfd readable{.fd = stdout_, .events = POLLIN};
      if (::poll(&readable, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      char chunk[4096];
      const auto got = ::read(stdout_, chunk, sizeof chunk);
      if (got <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<std::size_t>(got));
    }
  }

  // Reads on until `count` lines of `event` have been seen in all.
  bool WaitForCount(const std::string& event, int count) {
    while (counts_[event] < count) {
      if (!WaitForEvent(event)) return false;
    }
    return true;
  }

  // The exit status after "quit".
  int Quit() {
    Send("quit");
    int status = 0;
    ::waitpid(pid_, &status, 0);
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  bool exited_ = false;
  std::string buffer_;
  std::map<std::string, int> counts_;
};

TEST(DevicePluginFakeKubeletTest, ExecutablePrintsRegistrationListsAndAllocations) {
  char pattern[] = "/tmp/rasd-k8s-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::filesystem::path dir = pattern;
  {
    FakeKubeletProcess kubelet(dir);
    ASSERT_TRUE(kubelet.Started());
    const auto ready = kubelet.WaitForEvent("ready");
    ASSERT_TRUE(ready);
    EXPECT_EQ((*ready)["socket"], (dir / "kubelet.sock").string());

    StaticSource source;
    auto plugin = DevicePlugin::Start({.plugin_dir = dir,
                                       .resource_name = "rasd.io/gpu",
                                       .endpoint = "rasd-gpu.sock",
                                       .kubelet_check_period = milliseconds(20)},
                                      source);
    ASSERT_TRUE(plugin) << plugin.error().ToString();

    const auto registered = kubelet.WaitForEvent("registered");
    ASSERT_TRUE(registered);
    EXPECT_EQ((*registered)["version"], "v1beta1");
    EXPECT_EQ((*registered)["endpoint"], "rasd-gpu.sock");
    EXPECT_EQ((*registered)["resource_name"], "rasd.io/gpu");

    auto devices = kubelet.WaitForEvent("devices");
    ASSERT_TRUE(devices);
    ASSERT_EQ((*devices)["devices"].size(), 2u);
    EXPECT_EQ((*devices)["devices"][0]["id"], "gpu0");
    EXPECT_EQ((*devices)["devices"][0]["health"], "Healthy");
    EXPECT_EQ((*devices)["devices"][0]["numa_nodes"], nlohmann::json::array({0}));

    source.SetHealthy(false);
    (*plugin)->DevicesChanged();
    devices = kubelet.WaitForEvent("devices");
    ASSERT_TRUE(devices);
    EXPECT_EQ((*devices)["devices"][1]["health"], "Unhealthy");

    kubelet.Send("allocate gpu0,gpu1");  // gpu1 is unhealthy now
    auto allocated = kubelet.WaitForEvent("allocate");
    ASSERT_TRUE(allocated);
    EXPECT_EQ((*allocated)["ok"], false);
    EXPECT_EQ((*allocated)["code"], 3);  // INVALID_ARGUMENT

    kubelet.Send("allocate gpu0");
    allocated = kubelet.WaitForEvent("allocate");
    ASSERT_TRUE(allocated);
    EXPECT_EQ((*allocated)["ok"], true);
    EXPECT_EQ((*allocated)["envs"]["RASD_DEVICES"], "gpu0");

    kubelet.Send("restart");
    ASSERT_TRUE(kubelet.WaitForEvent("restarted"));
    ASSERT_TRUE(kubelet.WaitForCount("registered", 2));  // the plugin came back
    ASSERT_TRUE(kubelet.WaitForCount("devices", 3));     // on a fresh stream
    ASSERT_TRUE(kubelet.WaitForCount("stream_end", 1));  // the old one ended

    plugin->reset();
    EXPECT_TRUE(kubelet.WaitForCount("stream_end", 2));
    EXPECT_EQ(kubelet.Quit(), 0);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rasd::k8s
