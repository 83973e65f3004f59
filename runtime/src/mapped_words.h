#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace rasd::runtime {

// Host words mapped for one use and unmapped after it. From malloc, a
// self-test's or a screening's buffers (megabytes) would stay resident in
// the worker thread's arena after it: glibc returns the top of a thread's
// arena to the system only past its trim threshold (which rises to the
// size of the last large block freed), and malloc_trim() not at all, so
// every arena a test ever ran on kept them.
class MappedWords {
 public:
  explicit MappedWords(std::size_t words) : bytes_(std::max<std::size_t>(words, 1) * 4) {
    void* memory =
        ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory != MAP_FAILED) data_ = static_cast<std::uint32_t*>(memory);
  }
  ~MappedWords() {
    if (data_ != nullptr) ::munmap(data_, bytes_);
  }
  MappedWords(const MappedWords&) = delete;
  MappedWords& operator=(const MappedWords&) = delete;

  bool Valid() const { return data_ != nullptr; }
  std::uint32_t* Data() const { return data_; }
  // The same memory as floats (anonymous pages hold no object of any type
  // until they are written).
  float* Floats() const { return reinterpret_cast<float*>(data_); }

 private:
  std::size_t bytes_;
  std::uint32_t* data_ = nullptr;
};

}  // namespace rasd::runtime
