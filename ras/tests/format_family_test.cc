// One case per format family the decoders were written against: lines made
// from the printk format strings (kernel 3.10 to 6.x), util-linux dmesg's
// and journalctl's prefixes, and the output code of mcelog, rasdaemon,
// ras-mc-ctl, amdgpu's ACA dump and npu-smi. The real-record corpora
// (tests/data) measure the same decoders on what
// machines actually printed.

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "rasd/ras/kernel_log_scanner.h"

namespace rasd::ras {
namespace {

struct FamilyCase {
  const char* family;
  const char* text;
  const char* origin;
  Severity severity;
  std::optional<std::string> pci_bdf = std::nullopt;
  std::optional<std::string> address = std::nullopt;
  std::optional<int> mc = std::nullopt;
  std::optional<int> xid = std::nullopt;
};

void PrintTo(const FamilyCase& c, std::ostream* out) { *out << c.family; }

class FormatFamilyTest : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(FormatFamilyTest, DecodesTheFamilysFields) {
  const FamilyCase& c = GetParam();
  const auto main = MainRecord(ScanKernelLog(c.text));
  ASSERT_TRUE(main.has_value()) << "nothing recognised in:\n" << c.text;
  EXPECT_EQ(main->origin, c.origin) << c.text;
  EXPECT_EQ(SeverityName(main->severity), SeverityName(c.severity)) << c.text;
  EXPECT_EQ(main->pci_bdf, c.pci_bdf) << c.text;
  EXPECT_EQ(main->address ? std::optional<std::string>(main->address->printed) : std::nullopt,
            c.address)
      << c.text;
  EXPECT_EQ(main->mc, c.mc) << c.text;
  EXPECT_EQ(main->xid, c.xid) << c.text;
}

const FamilyCase kCases[] = {
    // Stamps and prefixes in front of one EDAC line.
    {"dmesg-reltime",
     "[May19 19:57] EDAC MC0: 1 CE memory read error on DIMM_A1 (channel:0 slot:0 page:0x1234 "
     "offset:0x40 grain:32 syndrome:0x0)",
     "edac", Severity::kCe, std::nullopt, "0x1234040", 0},
    {"dmesg-delta",
     "[  +0.000127] EDAC MC1: 1 UE memory read error on DIMM_B1 (page:0x10 offset:0x0 grain:32)",
     "edac", Severity::kUce, std::nullopt, "0x10000", 1},
    {"dmesg-iso",
     "2024-05-19T19:57:01,123456+00:00 EDAC MC0: 2 CE memory read error on x (page:0x1 offset:0x2 "
     "grain:8)",
     "edac", Severity::kCe, std::nullopt, "0x1002", 0},
    {"dmesg-decode",
     "kern  :warn  : [  100.000001] EDAC MC0: 1 CE on mc#0csrow#1channel#0 (csrow:1 channel:0 "
     "page:0xcaed59 offset:0x8e0 grain:64 syndrome:0x100)",
     "edac", Severity::kCe, std::nullopt, "0xcaed598e0", 0},
    {"journal-ru",
     "\xd0\xb4\xd0\xb5\xd0\xba 09 16:21:24 node7 kernel: EDAC MC2: 1 CE memory scrubbing error on "
     "x (page:0x5 offset:0x0 grain:64)",
     "edac", Severity::kCe, std::nullopt, "0x5000", 2},
    {"journal-short-full",
     "Sun 2024-06-09 16:21:24 CEST node7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has "
     "fallen off the bus.",
     "nvidia_xid", Severity::kFatal, "0000:3b:00", std::nullopt, std::nullopt, 79},
    {"cut-line", "1.234567] pcieport 0000:00:1c.0: AER: Corrected error received: 0000:03:00.0",
     "aer", Severity::kCe, "0000:03:00.0"},
    // GHES/CPER: a tail whose header lines were lost.
    {"ghes-tail",
     "[Hardware Error]:  Error 0, type: recoverable\n[Hardware Error]:   section_type: memory "
     "error\n[Hardware Error]:   physical_address: 0x000000207c7e3000",
     "ghes", Severity::kUce, std::nullopt, "0x000000207c7e3000"},
    {"ghes-panic", "Kernel panic - not syncing: Fatal hardware error!", "ghes", Severity::kFatal},
    // MCE.
    {"cmci-storm", "CMCI storm detected: switching to poll mode", "mce", Severity::kInfo},
    {"mce-panic", "Kernel panic - not syncing: Fatal machine check", "mce", Severity::kFatal},
    {"mcelog-report",
     "Hardware event. This is not a software error.\nMCE 0\nCPU 0 BANK 9\nMISC 900004000400a8c "
     "ADDR 912c41000\nTIME 1656046378 Fri Jun 24 04:52:58 2022\nMCG status:\nMCi "
     "status:\nCorrected error\nError enabled\nMCA: MEMORY CONTROLLER RD_CHANNEL0_ERR\nSTATUS "
     "8c000040000800c0 MCGSTATUS 0\nMCGCAP f000c14 APICID 0 SOCKETID 0",
     "mce", Severity::kCe, std::nullopt, "0x912c41000"},
    {"mcelog-uncorrected",
     "mcelog: Hardware event. This is not a software error.\nmcelog: MCE 0\nmcelog: CPU 14 BANK 3 "
     "TSC 3a4e5b2d79cf56\nmcelog: STATUS b200000000400005 MCGSTATUS 5",
     "mce", Severity::kFatal},
    {"mce-3x-unprefixed",
     "[Hardware Error]: CPU 1: Machine Check Exception: 4 Bank 4: b200000000070f0f\n[Hardware "
     "Error]: TSC 0 ADDR 3f6d2f9c0",
     "mce", Severity::kFatal, std::nullopt, "0x3f6d2f9c0"},
    {"mce-not-recovered", "mce: Memory error not recovered", "mce", Severity::kSrar},
    {"mcelog-client",
     "Memory errors\nSOCKET 1 CHANNEL 1 DIMM 0\nDMI_NAME \"DIMM_B2\" DMI_LOCATION \"NODE "
     "1\"\ncorrected memory errors:\n\t3 total\n\t1 in 24h\nuncorrected memory errors:\n\t0 "
     "total\n\t0 in 24h",
     "mce", Severity::kCe},
    // memory-failure in its older wordings.
    {"memory-failure-3x", "MCE 0x7b1e35: dirty LRU page recovery: Recovered", "memory_failure",
     Severity::kSrao, std::nullopt, "0x7b1e35"},
    {"memory-failure-4x", "MCE 0x2025e7: recovery action for huge page: Failed", "memory_failure",
     Severity::kSrar, std::nullopt, "0x2025e7"},
    {"memory-failure-poisoned", "Memory failure: 0x3f2a1: already hardware poisoned",
     "memory_failure", Severity::kUce, std::nullopt, "0x3f2a1"},
    {"soft-offline", "soft offline: 0x2f0c0: page migration failed 1, type 0x17ffffc0080000",
     "memory_failure", Severity::kCe, std::nullopt, "0x2f0c0"},
    // EDAC driver and device lines.
    {"edac-amd64-driver-ce", "EDAC amd64 MC1: CE ERROR_ADDRESS= 0xf075b2410", "edac", Severity::kCe,
     std::nullopt, "0xf075b2410", 1},
    {"edac-pre-3.5",
     "EDAC MC1: CE page 0xf075b2, offset 0x410, grain 0, syndrome 0xa082, row 6, channel 0, label "
     "\"\": amd64_edac",
     "edac", Severity::kCe, std::nullopt, "0xf075b2410", 1},
    {"edac-device", "EDAC DEVICE0: UE: l2c instance: 0 block: 0 count: 1 'L2 cache'", "edac",
     Severity::kUce},
    // PCIe DPC.
    {"aer-dpc",
     "pcieport 0000:00:1b.0: DPC: containment event, status:0x1f01 source:0x0000\npcieport "
     "0000:00:1b.0: DPC: ERR_FATAL detected",
     "aer", Severity::kFatal, "0000:00:1b.0"},
    // NVIDIA drivers before 346.
    {"xid-old",
     "NVRM: Xid (0000:03:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU "
     "in the framebuffer at physAddr 0x3f0a01000",
     "nvidia_xid", Severity::kUce, "0000:03:00", "0x3f0a01000", std::nullopt, 48},
    // amdgpu ACA dump followed by its event.
    {"amd-aca",
     "amdgpu 0000:1c:00.0: {3}[Hardware Error]: Accelerator Check Architecture events logged\n"
     "amdgpu 0000:1c:00.0: {3}[Hardware Error]: aca entry[00].STATUS=0x9c20000000080a0b\n"
     "amdgpu 0000:1c:00.0: {3}[Hardware Error]: aca entry[00].ADDR=0x0000000012345000\n"
     "amdgpu 0000:1c:00.0: {3}socket: 0, die: 0, 1 new uncorrectable hardware errors detected in "
     "umc block",
     "amdgpu", Severity::kUce, "0000:1c:00.0", "0x12345000"},
    {"amd-aca-alone",
     "amdgpu 0000:1c:00.0: {4}[Hardware Error]: ACA[01/01].STATUS=0xbc00000000000000", "amdgpu",
     Severity::kUce, "0000:1c:00.0"},
    // Tools' reports.
    {"ras-mc-ctl-summary",
     "Memory controller events summary:\n\tCorrected on DIMM Label(s): 'mc#0csrow#2channel#0' "
     "location: 0:2:0:-1 errors: 6\n\nNo PCIe AER errors.",
     "rasdaemon", Severity::kCe, std::nullopt, std::nullopt, 0},
    {"ras-mc-ctl-error-count",
     "Label               \tCE\tUE\nmc#0csrow#0channel#0\t0\t0\nmc#1csrow#0channel#0\t0\t2",
     "rasdaemon", Severity::kUce, std::nullopt, std::nullopt, 1},
    {"rasdaemon-memory-failure",
     "Memory failure events:\n1 2023-05-04 10:00:00 +0800 error: pfn=0x2025e7, page_type=dirty LRU "
     "page, action_result=Delayed",
     "rasdaemon", Severity::kSrao, std::nullopt, "0x2025e7"},
    {"trace-aer-event",
     "irq/26-aerdrv-98 [002] .... 40.1: aer_event: 0000:01:00.0 PCIe Bus Error: "
     "severity=Uncorrected, non fatal, Poisoned TLP, TLP Header=4a000001 01000004 00000000 "
     "00000000",
     "aer", Severity::kUce, "0000:01:00.0"},
    {"npu-smi",
     "+--------------------------------------------------------------------------------------------"
     "----+\n"
     "| npu-smi 23.0.6                   Version: 23.0.6                                           "
     "    |\n"
     "+---------------------------+---------------+------------------------------------------------"
     "----+\n"
     "| NPU   Name                | Health        | Power(W)    Temp(C)           "
     "Hugepages-Usage(page)|\n"
     "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)    "
     "    |\n"
     "+===========================+===============+================================================"
     "====+\n"
     "| 0     910B3               | OK            | 88.3        36                0    / 0         "
     "    |\n"
     "| 0                         | 0000:C1:00.0  | 0           0    / 0          3162 / 65536     "
     "    |\n"
     "+===========================+===============+================================================"
     "====+\n"
     "| 1     910B3               | Alarm         | 90.1        38                0    / 0         "
     "    |\n"
     "| 0                         | 0000:C2:00.0  | 0           0    / 0          3162 / 65536     "
     "    |\n"
     "+===========================+===============+================================================"
     "====+",
     "ascend", Severity::kUce, "0000:C2:00.0"},
    // drivers/cxl/core/trace.h's TP_printk, as trace_pipe prints them.
    {"trace-cxl-general-media",
     "kworker/u16:3-212 [004] ..... 311.2: cxl_general_media: memdev=mem1 host=0000:36:00.0 "
     "serial=7 log=Failure : time=3 uuid=fbcd0a77-c260-417f-85a9-088b1621eba6 len=128 flags='' "
     "handle=1 related_handle=0 maint_op_class=0 maint_op_sub_class=0 : dpa=7fff1000 dpa_flags='' "
     "descriptor='UNCORRECTABLE_EVENT|THRESHOLD_EVENT' type='ECC Error' sub_type='Not Reported' "
     "transaction_type='Host Read' channel=1 rank=0 device=0 validity_flags='CHANNEL|RANK' "
     "comp_id=00-00 comp_id_pldm_valid_flags='' pldm_entity_id=0x00 pldm_resource_id=0x00 "
     "hpa=8ffff1000 region=region0 region_uuid=00000000-0000-0000-0000-000000000000 "
     "cme_threshold_ev_flags='' cme_count=0",
     "cxl", Severity::kUce, "0000:36:00.0", "0x8ffff1000"},
    {"trace-cxl-dram-corrected",
     "kworker/u16:3-212 [004] ..... 311.3: cxl_dram: memdev=mem1 host=0000:36:00.0 serial=7 "
     "log=Informational : time=3 uuid=601dcbb3-9c06-4eab-b8af-4e9bfb5c9624 len=128 flags='' "
     "handle=2 related_handle=0 maint_op_class=0 : dpa=1000 dpa_flags='' "
     "descriptor='THRESHOLD_EVENT' type='ECC Error' transaction_type='Internal Media Scrub' "
     "channel=0 rank=0 nibble_mask=0 bank_group=0 bank=0 row=0 column=0 cor_mask=00 "
     "hpa=ffffffffffffffff region= region_uuid=00000000-0000-0000-0000-000000000000",
     "cxl", Severity::kCe, "0000:36:00.0"},
    {"trace-cxl-memory-module",
     "kworker/0:1-9 [000] ..... 12.5: cxl_memory_module: memdev=mem0 host=0000:35:00.0 serial=0 "
     "log=Warning : time=1 uuid=fe927475-dd59-4339-a586-79bab113b774 len=128 flags='' handle=3 "
     "related_handle=0 maint_op_class=0 : event_type='Health Status Change' "
     "health_status='REPLACEMENT_NEEDED' media_status='Normal' as_life_used=Normal "
     "as_dev_temp=Normal as_cor_vol_err_cnt=Normal as_cor_per_err_cnt=Normal life_used=9 "
     "device_temp=36 dirty_shutdown_cnt=0 cor_vol_err_cnt=0 cor_per_err_cnt=0",
     "cxl", Severity::kUce, "0000:35:00.0"},
    {"trace-cxl-poison-clear",
     "cxl-1234 [001] ..... 90.1: cxl_poison: memdev=mem0 host=0000:35:00.0 serial=0 "
     "trace_type=Clear region= region_uuid=00000000-0000-0000-0000-000000000000 "
     "hpa=0xffffffffffffffff dpa=0x40000000 dpa_length=0x40 source=Injected flags= overflow_time=0",
     "cxl", Severity::kInfo, "0000:35:00.0"},
    {"trace-cxl-aer-ue",
     "irq/51-aerdrv-170 [002] ..... 50.1: cxl_aer_uncorrectable_error: memdev=mem3 "
     "host=0000:0d:00.0 serial=0: status: 'Cache Data Parity Error' first_error: 'Cache Data "
     "Parity Error'",
     "cxl", Severity::kUce, "0000:0d:00.0"},
    // rasdaemon's log of the same event (ras-cxl-handler.c).
    {"rasdaemon-cxl-poison",
     "<...>-1234 [001] ..... 90.1 cxl_poison [ERROR] 2024-05-01 10:00:00 +0000 memdev:mem0 "
     "host:0000:35:00.0 serial:0x0 trace_type:List region:region0 region_uuid:1f8c ... "
     "hpa:0x1040000000 dpa:0x40000000 dpa_length:0x40 source:External flags:0 overflow timestamp:0",
     "cxl", Severity::kUce, "0000:35:00.0", "0x1040000000"},
    {"cxl-pci-frozen",
     "[ 4242.1] cxl_pci 0000:0d:00.0: mem0: frozen state error detected, disable CXL.mem", "cxl",
     Severity::kFatal, "0000:0d:00.0"},
    {"cxl-bus-error",
     "pcieport 0000:0c:00.0: AER: Uncorrectable (Non-Fatal) error message received from "
     "0000:0d:00.0\n"
     "cxl_pci 0000:0d:00.0: CXL Bus Error: severity=Uncorrectable (Non-Fatal), type=Transaction "
     "Layer, (Requester ID)",
     "aer", Severity::kUce, "0000:0d:00.0"},
    // include/ras/ras_event.h's arm_event, before and after it printed the severity.
    {"trace-arm-event-sev",
     "kworker/0:2-301 [000] ..... 77.1: arm_event: cpu: 3; error: 1; affinity level: 0; MPIDR: "
     "0000000080000300; MIDR: 00000000410fd0c0; running state: 1; PSCI state: 0; ARM Processor Err "
     "Info data len: 32; ARM Processor Err Info raw data: 00200300; ARM Processor Err Context Info "
     "data len: 0; ARM Processor Err Context Info raw data: ; Vendor Specific Err Info data len: "
     "0; Vendor Specific Err Info raw data: ",
     "arm", Severity::kCe},
    {"trace-non-standard-event",
     "kworker/0:2-301 [000] ..... 77.2: non_standard_event: severity: 3; sec "
     "type:c8b328a8-9917-4af6-9a13-2e08ab2e7586; FRU: 00000000-0000-0000-0000-000000000000 ; data "
     "len:16; raw data:00000000",
     "ghes", Severity::kFatal},
    // arch/x86/kernel/cpu/amd.c's reset reason.
    {"amd-reset-reason-sync-flood",
     "[    0.181] x86/amd: Previous system reset reason [0x08000800]: an uncorrected error caused "
     "a data fabric sync flood event",
     "x86", Severity::kFatal},
    {"amd-reset-reason-software",
     "[    0.181] x86/amd: Previous system reset reason [0x00080800]: software wrote 0x6 to reset "
     "control register 0xCF9",
     "x86", Severity::kInfo},
    // drivers/edac/mce_amd.c's decode of a deferred error.
    {"amd-deferred",
     "[Hardware Error]: Deferred error, no action required.\n"
     "[Hardware Error]: CPU:0 (19:1:1) MC18_STATUS[-|-|MiscV|AddrV|-|-|SyndV|UECC|Deferred|-|-]: "
     "0x9c2030000000011b\n"
     "[Hardware Error]: Error Addr: 0x000000035bdc1d40",
     "mce", Severity::kUcna, std::nullopt, "0x000000035bdc1d40"},
    // block/blk-core.c's blk_print_req_error.
    {"block-medium-error",
     "[ 812.4] critical medium error, dev sdb, sector 2048 op 0x0:(READ) flags 0x80700 phys_seg 1 "
     "prio class 2",
     "block", Severity::kUce},
    {"block-not-supported",
     "[ 9.1] operation not supported error, dev nvme0n1, sector 0 op 0x9:(WRITE_ZEROES) flags "
     "0x800 phys_seg 0 prio class 0",
     "block", Severity::kInfo},
    {"block-empty-optical-drive",
     "[ 3.2] I/O error, dev sr0, sector 0 op 0x0:(READ) flags 0x80700 phys_seg 1 prio class 2\n"
     "[ 3.2] Buffer I/O error on dev sr0, logical block 0, async page read",
     "block", Severity::kInfo},
    {"trace-block-rq-error",
     "kworker/0:1H-1090 [000] ..... 586.1: block_rq_error: 8,16 R () 2048 + 8 [-5]", "block",
     Severity::kUce},
    {"soft-offline-already-poisoned", "[ 23.0] soft offline: 0x150000 page already poisoned",
     "memory_failure", Severity::kUce, std::nullopt, "0x150000"},
    {"devlink-health-report",
     "kworker/u64:1-99 [012] ..... 1900.5: devlink_health_report: bus_name=pci "
     "dev_name=0000:08:00.0 driver_name=mlx5_core reporter_name=fw_fatal: Crdump collection failed",
     "mlx5", Severity::kFatal, "0000:08:00.0"},
    // iproute2's devlink/devlink.c health output.
    {"devlink-tool-health-show",
     "pci/0000:08:00.0:\n"
     "  reporter fw_fatal\n"
     "    state healthy error 2 recover 2 grace_period 1200 auto_recover true auto_dump true",
     "devlink", Severity::kFatal, "0000:08:00.0"},
    {"devlink-tool-tx-healthy",
     "pci/0000:08:00.0:\n  reporter tx\n    state healthy error 0 recover 0 grace_period 500",
     "devlink", Severity::kInfo, "0000:08:00.0"},
    {"ras-mc-ctl-cxl-section",
     "CXL poison events:\n1 2024-05-01 10:00:00 +0000 error: memdev=mem0, host=0000:35:00.0, "
     "serial=0x0, trace_type=List, region=region0, hpa=0x1040000000, dpa=0x40000000, "
     "dpa_length=0x40, source=External, flags=0,",
     "rasdaemon", Severity::kUce, "0000:35:00.0", "0x1040000000"},
    // A CXL record wrapped with backslashes: the descriptor on a later line.
    {"cxl-dram-wrapped",
     "cxl_dram: memdev=mem0 host=0000:0f:00.0 serial=3 log=Informational : \\\n"
     "time=76068483335 uuid=601dcbb3 len=128 flags='0x1' handle=1 : dpa=0x18680 \\\n"
     "dpa_flags=0x0 descriptor=0x1 type=0x0 hpa=0x40018680 region=region0",
     "cxl", Severity::kUce, "0000:0f:00.0", "0x40018680"},
    {"cxl-port-aer-named-port",
     "cxl_port_aer_correctable_error: device=port2 (0000:0d:00.0) parent=port1 (0000:0c:00.0) "
     "status='Received Error From Physical Layer'",
     "cxl", Severity::kCe, "0000:0d:00.0"},
    // rasdaemon's non-standard event, its severity word on the next line.
    {"rasdaemon-non-standard-multi-line",
     "  <...>-64065 [077] dNH.     0.054782 non_standard_event 2023-09-07 18:37:13 +0800\n"
     " Fatal\n"
     " section type: a6980811-16ea-4e4d-b936-fb00a23ff29c fru text:  fru id: 0\n"
     " length: 16\n error:\n  00000000: 00000050 00800005 00000000 00000000",
     "rasdaemon", Severity::kFatal},
    {"mlx5e-tx-timeout",
     "mlx5_core 0000:13:00.1 eth1: TX timeout detected\n"
     "mlx5_core 0000:13:00.1 eth1: TX timeout on queue: 19, SQ: 0xab6, CQ: 0xd4a, SQ Cons: "
     "0x3fd7 SQ Prod: 0x3fe6, usecs since last trans: 27541000",
     "mlx5", Severity::kCe, "0000:13:00.1"},
    // A message wrapped after mlx5_core_err's prefix.
    {"mlx5-health-wrapped",
     "mlx5_core 0001:19:00.0: print_health_info:385:(pid 0):\nsynd 0x7: irisc not responding",
     "mlx5", Severity::kUce, "0001:19:00.0"},
    {"reset-reason-wrapped",
     "x86/amd: Previous system reset reason [0x08000800]:\n"
     "        an uncorrected error caused a data fabric sync flood event",
     "x86", Severity::kFatal},
    {"block-rq-complete-failed",
     "kworker/0:1H-1090 [000] ..... 586.0: block_rq_complete: 8,16 WS () 131072 + 128 [-61]",
     "block", Severity::kUce},
    // The errno decides as in the raw event: ENOLINK is a transport error
    // the layer retried; a loop device (major 7) has no hardware to fail.
    {"trace-block-rq-error-transport",
     "kworker/0:1H-1090 [000] ..... 586.1: block_rq_error: 259,0 R () 2048 + 8 [-67]", "block",
     Severity::kCe},
    {"trace-block-rq-error-loop",
     "kworker/0:1H-1090 [000] ..... 586.1: block_rq_error: 7,3 R () 2048 + 8 [-5]", "block",
     Severity::kInfo},
    {"fabric-manager-fatal",
     "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 12028 on fid 0 on "
     "NVSwitch pci bus id 00000000:87:00.0 physical id 4 port 31",
     "nvswitch", Severity::kFatal, "00000000:87:00.0", std::nullopt, std::nullopt, 12028},
    {"madvise-soft-offline-request",
     "Soft offlining pfn 0x20001380 at process virtual address 0x7fff9f000000", "memory_failure",
     Severity::kInfo, std::nullopt, "0x20001380"},
    {"ras-mc-ctl-disk-errors",
     "Disk errors:\n1 2024-05-01 10:00:00 +0000 error: dev=8:16, sector=2048, nr_sector=8, "
     "error='critical medium', rwbs='R', cmd='',",
     "rasdaemon", Severity::kUce},
};

std::string Name(const ::testing::TestParamInfo<FamilyCase>& info) {
  std::string name;
  for (const char* c = info.param.family; *c != '\0'; ++c) name += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Families, FormatFamilyTest, ::testing::ValuesIn(kCases), Name);

// The process an Xid names (NVIDIA's "pid=N, name=..."), for kill-consumer;
// "pid='<unknown>'" and no pid at all name none.
TEST(EdacDimmTest, AnErrorLineNamesItsModuleByLabelOrElseByLocation) {
  struct Case {
    const char* text;
    std::optional<std::string> dimm;
  };
  const Case cases[] = {
      {"EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0 "
       "page:0x849900 offset:0x40 grain:32 syndrome:0x0 -  area:DRAM err_code:0001:0092)",
       "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"},
      {"EDAC MC1: 1 UE memory read error on DIMM_B1 (page:0x10 offset:0x0 grain:32)", "DIMM_B1"},
      // ghes_edac with no labels: the location up to the per-error fields.
      {"EDAC MC0: 1 UE Multi-bit ECC on unknown memory (node:0 card:1 module:71 bank:7 row:0 "
       "col:0 page:0x0 offset:0x0 grain:0 syndrome:0x0)",
       "node:0 card:1 module:71"},
      {"EDAC MC0: 1 CE Cannot decode normalized address on mc#0csrow#3channel#1 (csrow:3 "
       "channel:1 page:0x0 offset:0x0 grain:64 syndrome:0x0)",
       "mc#0csrow#3channel#1"},
      {"EDAC MC0: 1 UE unknown on unknown memory ( page:0x0 offset:0x0 grain:0)", std::nullopt},
  };
  for (const Case& c : cases) {
    const auto main = MainRecord(ScanKernelLog(c.text));
    ASSERT_TRUE(main.has_value()) << c.text;
    EXPECT_EQ(main->dimm, c.dimm) << c.text;
  }
}

TEST(XidPidTest, TheNamedProcessIsKeptAndAnUnknownOneIsNot) {
  const auto named = ScanKernelLog(
      "[  365.9] NVRM: Xid (PCI:0000:01:00): 94, pid=13705, name=python3, Contained: SM (0x1). "
      "RST: No, D-RST: No\n");
  ASSERT_EQ(named.size(), 1U);
  EXPECT_EQ(named[0].severity, Severity::kSrar);
  EXPECT_EQ(named[0].pid, 13705);
  for (const char* none :
       {"NVRM: Xid (PCI:0000:00:08): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1).\n",
        "NVRM: Xid (PCI:0000:00:08): 79, GPU has fallen off the bus.\n",
        "NVRM: Xid (PCI:0000:00:08): 94, pid=0, name=x, Contained: SM (0x1).\n",
        "NVRM: Xid (PCI:0000:00:08): 94, pid=99999999999, name=x, Contained: SM (0x1).\n"}) {
    const auto records = ScanKernelLog(none);
    ASSERT_EQ(records.size(), 1U) << none;
    EXPECT_FALSE(records[0].pid.has_value()) << none;
  }
}

}  // namespace
}  // namespace rasd::ras

