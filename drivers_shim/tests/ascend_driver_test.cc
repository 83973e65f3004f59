#include "rasd/drivers_shim/ascend_driver.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "driver_test_util.h"
#include "rasd/common/dynamic_library.h"
#include "rasd/testing/eventually.h"
#include "testing/fake_control.h"

namespace rasd::drivers {
namespace {

using namespace std::chrono_literals;
using ascend::testing::kFakeHbmBytes;
using ascend::testing::kFakeSocName;

// The fakes' test controls, resolved from the same loaded copies the driver
// uses.
struct FakeControls {
  common::DynamicLibrary acl;
  common::DynamicLibrary dcmi;
  decltype(&::fake_acl_reset) acl_reset = nullptr;
  decltype(&::fake_acl_set_device_count) set_device_count = nullptr;
  decltype(&::fake_acl_set_init_result) set_init_result = nullptr;
  decltype(&::fake_acl_fail_next_sync) fail_next_sync = nullptr;
  decltype(&::fake_acl_live_objects) live_objects = nullptr;
  decltype(&::fake_acl_initialized) initialized = nullptr;
  decltype(&::fake_dcmi_reset) dcmi_reset = nullptr;
  decltype(&::fake_dcmi_set_health) set_health = nullptr;
  decltype(&::fake_dcmi_set_error_codes) set_error_codes = nullptr;
  decltype(&::fake_dcmi_error_code_reads) error_code_reads = nullptr;

  // Null when the fakes cannot be loaded.
  static FakeControls* Get() {
    static FakeControls* controls = Load();
    return controls;
  }

 private:
  FakeControls(common::DynamicLibrary acl_library, common::DynamicLibrary dcmi_library)
      : acl(std::move(acl_library)), dcmi(std::move(dcmi_library)) {}

  static FakeControls* Load() {
    auto acl = common::DynamicLibrary::Open(RASD_FAKE_ASCENDCL_PATH);
    auto dcmi = common::DynamicLibrary::Open(RASD_FAKE_DCMI_PATH);
    if (!acl || !dcmi) return nullptr;
    auto* controls = new FakeControls(std::move(*acl), std::move(*dcmi));
    bool bound = controls->acl.Bind(controls->acl_reset, "fake_acl_reset").has_value() &&
                 controls->acl.Bind(controls->set_device_count, "fake_acl_set_device_count") &&
                 controls->acl.Bind(controls->set_init_result, "fake_acl_set_init_result") &&
                 controls->acl.Bind(controls->fail_next_sync, "fake_acl_fail_next_sync") &&
                 controls->acl.Bind(controls->live_objects, "fake_acl_live_objects") &&
                 controls->acl.Bind(controls->initialized, "fake_acl_initialized") &&
                 controls->dcmi.Bind(controls->dcmi_reset, "fake_dcmi_reset") &&
                 controls->dcmi.Bind(controls->set_health, "fake_dcmi_set_health") &&
                 controls->dcmi.Bind(controls->set_error_codes, "fake_dcmi_set_error_codes") &&
                 controls->dcmi.Bind(controls->error_code_reads, "fake_dcmi_error_code_reads");
    if (!bound) return nullptr;
    return controls;
  }
};

AscendDriverOptions FakeOptions() {
  AscendDriverOptions options;
  options.acl_library = RASD_FAKE_ASCENDCL_PATH;
  options.dcmi_library = RASD_FAKE_DCMI_PATH;
  options.health_poll = 2ms;
  options.visible_devices = "";
  return options;
}

// Collects what the driver reports.
class Reports {
 public:
  ErrorListener Listener() {
    return [this](const DriverErrorEvent& event) {
      std::lock_guard lock(mutex_);
      events_.push_back(event);
      changed_.notify_all();
    };
  }
  std::vector<DriverErrorEvent> Events() {
    std::lock_guard lock(mutex_);
    return events_;
  }
  // Waits until `count` events have arrived.
  bool WaitFor(std::size_t count, std::chrono::milliseconds timeout = 2s) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return events_.size() >= count; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<DriverErrorEvent> events_;
};

// A callback that holds its stream until released. Destruction waits for
// the callback to return, so that it never outlives the gate.
class Gate {
 public:
  ~Gate() {
    Open();
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return !entered_ || left_; });
  }

