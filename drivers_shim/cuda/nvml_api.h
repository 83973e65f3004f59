#pragma once

// The few NVML types and entry points rasd uses, declared here because no
// NVML header ships with Debian: layouts and values as NVIDIA's nvml.h
// documents them (NVML API reference, "Device Queries", "Event Handling
// Methods"). Only pointers to these are resolved at run time.

#include <cstdint>

#include "rasd/common/dynamic_library.h"

namespace rasd::drivers::nvml {

using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorGpuIsLost = 15;

struct DeviceOpaque;
using Device = DeviceOpaque*;  // nvmlDevice_t
struct EventSetOpaque;
using EventSet = EventSetOpaque*;  // nvmlEventSet_t

// nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 fills it.
struct PciInfo {
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];
};

// nvmlEventData_t.
struct EventData {
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the Xid for an Xid event (999: unknown)
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

// nvmlProcessInfo_v1_t, as the unversioned nvmlDeviceGetComputeRunningProcesses
// of older drivers fills it.
struct ProcessInfoV1 {
  unsigned int pid;
  unsigned long long used_gpu_memory;
};

// nvmlProcessInfo_v2_t (nvmlDeviceGetComputeRunningProcesses_v2): with the
// MIG instance ids (0xFFFFFFFF without MIG). The _v3 call is not used: its
// struct gained a field in some headers and not in others.
struct ProcessInfoV2 {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

inline constexpr unsigned long long kEventTypeSingleBitEccError = 0x1;
inline constexpr unsigned long long kEventTypeDoubleBitEccError = 0x2;
inline constexpr unsigned long long kEventTypeXidCriticalError = 0x8;

inline constexpr int kMemoryErrorCorrected = 0;  // nvmlMemoryErrorType_t
inline constexpr int kMemoryErrorUncorrected = 1;
inline constexpr int kVolatileEcc = 0;         // nvmlEccCounterType_t
inline constexpr int kRetiredMultipleSbe = 0;  // nvmlPageRetirementCause_t
inline constexpr int kRetiredDoubleBitEcc = 1;

// NVLink: links are numbered 0..kNvlinkMaxLinks-1 (NVML_NVLINK_MAX_LINKS in
// current headers); a link the GPU does not have answers NOT_SUPPORTED or
// INVALID_ARGUMENT. nvmlDeviceGetNvLinkState's isActive is an
// nvmlEnableState_t (1: enabled, the link is up).
inline constexpr unsigned kNvlinkMaxLinks = 18;
inline constexpr int kEnableStateEnabled = 1;
// nvmlNvLinkErrorCounter_t, with the names rasd reports them by.
inline constexpr int kNvlinkErrorCounters = 5;
inline constexpr const char* kNvlinkErrorCounterNames[kNvlinkErrorCounters] = {
    "replay",    // NVML_NVLINK_ERROR_DL_REPLAY
    "recovery",  // NVML_NVLINK_ERROR_DL_RECOVERY
    "crc_flit",  // NVML_NVLINK_ERROR_DL_CRC_FLIT
    "crc_data",  // NVML_NVLINK_ERROR_DL_CRC_DATA
    "ecc_data",  // NVML_NVLINK_ERROR_DL_ECC_DATA
};

// nvmlFieldValue_t, for nvmlDeviceGetFieldValues: the caller sets
// field_id; NVML fills the rest, with each field's own return code.
union FieldValueData {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  int siVal;
  unsigned short usVal;
};
struct FieldValue {
  unsigned int field_id;
  unsigned int scope_id;
  long long timestamp;
  long long latency_usec;
  int value_type;  // nvmlValueType_t
  Return nvml_return;
  FieldValueData value;
};
// NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: the driver's verdict on what the GPU
// needs (nvmlDeviceGpuRecoveryAction_t: 0 none, 1 GPU reset, 2 node
// reboot, 3 drain P2P, 4 drain and reset, ...), the value Xid 154 prints.
inline constexpr unsigned kFieldGpuRecoveryAction = 230;

// The entry points, resolved from the loaded library.
struct Api {
  common::DynamicLibrary library;

  Return (*Init)() = nullptr;  // nvmlInit_v2
  Return (*Shutdown)() = nullptr;
  const char* (*ErrorString)(Return) = nullptr;
  Return (*DeviceGetCount)(unsigned int*) = nullptr;                  // _v2
  Return (*DeviceGetHandleByIndex)(unsigned int, Device*) = nullptr;  // _v2
  Return (*DeviceGetName)(Device, char*, unsigned int) = nullptr;
  Return (*DeviceGetUuid)(Device, char*, unsigned int) = nullptr;
  Return (*DeviceGetPciInfo)(Device, PciInfo*) = nullptr;  // _v3
  Return (*DeviceGetSupportedEventTypes)(Device, unsigned long long*) = nullptr;
  Return (*DeviceRegisterEvents)(Device, unsigned long long, EventSet) = nullptr;
  Return (*EventSetCreate)(EventSet*) = nullptr;
  Return (*EventSetWait)(EventSet, EventData*, unsigned int) = nullptr;  // _v2
  Return (*EventSetFree)(EventSet) = nullptr;
  Return (*DeviceGetTotalEccErrors)(Device, int, int, unsigned long long*) = nullptr;
  Return (*DeviceGetRetiredPages)(Device, int, unsigned int*, unsigned long long*) = nullptr;
  Return (*DeviceGetRemappedRows)(Device, unsigned int*, unsigned int*, unsigned int*,
                                  unsigned int*) = nullptr;
  Return (*DeviceGetPcieReplayCounter)(Device, unsigned int*) = nullptr;
  // Optional (null where the library lacks them): the processes computing
  // on a GPU, by the newest of the two that the library has.
  Return (*DeviceGetComputeRunningProcessesV2)(Device, unsigned int*, ProcessInfoV2*) = nullptr;
  Return (*DeviceGetComputeRunningProcessesV1)(Device, unsigned int*, ProcessInfoV1*) = nullptr;
  // Optional, both or neither: NVLink state and error counters.
  Return (*DeviceGetNvLinkState)(Device, unsigned int, int*) = nullptr;
  Return (*DeviceGetNvLinkErrorCounter)(Device, unsigned int, int, unsigned long long*) = nullptr;
  // Optional: field values (the recovery action), drivers from R555 on.
  Return (*DeviceGetFieldValues)(Device, int, FieldValue*) = nullptr;

  // Loads `library_name` and resolves every entry point: kUnavailable
  // naming what is missing (of those that are not optional).
  static Result<Api> Load(const std::string& library_name);

  // "nvmlFoo: <NVML's text> (code)".
  std::string Describe(const char* call, Return code) const;
};

}  // namespace rasd::drivers::nvml