namespace rasd::ras {
namespace {

// A checkmk section ends at its first line that is not a row, and a path
// printed without its value waits for one line only: the lines of the log
// after a dump are not taken into its record (they were, to the end of the
// log, before: a bench log's every later line landed in one record).
TEST(SysfsDumpTest, TheLinesAfterADumpAreNotPartOfIt) {
  const std::string chatter =
      "usb 1-1: new high-speed USB device number 7 using xhci_hcd\n"
      "systemd[1]: Started Session 42 of user root.\n";
  const auto checkmk = ScanKernelLog("<<<edac>>>\n"
                                     "mc1 csrow0 32768 Registered-DDR3 22 0 S4ECD4ED\n" +
                                     chatter + "mc1 csrow1 32768 Registered-DDR3 5 0 S4ECD4ED\n");
  ASSERT_EQ(checkmk.size(), 1U);
  EXPECT_EQ(checkmk[0].lines.size(), 2U);  // the heading and the one row before the chatter
  EXPECT_EQ(checkmk[0].severity, Severity::kCe);

  const auto pending = ScanKernelLog("/sys/devices/system/edac/mc/mc0/ue_count\n" + chatter +
                                     "1\n");
  ASSERT_EQ(pending.size(), 1U);
  EXPECT_EQ(pending[0].lines.size(), 1U);
  EXPECT_EQ(pending[0].severity, Severity::kInfo);  // the "1" three lines on is not its value
}

// rasdaemon's start-up lines name the events it enables: no record.
TEST(PlatformEventNamesTest, AnEnabledEventIsNotARecord) {
  for (const char* line :
       {"rasdaemon: cxl:cxl_poison event enabled", "rasdaemon: ras:arm_event event enabled",
        "rasdaemon: ras:non_standard_event event enabled",
        "rasdaemon: block:block_rq_error event enabled",
        "rasdaemon: devlink:devlink_health_report event enabled"}) {
    const auto main = MainRecord(ScanKernelLog(line));
    EXPECT_TRUE(!main || main->severity == Severity::kInfo) << line;
  }
}

// A line that ends where its message should start waits for the next, but
// a next line with words of its own is a record of its own, never that
// message; a completed request (errno 0) is no record.
TEST(ContinuedRecordTest, ALineWithWordsOfItsOwnIsNeverAnotherLinesMessage) {
  const auto records = ScanKernelLog(
      "mlx5_core 0001:19:00.0: print_health_info:385:(pid 0):\n"
      "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#0_DIMM#0 (page:0x1 offset:0x0)\n"
      "x86/amd: Previous system reset reason [0x08000800]:\n"
      "usb 1-1: new high-speed USB device number 7 using xhci_hcd\n"
      "kworker/0:1H-1090 [000] ..... 586.0: block_rq_complete: 8,16 WS () 131072 + 128 [0]\n");
  ASSERT_EQ(records.size(), 2U);  // the EDAC record, and the usb line as the reset reason's text
  EXPECT_EQ(records[0].origin, "edac");
  EXPECT_EQ(records[0].severity, Severity::kCe);
  EXPECT_EQ(records[1].origin, "x86");
  EXPECT_EQ(records[1].severity, Severity::kInfo);
}

// A record wrapped past any real one's length is cut off there: a file of
// backslash lines does not grow one record without bound.
TEST(ContinuedRecordTest, AWrappedRecordTakesABoundedNumberOfLines) {
  std::string text = "cxl_dram: memdev=mem0 host=0000:0f:00.0 serial=3 log=Informational : \\\n";
  for (int i = 0; i < 1000; ++i) text += "time=1 uuid=601dcbb3 len=128 \\\n";
  text += "descriptor=0x1 hpa=0x40018680\n";
  const auto records = ScanKernelLog(text);
  ASSERT_EQ(records.size(), 1U);
  EXPECT_LE(records[0].lines.size(), 300U);
  EXPECT_EQ(records[0].severity, Severity::kCe);  // the descriptor came too late to count
}

// The process a memory error's kill notice names, for the daemon to say
// which workload it was.
TEST(ContinuedRecordTest, AKillNoticeNamesItsProcess) {
  const auto records = ScanKernelLog(
      "Memory failure: 0x3710b3: Sending SIGBUS to einj_mem_uc:361438 due to hardware memory "
      "corruption\n"
      "MCE: Killing a:b:4770 due to hardware memory corruption fault at 7f8eccf35000\n"
      "Memory failure: 0x3710b3: Sending SIGBUS to x:12y due to hardware memory corruption\n");
  ASSERT_EQ(records.size(), 3U);
  EXPECT_EQ(records[0].pid, 361438);
  EXPECT_EQ(records[1].pid, 4770);
  EXPECT_FALSE(records[2].pid.has_value());
}

// A wrapped or multi-line record ends at a line with words of its own,
// which is decoded as the record it is.
TEST(ContinuedRecordTest, ARealRecordAfterAWrappedOneIsItsOwn) {
  const char* kEdacUe =
      "EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#0_DIMM#0 (page:0x1 offset:0x0)\n";
  for (const std::string first :
       {"cxl_dram: memdev=mem0 host=0000:0f:00.0 serial=3 log=Informational : \\\n",
        "  <...>-64065 [077] dNH.     0.054782 non_standard_event 2023-09-07 18:37:13 +0800\n",
        "  <...>-64065 [077] dNH.     0.054782 non_standard_event 2023-09-07 18:37:13 +0800\n"
        " Fatal\n"}) {
    const auto records = ScanKernelLog(first + kEdacUe);
    ASSERT_EQ(records.size(), 2U) << first;
    EXPECT_EQ(records[1].origin, "edac") << first;
    EXPECT_EQ(records[1].severity, Severity::kUce) << first;
  }
}

// A backslash-wrapped CXL record ends at its first line without one: the
// next record is its own.
TEST(ContinuedRecordTest, AWrappedRecordEndsAtItsLastWrappedLine) {
  const auto records = ScanKernelLog(
      "cxl_general_media: memdev=mem1 host=0000:35:00.0 serial=0 log=Informational : \\\n"
      "descriptor='' type='ECC Error' hpa=ffffffffffffffff\n"
      "descriptor='UNCORRECTABLE_EVENT' this line is not the record's\n");
  ASSERT_EQ(records.size(), 1U);
  EXPECT_EQ(records[0].severity, Severity::kCe);
  EXPECT_EQ(records[0].lines.size(), 2U);
}

}  // namespace
}  // namespace rasd::ras