  StreamCallback Blocker() {
    return [this](const Status&) {
      std::unique_lock lock(mutex_);
      entered_ = true;
      changed_.notify_all();
      changed_.wait(lock, [this] { return open_; });
      left_ = true;
      changed_.notify_all();
    };
  }
  void WaitEntered() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return entered_; });
  }
  void Open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool entered_ = false;
  bool open_ = false;
  bool left_ = false;
};

// A callback's status, handed to the test. Shared with the callback, which
// may still be returning from it when the test reads it.
class StatusBox {
 public:
  StreamCallback Callback() {
    return [promise = promise_](const Status& status) { promise->set_value(status); };
  }
  // The status, or nullopt when the callback has not run within `timeout`.
  std::optional<Status> Wait(std::chrono::milliseconds timeout) {
    if (future_.wait_for(timeout) != std::future_status::ready) return std::nullopt;
    return future_.get();
  }

 private:
  std::shared_ptr<std::promise<Status>> promise_ = std::make_shared<std::promise<Status>>();
  std::future<Status> future_ = promise_->get_future();
};

std::vector<std::uint32_t> Pattern(std::size_t count, std::uint32_t seed) {
  std::vector<std::uint32_t> values(count);
  for (std::size_t i = 0; i < count; ++i)
    values[i] = seed * 2654435761u + static_cast<std::uint32_t>(i);
  return values;
}

class AscendDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(FakeControls::Get(), nullptr);
    fake().acl_reset();
    fake().dcmi_reset();
    ASSERT_EQ(fake().live_objects(), 0) << "an earlier test leaked ACL objects";
    auto created = CreateAscendDriver(FakeOptions());
    ASSERT_TRUE(created.has_value()) << created.error().ToString();
    driver_ = std::move(*created);
    driver_->SetErrorListener(reports_.Listener());
  }

  void TearDown() override {
    driver_.reset();
    EXPECT_EQ(fake().live_objects(), 0) << "the driver leaked ACL objects";
    EXPECT_EQ(fake().initialized(), 0) << "the driver did not call aclFinalize";
  }

  static FakeControls& fake() { return *FakeControls::Get(); }

  StreamHandle NewStream(int device = 0) { return testing::NewStreamOn(*driver_, device); }

  DeviceAddress Reserve(std::uint64_t bytes, int device = 0) {
    return testing::ReserveOn(*driver_, bytes, device);
  }

  std::unique_ptr<Driver> driver_;
  Reports reports_;
};

