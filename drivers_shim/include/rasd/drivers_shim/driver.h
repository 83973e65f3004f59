#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/drivers_shim/probe_calls.h"

namespace rasd::drivers {

// A device virtual address, as CUdeviceptr or an ACL device pointer.
using DeviceAddress = std::uint64_t;

// What the runtime needs to know about one device, as the vendor library
// reports it (cuDeviceGetAttribute / aclrtGetDeviceInfo / the simulator).
struct DeviceProperties {
  int index = 0;        // the driver's ordinal
  std::string name;     // "NVIDIA H200", "Ascend 910B", "rasd-sim"
  std::string vendor;   // "nvidia", "huawei", "sim"
  std::string pci_bdf;  // "0000:07:00.0"; empty where there is no PCI device
  std::string uuid;     // stable across reboots where the vendor gives one
  std::uint64_t memory_bytes = 0;
  // The unit in which the device retires memory (a page for the simulator,
  // the row-remap / page-retirement unit on real GPUs).
  std::uint64_t retire_granularity = 4096;
};

// Opaque handles: the driver owns what they name.
struct StreamHandle {
  std::uint64_t value = 0;
  bool operator==(const StreamHandle&) const = default;
};
struct EventHandle {
  std::uint64_t value = 0;
  bool operator==(const EventHandle&) const = default;
};

struct Dim3 {
  std::uint32_t x = 1, y = 1, z = 1;
};

// Grid and block as cuLaunchKernel takes them. The simulator runs a kernel
// as CPU code over the whole grid and ignores the split.
struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  std::uint32_t shared_bytes = 0;
};

enum class ArgKind : std::uint8_t { kAddress, kInt, kFloat };

// One kernel argument by value, like an entry of cuLaunchKernel's
// kernelParams. Fixed size, so a launch copies its arguments without
// allocating.
struct KernelArg {
  ArgKind kind = ArgKind::kInt;
  union {
    DeviceAddress address;
    std::int64_t integer;
    float real;
  };

  KernelArg() : integer(0) {}
  static KernelArg Address(DeviceAddress value) {
    KernelArg arg;
    arg.kind = ArgKind::kAddress;
    arg.address = value;
    return arg;
  }
  static KernelArg Int(std::int64_t value) {
    KernelArg arg;
    arg.kind = ArgKind::kInt;
    arg.integer = value;
    return arg;
  }
  static KernelArg Float(float value) {
    KernelArg arg;
    arg.kind = ArgKind::kFloat;
    arg.real = value;
    return arg;
  }
};

inline constexpr std::size_t kMaxKernelArgs = 12;

// A kernel the driver can launch by name, and the arguments it takes.
struct KernelSignature {
  std::string name;
  std::vector<ArgKind> args;
  std::string description;  // argument meaning, for people
};

// What a driver reports asynchronously, as NVML events / Xid or the Ascend
// exception callback do.
enum class DriverErrorKind : std::uint8_t {
  kCorrectedEcc,    // corrected by hardware at `address`
  kUncorrectedEcc,  // uncorrected at `address`; `consumed` when a kernel or copy read it
  kStickyFault,     // the device context failed; every call fails until reset (CUDA 719)
  kFellOffBus,      // the device is gone; every call fails (Xid 79)
  kLinkError,       // the link to `peer_device` failed
  kHang,            // the device stopped completing work (rasd's heartbeat missed its deadlines)
  kVendorCode,      // a vendor error code (`vendor_code` in `code_space`) that
                    // rasd's code tables classify: an NVIDIA Xid, an Ascend
                    // runtime or DCMI code
  // The device's own interconnect (`link`: an NVLink, an HCCS or RoCE port),
  // as a monitoring library polls it. Not faults of the device's compute:
  // the daemon takes the device out of collectives while a link is down.
  kLinkDown,       // `link` is down (reported when it goes down, and once at start)
  kLinkUp,         // `link` is up again
  kLinkCorrected,  // `count` errors `link` corrected (CRC, replay, recovery): `link.counter`
};

