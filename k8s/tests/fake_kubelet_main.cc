// fake-kubelet DIR: a kubelet's device-plugin side for integration tests.
// Serves DIR/kubelet.sock, and, as the kubelet does, dials every plugin that
// registers and watches its devices. Prints one JSON object a line:
//   {"event":"ready","socket":...}
//   {"event":"registered","version":..,"endpoint":..,"resource_name":..,
//    "pre_start_required":..,"get_preferred_allocation_available":..}
//   {"event":"devices","endpoint":..,"devices":[{"id":..,"health":..,"numa_nodes":[..]}]}
//   {"event":"stream_end","endpoint":..,"code":N}
//   {"event":"allocate","ok":true,"envs":{..}} or
//   {"event":"allocate","ok":false,"code":N,"message":..}
//   {"event":"restarted"}, {"event":"error","message":..}
// Reads commands on stdin, one a line: "allocate ID[,ID...]" (one
// container, sent to the plugin that registered last), "restart" (what a
// restarting kubelet does), "quit". Exits at "quit" or end of input.
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "fake_kubelet.h"

namespace {

using rasd::k8s::fake::DeviceList;
using rasd::k8s::fake::FakeKubelet;
using rasd::k8s::fake::PluginClient;
using rasd::k8s::fake::Registration;

std::mutex g_output_mutex;

void Print(const nlohmann::json& line) {
  std::lock_guard lock(g_output_mutex);
  std::cout << line.dump() << std::endl;
}

std::vector<std::string> SplitIds(const std::string& text) {
  std::vector<std::string> ids;
  std::stringstream stream(text);
  std::string id;
  while (std::getline(stream, id, ',')) {
    if (!id.empty()) ids.push_back(id);
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fake-kubelet DIR\n";
    return 2;
  }
  auto kubelet = FakeKubelet::Start(argv[1]);
  if (!kubelet) {
    std::cerr << "fake-kubelet: " << kubelet.error().ToString() << "\n";
    return 1;
  }
  std::mutex clients_mutex;
  std::vector<std::unique_ptr<PluginClient>> clients;  // the last one is the current plugin
  (*kubelet)->OnRegistration([&](const Registration& registration) {
    Print(
        {{"event", "registered"},
         {"version", registration.version},
         {"endpoint", registration.endpoint},
         {"resource_name", registration.resource_name},
         {"pre_start_required", registration.pre_start_required},
         {"get_preferred_allocation_available", registration.get_preferred_allocation_available}});
    auto client = (*kubelet)->Dial(registration.endpoint);
    const auto endpoint = registration.endpoint;
    client->Watch(
        [endpoint](const DeviceList& list) {
          auto devices = nlohmann::json::array();
          for (const auto& device : list.devices) {
            devices.push_back(
                {{"id", device.id}, {"health", device.health}, {"numa_nodes", device.numa_nodes}});
          }
          Print({{"event", "devices"}, {"endpoint", endpoint}, {"devices", devices}});
        },
        [endpoint](int code) {
          Print({{"event", "stream_end"}, {"endpoint", endpoint}, {"code", code}});
        });
    std::lock_guard lock(clients_mutex);
    clients.push_back(std::move(client));
  });
  Print({{"event", "ready"}, {"socket", ((*kubelet)->Dir() / "kubelet.sock").string()}});

  std::string line;
  while (std::getline(std::cin, line)) {
    std::stringstream words(line);
    std::string command, argument;
    words >> command >> argument;
    if (command == "quit") break;
    if (command == "restart") {
      if (auto restarted = (*kubelet)->Restart(); !restarted) {
        Print({{"event", "error"}, {"message", restarted.error().ToString()}});
      } else {
        Print({{"event", "restarted"}});
      }
    } else if (command == "allocate") {
      PluginClient* client = nullptr;
      {
        std::lock_guard lock(clients_mutex);
        if (!clients.empty()) client = clients.back().get();
      }
      if (client == nullptr) {
        Print({{"event", "error"}, {"message", "no plugin has registered"}});
        continue;
      }
      auto result = client->Allocate({SplitIds(argument)});
      if (!result.ok()) {
        Print({{"event", "allocate"},
               {"ok", false},
               {"code", result.error.code},
               {"message", result.error.message}});
      } else {
        Print({{"event", "allocate"},
               {"ok", true},
               {"envs", result.value->empty() ? nlohmann::json::object()
                                              : nlohmann::json(result.value->front())}});
      }
    } else if (!command.empty()) {
      Print({{"event", "error"}, {"message", "unknown command: " + command}});
    }
  }
  // No registration may arrive while the clients go.
  (*kubelet)->Stop();
  std::lock_guard lock(clients_mutex);
  clients.clear();
  return 0;
}
