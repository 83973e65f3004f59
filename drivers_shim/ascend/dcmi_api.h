#pragma once

// The DCMI entry points rasd resolves from libdcmi at run time.

#include "dcmi_types.h"
#include "rasd/common/dynamic_library.h"
#include "rasd/common/result.h"

namespace rasd::drivers::ascend {

struct DcmiApi {
  // Required.
  decltype(&::dcmi_init) init = nullptr;
  decltype(&::dcmi_get_card_num_list) get_card_num_list = nullptr;
  decltype(&::dcmi_get_device_num_in_card) get_device_num_in_card = nullptr;
  decltype(&::dcmi_get_device_logic_id) get_device_logic_id = nullptr;
  decltype(&::dcmi_get_device_health) get_device_health = nullptr;
  decltype(&::dcmi_get_device_errorcode_v2) get_device_errorcode = nullptr;
  // Optional: the PCI address and die id are left empty without them.
  decltype(&::dcmi_get_device_pcie_info_v2) get_device_pcie_info = nullptr;
  decltype(&::dcmi_get_device_die_v2) get_device_die = nullptr;
  // Optional: without it the chips' RoCE ports are not watched.
  decltype(&::dcmi_get_device_network_health) get_device_network_health = nullptr;

  // kUnavailable naming the first required symbol `library` lacks. The
  // library must outlive the result.
  static Result<DcmiApi> Load(const common::DynamicLibrary& library);
};

}  // namespace rasd::drivers::ascend