// Which interconnect a kLink* report is about.
enum class LinkKind : std::uint8_t { kNvlink, kHccs, kRoce };
// "NVLink", "HCCS", "RoCE".
std::string_view LinkKindName(LinkKind kind);

struct DeviceLink {
  LinkKind kind = LinkKind::kNvlink;
  unsigned index = 0;   // NVML's link number; the port for HCCS / RoCE
  std::string counter;  // kLinkCorrected: "replay", "recovery", "crc_flit", "crc_data", "ecc_data"
  bool operator==(const DeviceLink&) const = default;
};

// Which table classifies a kVendorCode report.
enum class VendorCodeSpace : std::uint8_t { kNone, kNvidiaXid, kAscend };

std::string_view DriverErrorKindName(DriverErrorKind kind);

struct DriverErrorEvent {
  // The driver's ordinal; -1 for a report of a monitoring library (NVML)
  // that names the device only by `pci_bdf`.
  int device = 0;
  std::string pci_bdf;
  DriverErrorKind kind = DriverErrorKind::kCorrectedEcc;
  std::optional<DeviceAddress> address;
  bool consumed = false;
  // Uncorrected, not consumed, and the hardware says acting is optional
  // (a patrol-scrub find the OS may recover from): SRAO rather than UCNA.
  bool action_optional = false;
  std::optional<StreamHandle> stream;  // the stream whose work consumed the error
  std::optional<int> peer_device;
  std::optional<int> vendor_code;
  VendorCodeSpace code_space = VendorCodeSpace::kNone;
  // The driver's own recovery action, where the report carries one (NVML's
  // recovery-action field, with vendor_code 154 as the Xid that prints it).
  std::optional<int> vendor_action;
  std::uint64_t count = 1;  // errors this report stands for (a counter's increase)
  std::string message;
  // When the hardware saw it, where the vendor says; left empty, the
  // receiver stamps it on arrival from its own clock (the drivers read none).
  std::chrono::system_clock::time_point time;
  std::optional<DeviceLink> link;  // the kLink* kinds
};

using ErrorListener = std::function<void(const DriverErrorEvent&)>;
// Runs on a driver thread when the stream reaches it, with the stream's
// status at that point (cuStreamAddCallback). Must not block for long.
using StreamCallback = std::function<void(const Status&)>;

