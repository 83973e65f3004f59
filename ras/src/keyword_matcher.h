#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <utility>
#include <vector>

namespace rasd::ras {

// Finds which of a set of keywords occur in a text in one pass over it,
// whatever the number of keywords: an Aho-Corasick automaton compiled to a
// DFA over the bytes the keywords use (all other bytes share one class).
// Before the automaton, a prefilter looks for each keyword's rarest three
// bytes (its "anchor") in a hashed 256 Ki-bit table: its lookups do not
// depend on each other, so it runs several times faster than the
// automaton's chain of states, and most lines of a log have no anchor.
// Keywords shorter than three bytes turn the prefilter off.
// Each keyword carries a group bit; Groups() returns the OR of the groups
// found. Immutable after construction; thread-safe.
class KeywordMatcher {
 public:
  KeywordMatcher(std::initializer_list<std::pair<std::string_view, std::uint32_t>> keywords);
  // Every keyword in group 1.
  explicit KeywordMatcher(const std::vector<std::string_view>& keywords);

  std::uint32_t Groups(std::string_view text) const;
  // False only when no keyword can occur in `text`.
  bool MayMatch(std::string_view text) const;
  bool AnyIn(std::string_view text) const;

 private:
  void Build(const std::vector<std::pair<std::string_view, std::uint32_t>>& keywords);

  void BuildAnchors(const std::vector<std::pair<std::string_view, std::uint32_t>>& keywords);

  std::vector<std::uint64_t> anchors_;  // bits by hashed byte triple; empty: no prefilter
  std::array<std::uint8_t, 256> byte_class_{};  // 0: a byte no keyword uses
  std::size_t classes_ = 1;
  // Row offsets: next_[row + class] is the next state's row (state *
  // classes_), so the hot loop has no multiplication.
  std::vector<std::uint32_t> next_;
  std::vector<std::uint32_t> output_;      // by state: the groups of keywords ending there
  std::vector<std::uint32_t> row_output_;  // the same, indexed by row offset
};

}  // namespace rasd::ras
