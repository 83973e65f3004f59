// FaultInjection on a SimulatedEventLoop over a fixture host that fails on
// demand (ErrorHostEnv): every kind lands where it says (the simulator's
// memory, the kernel-log decoder, the EDAC tree, EINJ's files), bad
// arguments get one clear error each, the config's switches are obeyed, and
// a host write that fails is reported without half a fault left behind.

#include "fault_injection.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "rasd/common/error_host_env.h"
#include "rasd/common/simulated_event_loop.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class FaultInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("inject");
    fs::create_directories(dir_ / "host/proc/sys/kernel/random");
    Write("proc/sys/kernel/random/boot_id", "11111111-2222-3333-4444-555555555555\n");
    host_ = std::make_unique<common::ErrorHostEnv>(dir_ / "host", loop_.SharedClock());
    auto store = ras::StateStore::Open(dir_ / "state", loop_.SharedClock());
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    runtime_ = testing::SimRuntime({}, &sim_);
    ASSERT_NE(runtime_, nullptr);
    const Config::Ras sources = testing::NoRasSources();
    ingest_ = std::make_unique<RasIngest>(loop_, *host_, *store_, *runtime_, sources,
                                          [this](SourceBatch batch) {
                                            for (auto& event : batch.events)
                                              delivered_.push_back(std::move(event));
                                          });
    ASSERT_TRUE(ingest_->Start().has_value());
    inject_ = std::make_unique<FaultInjection>(*runtime_, *host_, *ingest_,
                                               Config::Inject{.allow_sources = true});
  }
  void TearDown() override {
    inject_.reset();
    ingest_.reset();
    runtime_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }
  void Write(const std::string& path, const std::string& text) {
    fs::create_directories((dir_ / "host" / path).parent_path());
    std::ofstream(dir_ / "host" / path, std::ios::trunc) << text;
  }
  std::string Read(const std::string& path) {
    std::ifstream in(dir_ / "host" / path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  Error Refused(const nlohmann::json& args) {
    auto done = inject_->Inject(args);
    EXPECT_FALSE(done.has_value()) << args.dump() << " was injected: " << done->dump();
    return done ? Error{} : done.error();
  }

  common::SimulatedEventLoop loop_;
  fs::path dir_;
  std::unique_ptr<common::ErrorHostEnv> host_;
  std::unique_ptr<ras::StateStore> store_;
  drivers::SimDriver* sim_ = nullptr;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<RasIngest> ingest_;
  std::unique_ptr<FaultInjection> inject_;
  std::vector<ras::RasEvent> delivered_;
};

TEST_F(FaultInjectionTest, AnUncorrectedErrorAtAnAddressComesBackAsTheDriversReport) {
  auto done = inject_->Inject({{"kind", "ucna"}, {"device", 1}, {"address", "0x4000"}});
  ASSERT_TRUE(done.has_value()) << done.error().message;
  EXPECT_EQ((*done)["kind"], "ucna");
  EXPECT_EQ((*done)["device"], 1);
  loop_.RunUntilIdle();
  ASSERT_EQ(delivered_.size(), 1u);
  EXPECT_EQ(delivered_[0].severity, ras::Severity::kUcna);
  EXPECT_EQ(delivered_[0].device, 1);
  ASSERT_TRUE(delivered_[0].address.has_value());
  EXPECT_EQ(delivered_[0].address->value, 0x4000u);
  EXPECT_EQ(delivered_[0].time, loop_.GetClock().Wall())
      << "a report without a time of its own is stamped on arrival, on the daemon's clock";
}

TEST_F(FaultInjectionTest, KernelLogTextGoesThroughTheDecoderAndNotIntoAnyRealLog) {
  auto done = inject_->Inject(
      {{"kind", "kmsg"},
       {"text", "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."}});
  ASSERT_TRUE(done.has_value()) << done.error().message;
  EXPECT_EQ((*done)["events"], 1);
  loop_.RunUntilIdle();
  ASSERT_EQ(delivered_.size(), 1u);
  EXPECT_EQ(delivered_[0].vendor_code, 79);
  EXPECT_EQ(delivered_[0].origin, "nvidia_xid");
}

TEST_F(FaultInjectionTest, EdacCountersGrowInTheFixtureTreeAndAFailedWriteLeavesThemAsTheyWere) {
  ASSERT_TRUE(inject_->Inject({{"kind", "edac"}, {"mc", 0}, {"dimm", 2}, {"count", 3}}));
  ASSERT_TRUE(inject_->Inject({{"kind", "edac"}, {"mc", 0}, {"dimm", 2}, {"count", 4}}));
  EXPECT_EQ(Read("sys/devices/system/edac/mc/mc0/dimm2/dimm_ce_count"), "7\n");
  EXPECT_EQ(Read("sys/devices/system/edac/mc/mc0/dimm2/dimm_label"), "MC0_DIMM2\n");

  host_->FailWrites("/sys/devices/system/edac", {ErrorCode::kIoError, "No space left on device"});
  const Error full = Refused({{"kind", "edac"}, {"mc", 0}, {"dimm", 2}});
  EXPECT_EQ(full.code, ErrorCode::kIoError);
  EXPECT_NE(full.message.find("No space left on device"), std::string::npos) << full.message;
  EXPECT_EQ(Read("sys/devices/system/edac/mc/mc0/dimm2/dimm_ce_count"), "7\n");
  EXPECT_EQ(host_->Failures(), 1u);
  host_->Heal();
  ASSERT_TRUE(inject_->Inject({{"kind", "edac"}, {"mc", 0}, {"dimm", 2}}));
  EXPECT_EQ(Read("sys/devices/system/edac/mc/mc0/dimm2/dimm_ce_count"), "8\n");
}

TEST_F(FaultInjectionTest, EinjWritesTheFirmwaresFilesInOrderAndSaysWhyWhenItCannot) {
  if (::geteuid() != 0) GTEST_SKIP() << "EINJ injection is refused to a rasd that is not root";
  EXPECT_EQ(Refused({{"kind", "einj"}, {"address", "0x1000"}}).code, ErrorCode::kPermissionDenied)
      << "inject.allow_hardware is off";
  inject_->SetOptions({.allow_sources = true, .allow_hardware = true});
  const Error missing = Refused({{"kind", "einj"}, {"address", "0x1000"}});
  EXPECT_EQ(missing.code, ErrorCode::kNotSupported);
  EXPECT_NE(missing.message.find("CONFIG_ACPI_APEI_EINJ"), std::string::npos) << missing.message;

  const std::string einj = "sys/kernel/debug/apei/einj/";
  Write(einj + "available_error_type", "0x00000008\tMemory Correctable\n");
  for (const char* file : {"error_type", "param1", "param2", "error_inject"})
    Write(einj + file, "");
  auto done = inject_->Inject({{"kind", "einj"}, {"address", "0x12345000"}});
  ASSERT_TRUE(done.has_value()) << done.error().message;
  EXPECT_EQ(Read(einj + "error_type"), "0x8\n");
  EXPECT_EQ(Read(einj + "param1"), "0x12345000\n");
  EXPECT_EQ(Read(einj + "error_inject"), "1\n");

  // The trigger refused (a firmware that rejects the address): the error
  // names it, and nothing claims the fault was injected.
  host_->FailWrites("/" + einj + "error_inject", {ErrorCode::kInvalidArgument, "Invalid argument"});
  const Error rejected = Refused({{"kind", "einj"}, {"address", "0x12345000"}});
  EXPECT_EQ(rejected.code, ErrorCode::kInvalidArgument);
}

// Silent corruption reaches the simulated device, whose kernels then write
// wrong bits, and nothing reaches the pipeline; a rate of 0 ends it.
TEST_F(FaultInjectionTest, SilentCorruptionSpoilsTheDevicesResultsAndReportsNothing) {
  auto done = inject_->Inject({{"kind", "sdc"}, {"device", 1}, {"rate", 1.0}, {"seed", 3}});
  ASSERT_TRUE(done.has_value()) << done.error().message;
  EXPECT_EQ((*done)["rate"], 1.0);
  EXPECT_EQ((*done)["seed"], 3);
  auto fill = [&](int device) {
    auto stream = runtime_->CreateStream(device, {.owner = "test"});
    EXPECT_TRUE(stream.has_value());
    auto& pool = **runtime_->Pool(device);
    auto buffer = pool.Allocate(64 * sizeof(float), **stream);
    EXPECT_TRUE(buffer.has_value());
    EXPECT_TRUE((*stream)
                    ->Launch("fill", std::vector{drivers::KernelArg::Address(buffer->address),
                                                 drivers::KernelArg::Int(64),
                                                 drivers::KernelArg::Float(2.0f)})
                    .has_value());
    std::vector<float> values(64);
    EXPECT_TRUE(
        (*stream)->CopyToHost(values.data(), buffer->address, 64 * sizeof(float)).has_value());
    EXPECT_TRUE((*stream)->Synchronize(5s).has_value());
    (void)pool.Free(*buffer);
    return static_cast<std::size_t>(std::count(values.begin(), values.end(), 2.0f));
  };
  EXPECT_EQ(fill(1), 0u) << "every element written wrong at rate 1";
  EXPECT_EQ(fill(0), 64u);
  ASSERT_TRUE(inject_->Inject({{"kind", "sdc"}, {"device", 1}, {"rate", 0}}).has_value());
  EXPECT_EQ(fill(1), 64u);
  loop_.RunUntilIdle();
  EXPECT_TRUE(delivered_.empty()) << "nothing is reported";

  EXPECT_EQ(Refused({{"kind", "sdc"}, {"device", 1}}).message,
            "inject sdc needs --rate, the fraction of elements written with a bit flipped (0 to "
            "1; 0 ends it)");
  EXPECT_EQ(Refused({{"kind", "sdc"}, {"device", 1}, {"rate", 2}}).code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(Refused({{"kind", "sdc"}, {"device", 1}, {"rate", 0.1}, {"kernel", "nope"}}).message,
            "no kernel 'nope'");
  EXPECT_EQ(Refused({{"kind", "ce"}, {"device", 1}, {"rate", 0.1}}).message,
            "inject: --rate and --kernel go with sdc");
}

TEST_F(FaultInjectionTest, BadArgumentsAndSwitchedOffKindsGetOneClearErrorEach) {
  EXPECT_EQ(Refused({{"kind", "melt"}}).code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(Refused({{"device", 0}}).code, ErrorCode::kInvalidArgument) << "no kind";
  EXPECT_EQ(Refused({{"kind", "ce"}}).code, ErrorCode::kInvalidArgument) << "no device";
  EXPECT_EQ(Refused({{"kind", "ce"}, {"device", 9}}).code, ErrorCode::kNotFound);
  EXPECT_EQ(Refused({{"kind", "ce"}, {"device", 0}, {"address", "zz"}}).code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(Refused({{"kind", "ce"}, {"device", 0}, {"colour", "red"}}).code,
            ErrorCode::kInvalidArgument)
      << "an unknown argument";
  EXPECT_EQ(Refused({{"kind", "uce"}, {"device", 0}, {"via", "nvlink"}}).code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(Refused({{"kind", "edac"}, {"mc", 0}}).code, ErrorCode::kInvalidArgument);

  inject_->SetOptions({});
  EXPECT_EQ(Refused({{"kind", "edac"}, {"mc", 0}, {"dimm", 0}}).code, ErrorCode::kPermissionDenied);
  EXPECT_FALSE(fs::exists(dir_ / "host/sys/devices/system/edac")) << "nothing was written";
  EXPECT_EQ(Refused({{"kind", "hwpoison"}}).code, ErrorCode::kPermissionDenied);
  loop_.RunUntilIdle();
  EXPECT_TRUE(delivered_.empty()) << "no refused injection reached the pipeline";
}

}  // namespace
}  // namespace rasd::daemon