// Device faults injected on demand, as `rasctl inject` and the tests use
// them. Each fault is reported through the channels a real one takes
// (returned errors, the stream status, the error listener), so the runtime
// handles it as it would on hardware. Device indices are the driver's own
// numbering, the one EnumerateDevices reports.
//
// Errors: kInvalidArgument for an unknown device (and for a link from a
// device to itself); kNotSupported for a device whose backend cannot inject
// faults (a CompositeDriver's device of such a backend; the message names
// it).
//
// Ownership and lifetime: the driver that returns it from Faults() owns it;
// it lives as long as that driver. It is never deleted through this
// interface.
//
// Thread-safety: every method may be called from any thread, like the
// driver's own.
class FaultInjector {
 public:
  // A corrected ECC error at `address`: reported, data intact.
  virtual Status InjectCorrectedEcc(int device, DeviceAddress address) = 0;
  // An uncorrected ECC error: the page holding `address` is poisoned and
  // reported. A later kernel or copy that reads it fails (kDeviceFault),
  // fails its stream, and is reported again with consumed=true and the
  // stream, so that the runtime can find and stop exactly that consumer.
  // The poison is a hardware defect: it outlives a reset.
  virtual Status InjectUncorrectedEcc(int device, DeviceAddress address) = 0;
  // The same, reported as action-optional (a patrol scrub found it).
  virtual Status InjectActionOptionalEcc(int device, DeviceAddress address) = 0;
  // The page holding `address` is poisoned and nothing notices until it is
  // read: the read fails and is reported (consumed=true, an SRAR), as a
  // real error found only when its data is used.
  virtual Status InjectLatentUncorrectedEcc(int device, DeviceAddress address) = 0;
  // The device context fails (CUDA error 719): every call and all pending
  // work on the device fail with kDeviceFault until ResetDevice.
  virtual Status InjectStickyFault(int device) = 0;
  // The device stops making progress: streams keep accepting work but run
  // none of it until ResetDevice. Nothing is reported: only timeouts tell.
  virtual Status InjectHang(int device) = 0;
  // The device computes wrong results only under load: while another stream
  // of the device is running an operation at the same moment, a copy back to
  // the host comes back with one bit flipped (a marginal power rail or a
  // thermal fault that one operation at a time never shows). Nothing is
  // reported, and a reset does not cure it (a hardware defect): only a test
  // that loads several streams at once and checks the results finds it.
  virtual Status InjectLoadFault(int device) = 0;
  // Silent data corruption: from now on, one bit is flipped in a fraction
  // `rate` (0 to 1) of the 32-bit elements that kernels on the device write
  // (every kernel, or only `kernel` where it is not empty), at places drawn
  // from `seed`, so that a run is repeatable. Nothing is reported, and a
  // reset does not cure it (a defect of the chip's logic): only a result
  // checked against a known answer, or against another device's, finds it.
  // A rate of 0 ends it. kInvalidArgument for a rate outside [0, 1] or a
  // kernel the device does not have; kNotSupported where the backend
  // cannot corrupt its results.
  virtual Status InjectSilentCorruption(int device, double rate, std::string_view kernel,
                                        std::uint64_t seed) {
    (void)device;
    (void)rate;
    (void)kernel;
    (void)seed;
    return Fail(ErrorCode::kNotSupported, "this backend cannot corrupt its results");
  }
  // The device falls off the bus (Xid 79): every call fails with
  // kDeviceFault, pending work fails, and no reset brings it back.
  virtual Status InjectFallOffBus(int device) = 0;
  // The link between two devices fails: peer copies between them fail until
  // either is reset.
  virtual Status InjectLinkError(int device_a, int device_b) = 0;
  // The link between two devices goes down (`up` false) or comes back,
  // reported by nothing: for a simulator whose link state is shown where a
  // real one's is (the daemon's simulated sysfs tree, read by the RDMA
  // poller). Copies between them fail while it is down, as after
  // InjectLinkError. kNotSupported where the backend has no such link.
  virtual Status SetLinkState(int device_a, int device_b, bool up) {
    (void)device_a;
    (void)device_b;
    (void)up;
    return Fail(ErrorCode::kNotSupported, "this backend has no silent link state");
  }
  // The NVLink between two devices goes down (`up` false) or comes back,
  // reported as NVML's poll reports a real one: a kLinkDown / kLinkUp of
  // each device naming its link to the other (DeviceLink{kNvlink, the
  // peer's index}). Copies between them fail while it is down.
  // kNotSupported where the backend has no such link.
  virtual Status InjectNvlinkState(int device_a, int device_b, bool up) {
    (void)device_a;
    (void)device_b;
    (void)up;
    return Fail(ErrorCode::kNotSupported, "this backend has no simulated NVLinks");
  }
  // The device's health and counter queries (DeviceQueries) stop returning:
  // every one of them, or only `query` where it is not empty, as a wedged
  // driver's do, until ClearWedge. Nothing is reported. kInvalidArgument for
  // a query the device does not have; kNotSupported where the backend has no
  // queries to wedge.
  virtual Status InjectWedge(int device, std::string_view query) {
    (void)device;
    (void)query;
    return Fail(ErrorCode::kNotSupported, "this backend has no queries to wedge");
  }
  // The device's wedged queries return again.
  virtual Status ClearWedge(int device) {
    (void)device;
    return Fail(ErrorCode::kNotSupported, "this backend has no queries to wedge");
  }

 protected:
  virtual ~FaultInjector() = default;
};

