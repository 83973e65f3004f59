#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "keyword_matcher.h"

namespace rasd::ras {

// Finds every occurrence of a fixed set of words in a whole buffer in one
// pass, for the scanner's block-level path: most lines of a log have none
// of the words, and they should cost no more than the bytes they occupy.
//
// With Vectorscan (RASD_HAVE_VECTORSCAN, Debian's libvectorscan-dev) the
// words are compiled into one literal database (its Teddy/FDR matchers
// compare 16-64 bytes per SIMD step on x86 and on ARM NEON); without it,
// KeywordMatcher's anchor pass runs over the whole buffer instead: the same
// hits, several times slower.
//
// The search itself is immutable after construction and thread-safe; each
// thread needs its own Scratch (Vectorscan's per-scan working memory).
class LiteralSearch {
 public:
  using Hit = KeywordMatcher::Hit;

  // Words of three bytes or more, none containing '\n'; `group` bits as
  // KeywordMatcher takes them. Crashes on a word Vectorscan cannot compile
  // (a broken invariant: the words are the scanner's own constants).
  explicit LiteralSearch(const std::vector<std::pair<std::string_view, std::uint32_t>>& words);
  // The same search, from bytes Serialize() gave for exactly these words
  // (a start in microseconds: compiling takes tens of milliseconds, much of
  // a short scan). Where the bytes do not load (other words, another
  // Vectorscan version, a CPU without the instructions they were built
  // for, none at all), the words are compiled as above: the same hits.
  LiteralSearch(const std::vector<std::pair<std::string_view, std::uint32_t>>& words,
                std::string_view serialized);
  ~LiteralSearch();
  LiteralSearch(const LiteralSearch&) = delete;
  LiteralSearch& operator=(const LiteralSearch&) = delete;

  class Scratch;
  struct ScratchDeleter {
    void operator()(Scratch* scratch) const;
  };
  using ScratchPtr = std::unique_ptr<Scratch, ScratchDeleter>;
  ScratchPtr NewScratch() const;

  // Every occurrence of every word in `text` (at most 2 GiB), in order of
  // `end`, into `hits` (cleared first; its capacity is kept).
  void FindAll(std::string_view text, Scratch& scratch, std::vector<Hit>& hits) const;

  // "vectorscan" or "keyword-matcher": which engine this build uses.
  static std::string_view Engine();

  enum class Origin { kLoaded, kCompiled, kKeywordMatcher };
  Origin origin() const { return origin_; }

  // The database as bytes for the second constructor: the words'
  // fingerprint, then Vectorscan's serialization. Empty without Vectorscan.
  std::string Serialize() const;

 private:
  void Compile(const std::vector<std::pair<std::string_view, std::uint32_t>>& words);

  struct Database;
  std::unique_ptr<Database> database_;
  std::unique_ptr<KeywordMatcher> fallback_;  // without Vectorscan
  Origin origin_ = Origin::kKeywordMatcher;
};

}  // namespace rasd::ras
