#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rasd::ras {

// Finds which of a set of keywords occur in a text in one pass over it.
// Each keyword's rarest three bytes (its "anchor") are set in a hashed
// 16 KiB table; the pass looks up every triple of the text there. Its
// lookups do not depend on each other, so it runs several times faster
// than an automaton's chain of states, most lines of a log have no anchor,
// and a line that has one (an EDAC line in a storm) is settled by comparing
// the few keywords anchored there, not by walking the automaton over it.
// Keywords shorter than three bytes have no anchor: with any of them (or
// with more keywords than the table can index), an Aho-Corasick automaton
// (a DFA over the bytes the keywords use, all other bytes sharing one
// class) does the matching instead.
// Each keyword carries a group bit; Groups() returns the OR of the groups
// found. Immutable after construction; thread-safe.
class KeywordMatcher {
 public:
  KeywordMatcher(std::initializer_list<std::pair<std::string_view, std::uint32_t>> keywords);
  explicit KeywordMatcher(const std::vector<std::pair<std::string_view, std::uint32_t>>& keywords) {
    Build(keywords);
  }
  // Every keyword in group 1.
  explicit KeywordMatcher(const std::vector<std::string_view>& keywords);

  std::uint32_t Groups(std::string_view text) const;
  // False only when no keyword can occur in `text`.
  bool MayMatch(std::string_view text) const;
  bool AnyIn(std::string_view text) const;

  // One keyword occurrence: `end` is one past its last byte in the text.
  struct Hit {
    std::size_t end = 0;
    std::uint32_t group = 0;
  };
  // Every occurrence of every keyword in `text`, in order of `end`, into
  // `hits` (cleared first; its capacity is kept).
  void FindAll(std::string_view text, std::vector<Hit>& hits) const;

 private:
  void Build(const std::vector<std::pair<std::string_view, std::uint32_t>>& keywords);

  void BuildAnchors(const std::vector<std::pair<std::string_view, std::uint32_t>>& keywords);
  // The groups of the keywords anchored on the triple at `at`, an anchor hit.
  std::uint32_t GroupsAnchoredAt(std::string_view text, std::size_t at) const;
  std::uint32_t AutomatonGroups(std::string_view text) const;

  // By hashed byte triple: 0, or 1 + the position in anchored_ of the first
  // keyword anchored there. Empty: no prefilter (a keyword under three
  // bytes, or more than 255 keywords).
  std::vector<std::uint8_t> anchors_;
  struct Anchored {
    std::uint32_t key = 0;   // the anchor's entry in anchors_
    std::size_t offset = 0;  // of the anchor in the keyword
    std::uint32_t group = 0;
    std::string keyword;
  };
  std::vector<Anchored> anchored_;              // sorted by key
  std::array<std::uint8_t, 256> byte_class_{};  // 0: a byte no keyword uses
  std::size_t classes_ = 1;
  // Row offsets: next_[row + class] is the next state's row (state *
  // classes_), so the hot loop has no multiplication.
  std::vector<std::uint32_t> next_;
  std::vector<std::uint32_t> output_;      // by state: the groups of keywords ending there
  std::vector<std::uint32_t> row_output_;  // the same, indexed by row offset
};

}  // namespace rasd::ras