// A device's own health and error-counter queries, as its vendor's
// monitoring library answers them (nvmlDeviceGetTotalEccErrors,
// dcmi_get_device_health, aclrtQueryDeviceStatus). The daemon runs them on a
// thread of its own and watches how long each takes: a query that never
// returns is a wedged driver, which would otherwise leave the device
// unmonitored while it looks quiet.
//
// Ownership and lifetime: the driver that returns it from Queries() owns it;
// it lives as long as that driver. A driver whose query can block (the
// simulator's wedge) releases it when destroyed and waits for the caller to
// leave, so that a thread left inside a query may outlive its caller.
//
// Thread-safety: every method may be called from any thread.
class DeviceQueries {
 public:
  // The device's queries, named as the vendor's headers spell them.
  // Empty for a device without any (kInvalidArgument never: a device of a
  // backend without queries in a CompositeDriver has none).
  virtual std::vector<std::string> Names(int device) const = 0;
  // Runs one query; its answer is a count or the vendor's health code.
  // kInvalidArgument for an unknown device or query.
  virtual Result<std::uint64_t> Run(int device, std::string_view query) = 0;

 protected:
  virtual ~DeviceQueries() = default;
};

// What a device reset did to the memory reserved on the device.
enum class MemoryAfterReset {
  kKept,   // every reservation is as it was (the simulator; a reset that found nothing to repair)
  kFreed,  // every reservation is gone with the context the reset destroyed
};

// The boundary between rasd and a vendor's device library. Everything vendor
// specific (CUDA driver API + NVML, Ascend ACL + DCMI, the CPU simulator)
// lives behind it, so the runtime above never includes a vendor header.
//
// The model is the CUDA driver API's: memory reserved per device at device
// addresses; streams that run their work in order, asynchronously to the
// caller; events recorded on a stream and waited on by another; host
// callbacks; errors that are either returned at once (bad arguments, a lost
// device) or reported asynchronously (through the stream's status and the
// error listener).
//
// Errors: kInvalidArgument for bad handles and arguments; kOutOfMemory;
// kDeviceFault for a device whose context has failed or that is lost (the
// message says which); kTimeout; kAborted for work dropped by AbortStream or
// ResetDevice; kNotSupported for what a backend cannot do.
//
// Thread-safety: every method may be called from any thread. Handles must
// not be used after they are destroyed.
class Driver {
 public:
  virtual ~Driver() = default;

  // Short stable name: "sim", "cuda", "ascend".
  virtual std::string_view Name() const = 0;

  // The devices this driver can see, in ordinal order. kUnavailable when the
  // vendor library is present but has no usable device.
  virtual Result<std::vector<DeviceProperties>> EnumerateDevices() = 0;

  // The kernels LaunchKernel accepts, with their arguments.
  virtual std::vector<KernelSignature> Kernels() const = 0;

  // Reserves `bytes` of device memory (cuMemAlloc); the range is aligned to
  // the device's retire granularity.
  virtual Result<DeviceAddress> ReserveMemory(int device, std::uint64_t bytes) = 0;
  // True when `address` names the same byte of `device`'s memory in every
  // run (the simulator's fixed layout), so that a page retired in an
  // earlier run can be kept out before an arena holds it again. Real
  // drivers hand out virtual addresses and keep their own retirement
  // (page retirement, row remapping) across reboots: false.
  virtual bool IsStableDeviceAddress(int /*device*/, DeviceAddress /*address*/) const {
    return false;
  }
  // Returns a whole reservation; `base` is what ReserveMemory returned.
  virtual Status ReleaseMemory(int device, DeviceAddress base) = 0;

  virtual Result<StreamHandle> CreateStream(int device) = 0;
  // Fails the stream's pending work with kAborted and releases it.
  virtual Status DestroyStream(StreamHandle stream) = 0;

