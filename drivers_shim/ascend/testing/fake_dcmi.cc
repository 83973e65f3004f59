// A stand-in for libdcmi.so with the entry points rasd's Ascend backend
// resolves: two cards (ids 1 and 2) with one chip each, logic ids 0 and 1,
// whose health and error codes tests set through the controls in
// fake_control.h, or, for a test driving a separate rasd process, through
// a script file named by RASD_FAKE_DCMI_SCRIPT: each line appended is read
// once, at the next health or error-code query:
//   codes LOGIC_ID CODE...   the chip's current error codes (hex or decimal)
//   health LOGIC_ID LEVEL
//   network LOGIC_ID RESULT   dcmi_get_device_network_health's answer
//                             (0 OK, 3 unreachable, 6 initialising, ...;
//                             -1: the query fails)
//   block LOGIC_ID FUNCTION   FUNCTION (a dcmi_* name) on that chip does
//                             not return, as a wedged driver's
//   unblock LOGIC_ID          it returns again

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dcmi_types.h"
#include "testing/fake_control.h"

namespace {

struct Chip {
  int card = 0;
  int logic_id = 0;
  unsigned int health = 0;
  std::vector<unsigned int> codes;
  int network = -1;  // -1: the query fails (no RoCE detection configured); 0: OK
  std::string blocked;  // an entry point that does not return for this chip
};

struct Fake {
  std::mutex mutex;
  std::vector<Chip> chips;
  int error_code_reads = 0;
  std::streamoff script_offset = 0;
};

Fake& State() {
  static Fake* fake = new Fake;
  return *fake;
}

void ResetLocked(Fake& fake) {
  fake.chips = {Chip{.card = 1, .logic_id = 0}, Chip{.card = 2, .logic_id = 1}};
}

// Caller holds mutex. Chip 0 of `card`, or null.
Chip* Find(Fake& fake, int card, int device) {
  if (fake.chips.empty()) ResetLocked(fake);
  if (device != 0) return nullptr;
  for (auto& chip : fake.chips) {
    if (chip.card == card) return &chip;
  }
  return nullptr;
}

Chip* FindLogic(Fake& fake, int logic_id) {
  if (fake.chips.empty()) ResetLocked(fake);
  for (auto& chip : fake.chips) {
    if (chip.logic_id == logic_id) return &chip;
  }
  return nullptr;
}

// Applies the script lines appended since the last call. Caller holds mutex.
void ReadScript(Fake& fake) {
  const char* path = std::getenv("RASD_FAKE_DCMI_SCRIPT");
  if (path == nullptr) return;
  std::ifstream script(path);
  if (!script) return;
  script.seekg(fake.script_offset);
  std::string line;
  while (std::getline(script, line)) {
    if (script.eof()) break;  // a line still being written: next time
    fake.script_offset = script.tellg();
    std::istringstream words(line);
    std::string verb;
    int logic_id = -1;
    if (!(words >> verb >> logic_id)) continue;
    Chip* chip = FindLogic(fake, logic_id);
    if (chip == nullptr) continue;
    if (verb == "codes") {
      chip->codes.clear();
      std::string code;
      while (words >> code) {
        chip->codes.push_back(static_cast<unsigned int>(std::strtoul(code.c_str(), nullptr, 0)));
      }
    } else if (verb == "health") {
      words >> chip->health;
    } else if (verb == "network") {
      words >> chip->network;
    } else if (verb == "block") {
      words >> chip->blocked;
    } else if (verb == "unblock") {
      chip->blocked.clear();
    }
  }
}

constexpr int kNotFound = -8001;  // any non-zero DCMI return

// The chip (card, device), once `function` may return for it: while the
// script has it blocked, waits without the lock (so that other threads'
// calls go on) and reads the script again. The state is never destroyed,
// so a call still blocked at exit touches nothing freed.
Chip* FindWhenUnblocked(Fake& fake, std::unique_lock<std::mutex>& lock, int card, int device,
                        const char* function) {
  ReadScript(fake);
  while (true) {
    Chip* chip = Find(fake, card, device);
    if (chip == nullptr || chip->blocked != function) return chip;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    lock.lock();
    ReadScript(fake);
  }
}

}  // namespace