namespace rasd::ras {
namespace {

// The classes of a log's records, in order.
std::vector<Severity> Classes(std::string_view text) {
  std::vector<Severity> classes;
  for (const auto& record : ScanKernelLog(text)) classes.push_back(record.severity);
  return classes;
}

// Lines shaped as CANN prints a failed call: the code, the error message
// with its cause, a traceback that repeats the code.
TEST(CannCauseTest, ACodeBesideTheApplicationsOwnErrorIsInfoWhateverItsClassAlone) {
  const std::string code = "[ERROR] aclrtSetDevice(deviceId) failed: 507033 (main.cpp:98)\n";
  const std::string traceback =
      "        TraceBack (most recent call last):\n"
      "        open device 2 failed, runtime result = 507033.[FUNC:ReportCallError]"
      "[FILE:log_inner.cpp][LINE:148]\n";
  EXPECT_EQ(Classes(code), std::vector{Severity::kFatal});
  for (const std::string cause :
       {"[ERROR] RecentErrMsg: [PID: 7] Memory_Allocation_Failure(EL0004): Failed to allocate "
        "memory.\n",
        "EL0003: [PID: 7] 2025-06-24-11:20:41.662.506 The argument is invalid.\n"}) {
    EXPECT_EQ(Classes(code + cause + traceback), std::vector{Severity::kInfo}) << cause;
  }
  // A task exception too; a timeout the caller set is not a record at all.
  EXPECT_EQ(Classes("RuntimeError: npuSynchronizeDevice: error code is 507015\n"
                    "EL0004: [PID: 7] Failed to allocate memory.\n"),
            std::vector{Severity::kInfo});
  EXPECT_TRUE(Classes("RuntimeError: AclrtSynchronizeDevice, error code is 507046\n").empty());
}

TEST(CannCauseTest, TheDeviceLostBesideACodeIsFatalAndACodeNamingTheHardwareKeepsItsClass) {
  EXPECT_EQ(Classes("[ERROR] aclrtSetDevice(deviceId) failed: 507033 (main.cpp:98)\n"
                    "[ERROR] RecentErrMsg: Inner_Error_Device_Status_Abnormal(E39009): Failed to "
                    "connect the device.\n"),
            std::vector{Severity::kFatal});
  // Both messages: the device lost is the stronger word, in either order.
  for (const std::string& order :
       {std::string("E39009 then EL0004"), std::string("EL0004 then E39009")}) {
    const std::string lost =
        "[ERROR] RecentErrMsg: Inner_Error_Device_Status_Abnormal(E39009): Failed to connect.\n";
    const std::string memory = "EL0004: [PID: 7] Failed to allocate memory.\n";
    const std::string code = "[ERROR] aclrtSetDevice(deviceId) failed: 507033 (main.cpp:98)\n";
    EXPECT_EQ(Classes(code + (order.starts_with("E39009") ? lost + memory : memory + lost)),
              std::vector{Severity::kFatal})
        << order;
  }
  // The message alone still says the device is gone.
  EXPECT_EQ(Classes("Possible Cause: 1. Heartbeats are missing on the device.\n"),
            std::vector{Severity::kFatal});
  // An application's message cannot explain an HBM ECC error or a lost heartbeat.
  EXPECT_EQ(Classes("wait for compute device to finish failed, runtime result = 507054.\n"
                    "EL0004: [PID: 7] Failed to allocate memory.\n"),
            std::vector{Severity::kUce});
  // Nor a hardware code that follows an application's failure: a record of its own.
  EXPECT_EQ(Classes("open device 2 failed, runtime result = 507033.\n"
                    "EL0004: [PID: 7] Failed to allocate memory.\n"
                    "wait for compute device to finish failed, runtime result = 507053.\n"),
            (std::vector{Severity::kInfo, Severity::kSrar}));
  // An inner error's message names no cause: the code's class stands.
  EXPECT_EQ(Classes("[ERROR] aclrtSynchronizeStream(stream) failed: 507015 (main.cpp:170)\n"
                    "[ERROR] RecentErrMsg: EZ9999: Inner Error!\n"),
            std::vector{Severity::kUce});
}

// Ten quiet lines part a failure from the next one's message.
TEST(CannCauseTest, AMessageFarFromTheCodeIsNotItsCause) {
  std::string text = "RuntimeError: npuSynchronizeDevice: error code is 507015\n";
  for (int i = 0; i < 10; ++i) text += "worker 3 step 1200 loss 2.31\n";
  EXPECT_EQ(Classes(text + "EL0004: [PID: 7] Failed to allocate memory.\n"),
            std::vector{Severity::kUce});
}

}  // namespace
}  // namespace rasd::ras