  // Enqueue in stream order; they return before the work runs. `src`/`dst`
  // host buffers must stay valid until the work has run (a callback or
  // synchronize after it says when). A device-to-device copy may cross
  // devices (peer copy).
  virtual Status CopyHostToDevice(StreamHandle stream, DeviceAddress dst, const void* src,
                                  std::uint64_t bytes) = 0;
  virtual Status CopyDeviceToHost(StreamHandle stream, void* dst, DeviceAddress src,
                                  std::uint64_t bytes) = 0;
  virtual Status CopyDeviceToDevice(StreamHandle stream, DeviceAddress dst, int dst_device,
                                    DeviceAddress src, std::uint64_t bytes) = 0;
  virtual Status LaunchKernel(StreamHandle stream, std::string_view kernel,
                              const LaunchConfig& config, std::span<const KernelArg> args) = 0;
  virtual Status EnqueueCallback(StreamHandle stream, StreamCallback callback) = 0;

  virtual Result<EventHandle> CreateEvent(int device) = 0;
  virtual Status DestroyEvent(EventHandle event) = 0;
  // The event completes when the stream's work enqueued before it has run.
  virtual Status RecordEvent(EventHandle event, StreamHandle stream) = 0;
  // Work enqueued on `stream` after this waits for the event's last record.
  virtual Status StreamWaitEvent(StreamHandle stream, EventHandle event) = 0;
  virtual Status SynchronizeEvent(EventHandle event, std::chrono::nanoseconds timeout) = 0;
  // Time between two completed events (cuEventElapsedTime).
  virtual Result<std::chrono::nanoseconds> ElapsedTime(EventHandle start, EventHandle end) = 0;

  // Waits until all work enqueued so far has run. Returns the stream's first
  // asynchronous error, kTimeout, or kAborted when the stream is aborted
  // meanwhile.
  virtual Status SynchronizeStream(StreamHandle stream, std::chrono::nanoseconds timeout) = 0;
  // Fails every operation that has not started with `reason` and wakes every
  // waiter; later work on the stream fails with the same reason. Work a
  // device has already started may still finish (no vendor API cancels a
  // running kernel), and the dropped callbacks run only after it has: a
  // callback that frees memory to others (the pool's) must not run while a
  // kernel of the stream still writes it.
  virtual Status AbortStream(StreamHandle stream, const Error& reason) = 0;

  // Resets the device: pending work on it fails with kAborted and a sticky
  // fault or hang is cleared. A device that fell off the bus stays lost.
  // Says whether the device's reservations outlived the reset: where the
  // vendor's reset frees them (aclrtResetDevice, cuDevicePrimaryCtxReset),
  // kFreed, and the caller must forget them (never ReleaseMemory them: their
  // addresses may be handed out again by the next ReserveMemory). A reset
  // that freed them and then failed leaves that to the next one that
  // succeeds: it says kFreed.
  virtual Result<MemoryAfterReset> ResetDevice(int device) = 0;

  // Replaces the listener for asynchronous error reports. It is called on
  // driver threads and must not call back into the driver.
  virtual void SetErrorListener(ErrorListener listener) = 0;

  // The fault injector of this driver's devices; null where the backend
  // cannot inject faults (real hardware: CUDA, Ascend). Owned by the driver.
  virtual FaultInjector* Faults() { return nullptr; }
  // The devices' health and counter queries; null where the backend's
  // monitor runs its own (CUDA's NVML monitor) or there are none. Owned by
  // the driver.
  virtual DeviceQueries* Queries() { return nullptr; }
  // True where the driver polls its devices' health on threads of its own
  // (Ascend's DCMI monitor); RunningCalls then lists the vendor calls about
  // one device those threads are inside now, named by the device's PCI
  // address, so that the daemon can tell a call that never returns (a
  // wedged driver) from a quiet device. Any thread.
  virtual bool MonitorsDevices() const { return false; }
  virtual std::vector<ProbeCalls::Call> RunningCalls() const { return {}; }
};

}  // namespace rasd::drivers
