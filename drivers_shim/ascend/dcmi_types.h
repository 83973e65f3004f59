#pragma once

// The few DCMI (Huawei's device management interface, libdcmi.so) entry
// points rasd uses, declared here because no DCMI header is available to the
// build. Prototypes and structure layouts are those of dcmi_interface_api.h
// as the Ascend "DCMI API reference" (device management interfaces)
// documents them. Only pointers to these are resolved at run time; the test
// fake defines them. Nothing here depends on rasd.

extern "C" {

// dcmi_get_device_pcie_info_v2's answer.
struct dcmi_pcie_info_all {
  unsigned int venderid;
  unsigned int subvenderid;
  unsigned int deviceid;
  unsigned int subdeviceid;
  int domain;
  unsigned int bdf_busid;
  unsigned int bdf_deviceid;
  unsigned int bdf_funcid;
  unsigned char reserve[32];
};

enum dcmi_die_type { NDIE = 0, VDIE = 1 };

// dcmi_get_device_die_v2's answer: the chip's die id, DIE_ID_COUNT words.
struct dcmi_die_id {
  unsigned int soc_die[5];
};

// dcmi_get_device_network_health's answer: the RoCE port's reachability
// of its detection address, as the chip's own prober sees it.
enum dcmi_rdfx_detect_result {
  DCMI_RDFX_DETECT_OK = 0,
  DCMI_RDFX_DETECT_SOCK_FAIL = 1,
  DCMI_RDFX_DETECT_RECV_TIMEOUT = 2,
  DCMI_RDFX_DETECT_UNREACH = 3,
  DCMI_RDFX_DETECT_TIME_EXCEEDED = 4,
  DCMI_RDFX_DETECT_FAULT = 5,
  DCMI_RDFX_DETECT_INIT = 6,
  DCMI_RDFX_DETECT_THREAD_ERR = 7,
  DCMI_RDFX_DETECT_IP_SET = 8,
  DCMI_RDFX_DETECT_MAX = 0xFF
};

int dcmi_init(void);
int dcmi_get_card_num_list(int* card_num, int* card_list, int list_len);
int dcmi_get_device_num_in_card(int card_id, int* device_num);
int dcmi_get_device_logic_id(int* device_logic_id, int card_id, int device_id);
int dcmi_get_device_health(int card_id, int device_id, unsigned int* health);
int dcmi_get_device_errorcode_v2(int card_id, int device_id, int* error_count,
                                 unsigned int* error_code_list, unsigned int list_len);
int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all* pcie_info);
int dcmi_get_device_network_health(int card_id, int device_id,
                                   enum dcmi_rdfx_detect_result* result);
int dcmi_get_device_die_v2(int card_id, int device_id, enum dcmi_die_type input_type,
                           struct dcmi_die_id* die_id);

}  // extern "C"

namespace rasd::drivers::ascend {

// DCMI returns at most this many error codes per chip.
inline constexpr int kDcmiMaxErrorCodes = 128;
// The most cards dcmi_get_card_num_list reports.
inline constexpr int kDcmiMaxCards = 64;
// dcmi_get_device_health's value for a chip that is not there.
inline constexpr unsigned int kDcmiHealthAbsent = 0xFFFFFFFFu;

}  // namespace rasd::drivers::ascend