extern "C" {

int dcmi_init(void) { return 0; }

int dcmi_get_card_num_list(int* card_num, int* card_list, int list_len) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (fake.chips.empty()) ResetLocked(fake);
  *card_num = 0;
  for (const auto& chip : fake.chips) {
    if (*card_num < list_len) card_list[(*card_num)++] = chip.card;
  }
  return 0;
}

int dcmi_get_device_num_in_card(int card_id, int* device_num) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (Find(fake, card_id, 0) == nullptr) return kNotFound;
  *device_num = 1;
  return 0;
}

int dcmi_get_device_logic_id(int* device_logic_id, int card_id, int device_id) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  Chip* chip = Find(fake, card_id, device_id);
  if (chip == nullptr) return kNotFound;
  *device_logic_id = chip->logic_id;
  return 0;
}

int dcmi_get_device_health(int card_id, int device_id, unsigned int* health) {
  Fake& fake = State();
  std::unique_lock lock(fake.mutex);
  Chip* chip = FindWhenUnblocked(fake, lock, card_id, device_id, "dcmi_get_device_health");
  if (chip == nullptr) return kNotFound;
  *health = chip->health;
  return 0;
}

int dcmi_get_device_errorcode_v2(int card_id, int device_id, int* error_count,
                                 unsigned int* error_code_list, unsigned int list_len) {
  Fake& fake = State();
  std::unique_lock lock(fake.mutex);
  Chip* chip = FindWhenUnblocked(fake, lock, card_id, device_id, "dcmi_get_device_errorcode_v2");
  if (chip == nullptr) return kNotFound;
  const auto count = std::min<std::size_t>(chip->codes.size(), list_len);
  std::copy_n(chip->codes.begin(), count, error_code_list);
  *error_count = static_cast<int>(count);
  ++fake.error_code_reads;
  return 0;
}

int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all* pcie_info) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  Chip* chip = Find(fake, card_id, device_id);
  if (chip == nullptr) return kNotFound;
  *pcie_info = dcmi_pcie_info_all{};
  pcie_info->venderid = 0x19e5;
  pcie_info->deviceid = 0xd802;
  pcie_info->domain = 0;
  pcie_info->bdf_busid = 0xc1 + static_cast<unsigned int>(chip->logic_id);
  return 0;
}

int dcmi_get_device_die_v2(int card_id, int device_id, enum dcmi_die_type input_type,
                           struct dcmi_die_id* die_id) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  Chip* chip = Find(fake, card_id, device_id);
  if (chip == nullptr || input_type != VDIE) return kNotFound;
  *die_id =
      dcmi_die_id{{0x5a5d0000u + static_cast<unsigned int>(chip->logic_id), 0x1234, 0, 0, 0xabcdu}};
  return 0;
}

int dcmi_get_device_network_health(int card_id, int device_id,
                                   enum dcmi_rdfx_detect_result* result) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  ReadScript(fake);
  Chip* chip = Find(fake, card_id, device_id);
  if (chip == nullptr || chip->network < 0) return kNotFound;
  *result = static_cast<dcmi_rdfx_detect_result>(chip->network);
  return 0;
}

// ---- test controls ----

void fake_dcmi_set_network_health(int logic_id, int result) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (Chip* chip = FindLogic(fake, logic_id)) chip->network = result;
}


void fake_dcmi_reset(void) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  ResetLocked(fake);
}

void fake_dcmi_set_health(int logic_id, unsigned int health) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (Chip* chip = FindLogic(fake, logic_id)) chip->health = health;
}

void fake_dcmi_set_error_codes(int logic_id, const unsigned int* codes, int count) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (Chip* chip = FindLogic(fake, logic_id)) chip->codes.assign(codes, codes + count);
}

int fake_dcmi_error_code_reads(void) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  return fake.error_code_reads;
}

}  // extern "C"