TEST(AscendDriverCreateTest, MissingLibraryIsUnavailableAndNamesIt) {
  AscendDriverOptions options;
  options.acl_library = "/nonexistent/libascendcl-for-rasd-tests.so";
  auto created = CreateAscendDriver(options);
  ASSERT_FALSE(created.has_value());
  EXPECT_EQ(created.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(created.error().message.find("libascendcl-for-rasd-tests.so"), std::string::npos)
      << created.error().message;
  EXPECT_NE(created.error().message.find("No such file"), std::string::npos)
      << "dlerror's reason: " << created.error().message;
}

TEST(AscendDriverCreateTest, NoDeviceIsUnavailable) {
  ASSERT_NE(FakeControls::Get(), nullptr);
  FakeControls::Get()->acl_reset();
  FakeControls::Get()->set_device_count(0);
  auto created = CreateAscendDriver(FakeOptions());
  FakeControls::Get()->acl_reset();
  ASSERT_FALSE(created.has_value());
  EXPECT_EQ(created.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(created.error().message.find("no Ascend device"), std::string::npos)
      << created.error().message;
  EXPECT_EQ(FakeControls::Get()->initialized(), 0) << "aclFinalize after a failed start";
  EXPECT_EQ(FakeControls::Get()->live_objects(), 0);
}

TEST(AscendDriverCreateTest, AclInitFailureIsUnavailable) {
  ASSERT_NE(FakeControls::Get(), nullptr);
  FakeControls::Get()->acl_reset();
  FakeControls::Get()->set_init_result(500001);
  auto created = CreateAscendDriver(FakeOptions());
  FakeControls::Get()->acl_reset();
  ASSERT_FALSE(created.has_value());
  EXPECT_EQ(created.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(created.error().message.find("aclInit"), std::string::npos) << created.error().message;
  EXPECT_NE(created.error().message.find("500001"), std::string::npos) << created.error().message;
}

TEST(AscendDriverCreateTest, WorksWithoutDcmi) {
  ASSERT_NE(FakeControls::Get(), nullptr);
  FakeControls::Get()->acl_reset();
  AscendDriverOptions options = FakeOptions();
  options.dcmi_library = "/nonexistent/libdcmi-for-rasd-tests.so";
  {
    auto created = CreateAscendDriver(options);
    ASSERT_TRUE(created.has_value()) << created.error().ToString();
    auto devices = (*created)->EnumerateDevices();
    ASSERT_TRUE(devices.has_value());
    ASSERT_EQ(devices->size(), 2u);
    EXPECT_EQ((*devices)[0].pci_bdf, "");
    EXPECT_EQ((*devices)[0].uuid, "");
  }
  EXPECT_EQ(FakeControls::Get()->live_objects(), 0);
}

TEST(AscendDriverCreateTest, VisibleDevicesMapAclDevicesToDcmiLogicIds) {
  ASSERT_NE(FakeControls::Get(), nullptr);
  FakeControls::Get()->acl_reset();
  FakeControls::Get()->dcmi_reset();
  AscendDriverOptions options = FakeOptions();
  options.visible_devices = "1,0";
  auto created = CreateAscendDriver(options);
  ASSERT_TRUE(created.has_value()) << created.error().ToString();
  auto devices = (*created)->EnumerateDevices();
  ASSERT_TRUE(devices.has_value());
  EXPECT_EQ((*devices)[0].pci_bdf, "0000:c2:00.0");
  EXPECT_EQ((*devices)[1].pci_bdf, "0000:c1:00.0");
}

TEST_F(AscendDriverTest, EnumeratesTheFakeDevices) {
  EXPECT_EQ(driver_->Name(), "ascend");
  auto devices = driver_->EnumerateDevices();
  ASSERT_TRUE(devices.has_value()) << devices.error().ToString();
  ASSERT_EQ(devices->size(), 2u);
  std::set<std::string> uuids;
  for (int i = 0; i < 2; ++i) {
    const DeviceProperties& device = (*devices)[static_cast<std::size_t>(i)];
    EXPECT_EQ(device.index, i);
    EXPECT_EQ(device.vendor, "huawei");
    EXPECT_EQ(device.name, kFakeSocName);
    EXPECT_EQ(device.memory_bytes, kFakeHbmBytes);
    EXPECT_EQ(device.retire_granularity, 4096u);
    EXPECT_FALSE(device.uuid.empty());
    uuids.insert(device.uuid);
  }
  EXPECT_EQ((*devices)[0].pci_bdf, "0000:c1:00.0");
  EXPECT_EQ((*devices)[1].pci_bdf, "0000:c2:00.0");
  EXPECT_EQ(uuids.size(), 2u);
  EXPECT_FALSE(driver_->Kernels().empty()) << "the stand-in libopapi.so beside libascendcl";
}

TEST_F(AscendDriverTest, HasNoFaultInjector) {
  EXPECT_EQ(driver_->Faults(), nullptr) << "a real NPU takes no injected faults";
}

TEST_F(AscendDriverTest, ReservationsArePageAlignedAndChecked) {
  const DeviceAddress a = Reserve(100);
  const DeviceAddress b = Reserve(5000, 1);
  EXPECT_EQ(a % 4096, 0u) << "the fake's aclrtMalloc is only 64-byte aligned";
  EXPECT_EQ(b % 4096, 0u);
  EXPECT_EQ(driver_->ReserveMemory(0, 0).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(driver_->ReserveMemory(2, 64).error().code, ErrorCode::kInvalidArgument);

  const StreamHandle stream = NewStream();
  std::vector<std::byte> host(256);
  auto misaligned = driver_->CopyHostToDevice(stream, a + 4, host.data(), 64);
  ASSERT_FALSE(misaligned.has_value());
  EXPECT_EQ(misaligned.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(misaligned.error().message.find("64-byte aligned"), std::string::npos);
  EXPECT_EQ(driver_->CopyHostToDevice(stream, a + 4096, host.data(), 64).error().code,
            ErrorCode::kInvalidArgument)
      << "past the reservation";
  EXPECT_EQ(driver_->CopyHostToDevice(stream, b, host.data(), 64).error().code,
            ErrorCode::kInvalidArgument)
      << "a reservation of another device";

  ASSERT_TRUE(driver_->ReleaseMemory(0, a).has_value());
  EXPECT_EQ(driver_->ReleaseMemory(0, a).error().code, ErrorCode::kInvalidArgument);
  ASSERT_TRUE(driver_->ReleaseMemory(1, b).has_value());
  ASSERT_TRUE(driver_->DestroyStream(stream).has_value());
}

TEST_F(AscendDriverTest, CopiesRoundTripWithinAndAcrossDevices) {
  const auto values = Pattern(3000, 7);
  const std::uint64_t bytes = values.size() * sizeof(values[0]);
  const StreamHandle stream = NewStream(0);
  const StreamHandle other = NewStream(1);
  const DeviceAddress src = Reserve(bytes, 0);
  const DeviceAddress same = Reserve(bytes, 0);
  const DeviceAddress peer = Reserve(bytes, 1);

  std::vector<std::uint32_t> upload = values;
  ASSERT_TRUE(driver_->CopyHostToDevice(stream, src, upload.data(), bytes).has_value());
  std::fill(upload.begin(), upload.end(), 0u);  // copied at enqueue: reusable at once
  ASSERT_TRUE(driver_->CopyDeviceToDevice(stream, same, 0, src, bytes).has_value());
  ASSERT_TRUE(driver_->CopyDeviceToDevice(stream, peer, 1, same, bytes).has_value());
  auto synced = driver_->SynchronizeStream(stream, 5s);
  ASSERT_TRUE(synced.has_value()) << synced.error().ToString();

  std::vector<std::uint32_t> downloaded(values.size());
  ASSERT_TRUE(driver_->CopyDeviceToHost(other, downloaded.data(), peer, bytes).has_value());
  synced = driver_->SynchronizeStream(other, 5s);
  ASSERT_TRUE(synced.has_value()) << synced.error().ToString();
  EXPECT_EQ(downloaded, values);

  // Zero bytes is a no-op, as in the simulator.
  EXPECT_TRUE(driver_->CopyDeviceToHost(other, downloaded.data(), peer, 0).has_value());
}

TEST_F(AscendDriverTest, EventsOrderStreamsAndMeasureTime) {
  const StreamHandle producer = NewStream(0);
  const StreamHandle consumer = NewStream(0);
  auto start = driver_->CreateEvent(0);
  auto end = driver_->CreateEvent(0);
  auto never = driver_->CreateEvent(0);
  ASSERT_TRUE(start && end && never);
  EXPECT_TRUE(driver_->SynchronizeEvent(*never, 1ms).has_value()) << "never recorded: complete";
  EXPECT_EQ(driver_->ElapsedTime(*start, *never).error().code, ErrorCode::kUnavailable);

  const auto values = Pattern(1024, 3);
  const std::uint64_t bytes = values.size() * sizeof(values[0]);
  const DeviceAddress buffer = Reserve(bytes, 0);
  Gate gate;
  ASSERT_TRUE(driver_->EnqueueCallback(producer, gate.Blocker()).has_value());
  ASSERT_TRUE(driver_->RecordEvent(*start, producer).has_value());
  ASSERT_TRUE(driver_->CopyHostToDevice(producer, buffer, values.data(), bytes).has_value());
  ASSERT_TRUE(driver_->RecordEvent(*end, producer).has_value());
  ASSERT_TRUE(driver_->StreamWaitEvent(consumer, *end).has_value());
  std::vector<std::uint32_t> downloaded(values.size());
  ASSERT_TRUE(driver_->CopyDeviceToHost(consumer, downloaded.data(), buffer, bytes).has_value());

  gate.WaitEntered();
  auto early = driver_->SynchronizeEvent(*end, 2ms);
  ASSERT_FALSE(early.has_value()) << "the producer is held";
  EXPECT_EQ(early.error().code, ErrorCode::kTimeout);
  EXPECT_EQ(driver_->ElapsedTime(*start, *end).error().code, ErrorCode::kUnavailable);
  gate.Open();

  auto done = driver_->SynchronizeEvent(*end, 5s);
  ASSERT_TRUE(done.has_value()) << done.error().ToString();
  ASSERT_TRUE(driver_->SynchronizeStream(consumer, 5s).has_value());
  EXPECT_EQ(downloaded, values) << "the consumer waited for the producer's copy";
  auto elapsed = driver_->ElapsedTime(*start, *end);
  ASSERT_TRUE(elapsed.has_value()) << elapsed.error().ToString();
  EXPECT_GE(elapsed->count(), 0);

  const StreamHandle elsewhere = NewStream(1);
  EXPECT_EQ(driver_->RecordEvent(*start, elsewhere).error().code, ErrorCode::kInvalidArgument)
      << "an ACL event belongs to its device";
  for (EventHandle event : {*start, *end, *never}) {
    ASSERT_TRUE(driver_->DestroyEvent(event).has_value());
  }
  EXPECT_EQ(driver_->DestroyEvent(*start).error().code, ErrorCode::kInvalidArgument);
}

TEST_F(AscendDriverTest, CallbacksRunInStreamOrderOnADriverThread) {
  const StreamHandle stream = NewStream(1);
  const auto values = Pattern(512, 11);
  const std::uint64_t bytes = values.size() * sizeof(values[0]);
  const DeviceAddress buffer = Reserve(bytes, 1);
  std::vector<std::uint32_t> downloaded(values.size());
  ASSERT_TRUE(driver_->CopyHostToDevice(stream, buffer, values.data(), bytes).has_value());
  ASSERT_TRUE(driver_->CopyDeviceToHost(stream, downloaded.data(), buffer, bytes).has_value());
  struct Seen {
    bool ok = false;
    bool copied = false;  // the data was there when the callback ran
    std::thread::id thread;
  };
  auto seen = std::make_shared<std::promise<Seen>>();
  auto future = seen->get_future();
  ASSERT_TRUE(driver_
                  ->EnqueueCallback(stream,
                                    [seen, &downloaded, &values](const Status& status) {
                                      seen->set_value({status.has_value(), downloaded == values,
                                                       std::this_thread::get_id()});
                                    })
                  .has_value());
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready);
  const Seen result = future.get();
  EXPECT_TRUE(result.ok);
  EXPECT_TRUE(result.copied) << "the copy before the callback had finished when it ran";
  EXPECT_NE(result.thread, std::this_thread::get_id());
  EXPECT_EQ(driver_->EnqueueCallback(stream, nullptr).error().code, ErrorCode::kInvalidArgument);
}

TEST_F(AscendDriverTest, AbortWakesAWaiterAndFailsLaterWork) {
  const StreamHandle stream = NewStream(0);
  Gate gate;
  ASSERT_TRUE(driver_->EnqueueCallback(stream, gate.Blocker()).has_value());
  StatusBox behind;
  ASSERT_TRUE(driver_->EnqueueCallback(stream, behind.Callback()).has_value());
  gate.WaitEntered();

  auto waiter =
      std::async(std::launch::async, [&] { return driver_->SynchronizeStream(stream, 10s); });
  EXPECT_EQ(waiter.wait_for(20ms), std::future_status::timeout) << "the stream is held";
  const auto aborted_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(driver_->AbortStream(stream, Error{ErrorCode::kAborted, "job 7 killed"}).has_value());
  ASSERT_EQ(waiter.wait_for(2s), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - aborted_at, 500ms);
  const Status woke = waiter.get();
  ASSERT_FALSE(woke.has_value());
  EXPECT_EQ(woke.error().code, ErrorCode::kAborted);
  EXPECT_EQ(woke.error().message, "job 7 killed");

  const auto dropped = behind.Wait(0ms);
  ASSERT_TRUE(dropped.has_value()) << "failed at the abort";
  ASSERT_FALSE(dropped->has_value());
  EXPECT_EQ(dropped->error().message, "job 7 killed");

  const DeviceAddress buffer = Reserve(4096, 0);
  std::vector<std::byte> host(64);
  auto later = driver_->CopyHostToDevice(stream, buffer, host.data(), host.size());
  ASSERT_FALSE(later.has_value());
  EXPECT_EQ(later.error().message, "job 7 killed");
  EXPECT_EQ(driver_->EnqueueCallback(stream, [](const Status&) {}).error().message, "job 7 killed");
  gate.Open();
  ASSERT_TRUE(driver_->DestroyStream(stream).has_value());
}

TEST_F(AscendDriverTest, RuntimeDeviceErrorIsReportedForTheDaemonToClassify) {
  const StreamHandle stream = NewStream(1);
  const DeviceAddress buffer = Reserve(4096, 1);
  std::vector<std::uint32_t> values = Pattern(256, 5);
  ASSERT_TRUE(driver_->CopyHostToDevice(stream, buffer, values.data(), 1024).has_value());
  fake().fail_next_sync(507053);

  auto synced = driver_->SynchronizeStream(stream, 5s);
  ASSERT_FALSE(synced.has_value());
  EXPECT_EQ(synced.error().code, ErrorCode::kDeviceFault);
  EXPECT_NE(synced.error().message.find("aclrtSynchronizeStreamWithTimeout"), std::string::npos);
  EXPECT_NE(synced.error().message.find("507053"), std::string::npos) << synced.error().message;
  EXPECT_NE(synced.error().message.find("device 1"), std::string::npos) << synced.error().message;

  ASSERT_TRUE(reports_.WaitFor(1));
  const auto events = reports_.Events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, DriverErrorKind::kVendorCode);
  EXPECT_EQ(events[0].vendor_code, 507053);
  EXPECT_EQ(events[0].code_space, VendorCodeSpace::kAscend);
  EXPECT_EQ(events[0].device, 1);
  ASSERT_TRUE(events[0].stream.has_value());
  EXPECT_EQ(*events[0].stream, stream);

  // The stream stays failed with it until the device is reset.
  EXPECT_EQ(driver_->SynchronizeStream(stream, 1s).error().message, synced.error().message);
  EXPECT_EQ(driver_->CopyHostToDevice(stream, buffer, values.data(), 64).error().code,
            ErrorCode::kDeviceFault);
  ASSERT_TRUE(driver_->ResetDevice(1).has_value());
  EXPECT_TRUE(driver_->SynchronizeStream(stream, 1s).has_value());
  EXPECT_EQ(reports_.Events().size(), 1u);
}

TEST_F(AscendDriverTest, ResetFailsPendingWorkAndKeepsHandles) {
  const StreamHandle stream = NewStream(0);
  const StreamHandle untouched = NewStream(1);
  auto event = driver_->CreateEvent(0);
  ASSERT_TRUE(event.has_value());
  const DeviceAddress old_buffer = Reserve(8192, 0);
  const DeviceAddress kept = Reserve(4096, 1);

  std::future<Result<MemoryAfterReset>> reset;  // before the gate: the gate opens first on the way out
  Gate gate;
  ASSERT_TRUE(driver_->EnqueueCallback(stream, gate.Blocker()).has_value());
  StatusBox behind;
  ASSERT_TRUE(driver_->EnqueueCallback(stream, behind.Callback()).has_value());
  gate.WaitEntered();
  reset = std::async(std::launch::async, [&] { return driver_->ResetDevice(0); });
  const auto dropped = behind.Wait(2s);
  ASSERT_TRUE(dropped.has_value()) << "pending work fails at the reset";
  ASSERT_FALSE(dropped->has_value());
  EXPECT_EQ(dropped->error().code, ErrorCode::kAborted);
  gate.Open();  // the running callback finishes; the reset goes on
  ASSERT_EQ(reset.wait_for(5s), std::future_status::ready);
  const auto reset_status = reset.get();
  ASSERT_TRUE(reset_status.has_value()) << reset_status.error().ToString();
  EXPECT_EQ(*reset_status, MemoryAfterReset::kFreed) << "aclrtResetDevice frees the device's memory";

  // The reset freed device 0's memory; the other device's is untouched.
  std::vector<std::uint32_t> values = Pattern(1024, 9);
  const std::uint64_t bytes = values.size() * sizeof(values[0]);
  auto stale = driver_->CopyHostToDevice(stream, old_buffer, values.data(), bytes);
  ASSERT_FALSE(stale.has_value());
  EXPECT_EQ(stale.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(stale.error().message.find("reset"), std::string::npos) << stale.error().message;
  EXPECT_TRUE(driver_->ReleaseMemory(0, old_buffer).has_value());

  // The same stream and event handles work on the new context.
  const DeviceAddress buffer = Reserve(bytes, 0);
  std::vector<std::uint32_t> downloaded(values.size());
  ASSERT_TRUE(driver_->CopyHostToDevice(stream, buffer, values.data(), bytes).has_value());
  ASSERT_TRUE(driver_->RecordEvent(*event, stream).has_value());
  ASSERT_TRUE(driver_->CopyDeviceToHost(stream, downloaded.data(), buffer, bytes).has_value());
  ASSERT_TRUE(driver_->SynchronizeEvent(*event, 5s).has_value());
  auto synced = driver_->SynchronizeStream(stream, 5s);
  ASSERT_TRUE(synced.has_value()) << synced.error().ToString();
  EXPECT_EQ(downloaded, values);
  ASSERT_TRUE(driver_->CopyHostToDevice(untouched, kept, values.data(), 4096).has_value());
  ASSERT_TRUE(driver_->SynchronizeStream(untouched, 1s).has_value());
}

TEST_F(AscendDriverTest, DestroyingAStreamFailsItsPendingWork) {
  const StreamHandle stream = NewStream(0);
  Gate gate;
  ASSERT_TRUE(driver_->EnqueueCallback(stream, gate.Blocker()).has_value());
  StatusBox behind;
  ASSERT_TRUE(driver_->EnqueueCallback(stream, behind.Callback()).has_value());
  gate.WaitEntered();
  std::thread opener([&] {
    std::this_thread::sleep_for(5ms);
    gate.Open();
  });
  ASSERT_TRUE(driver_->DestroyStream(stream).has_value());
  opener.join();
  const auto dropped = behind.Wait(0ms);
  ASSERT_TRUE(dropped.has_value());
  ASSERT_FALSE(dropped->has_value());
  EXPECT_EQ(dropped->error().code, ErrorCode::kAborted);
  EXPECT_EQ(driver_->SynchronizeStream(stream, 1ms).error().code, ErrorCode::kInvalidArgument);
}

TEST_F(AscendDriverTest, DcmiHealthAndErrorCodesAreReportedOnce) {
  fake().set_health(1, 2);
  const unsigned int codes[] = {0x80E01801u};
  fake().set_error_codes(1, codes, 1);
  ASSERT_TRUE(reports_.WaitFor(2)) << "health and code of device 1";
  // Two more whole polls (both chips' codes read twice) have seen it again.
  const int polled = fake().error_code_reads();
  ASSERT_TRUE(
      rasd::testing::Eventually([&] { return fake().error_code_reads() >= polled + 4; }, 2s));
  auto events = reports_.Events();
  ASSERT_EQ(events.size(), 2u) << "each reported once";
  bool health = false;
  bool code = false;
  for (const auto& event : events) {
    EXPECT_EQ(event.device, 1);
    EXPECT_EQ(event.kind, DriverErrorKind::kVendorCode);
    EXPECT_EQ(event.code_space, VendorCodeSpace::kAscend);
    if (event.vendor_code) {
      code = static_cast<unsigned int>(*event.vendor_code) == 0x80E01801u;
    } else {
      health = event.message.find("DCMI health 2") != std::string::npos;
    }
  }
  EXPECT_TRUE(health);
  EXPECT_TRUE(code);

  fake().set_error_codes(1, codes, 0);
  // Two reads of both chips after the change: one whole poll has seen it.
  const int reads = fake().error_code_reads();
  ASSERT_TRUE(
      rasd::testing::Eventually([&] { return fake().error_code_reads() >= reads + 4; }, 2s));
  fake().set_error_codes(1, codes, 1);
  ASSERT_TRUE(reports_.WaitFor(3)) << "a code that cleared and came back is news";
}

}  // namespace
}  // namespace rasd::drivers
