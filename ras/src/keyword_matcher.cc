#include "keyword_matcher.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>

namespace rasd::ras {

KeywordMatcher::KeywordMatcher(
    std::initializer_list<std::pair<std::string_view, std::uint32_t>> keywords) {
  Build({keywords.begin(), keywords.end()});
}

KeywordMatcher::KeywordMatcher(const std::vector<std::string_view>& keywords) {
  std::vector<std::pair<std::string_view, std::uint32_t>> grouped;
  for (std::string_view keyword : keywords) grouped.emplace_back(keyword, 1);
  Build(grouped);
}

namespace {

// How often a byte turns up in kernel log text, roughly: English letter
// frequencies for lower case, and the space, digits and punctuation every
// timestamped line has. Only the ranking matters.
double Commonness(unsigned char c) {
  static constexpr double kLetters[26] = {8.2, 1.5, 2.8, 4.3, 12.7, 2.2, 2.0, 6.1, 7.0,
                                          0.2, 0.8, 4.0, 2.4, 6.7,  7.5, 1.9, 0.1, 6.0,
                                          6.3, 9.1, 2.8, 1.0, 2.4,  0.2, 2.0, 0.1};
  if (c >= 'a' && c <= 'z') return kLetters[c - 'a'];
  if (c >= 'A' && c <= 'Z') return 0.8;
  if (c >= '0' && c <= '9') return 6.0;
  switch (c) {
    case ' ':
      return 15.0;
    case '[':
    case ']':
    case '.':
    case ':':
      return 5.0;
    case '-':
    case ',':
    case '=':
    case '(':
    case ')':
      return 1.5;
    default:
      return 0.5;
  }
}

// Entries of the anchor table: 2^14 bytes (16 KiB) stay in the first-level
// cache. A byte per entry, not a bit: a load and no variable shift. A
// multiplicative hash of the triple picks the entry; with a few dozen
// anchors, one line in a few hundred bytes has a collision, which costs a
// comparison of the keywords anchored there.
constexpr int kAnchorBits = 14;

// `triple`'s low three bytes, in text order; its top byte is ignored (the
// shift drops it), so a four-byte load serves as well.
std::uint32_t TripleKey(std::uint32_t triple) {
  return ((triple << 8) * 0x9E3779B1U) >> (32 - kAnchorBits);
}

std::uint32_t Triple(const unsigned char* at) {
  return static_cast<std::uint32_t>(at[0]) | static_cast<std::uint32_t>(at[1]) << 8 |
         static_cast<std::uint32_t>(at[2]) << 16;
}

// The triple at `at` and the byte after it, for texts long enough to read four.
std::uint32_t Load4(const unsigned char* at) {
  std::uint32_t word = 0;
  std::memcpy(&word, at, 4);
  if constexpr (std::endian::native == std::endian::big) word = __builtin_bswap32(word);
  return word;
}

bool AnchorHit(const std::uint8_t* anchors, std::uint32_t triple) {
  return anchors[TripleKey(triple)] != 0;
}

// Whether any of the eight triples at `at`..`at`+7 is an anchor's: eight
// independent lookups, one branch. Reads `at`[0..10].
bool AnyAnchorIn8(const std::uint8_t* anchors, const unsigned char* at) {
  unsigned any = 0;
  for (int k = 0; k < 8; ++k) any |= anchors[TripleKey(Load4(at + k))];
  return any != 0;
}

}  // namespace

void KeywordMatcher::BuildAnchors(
    const std::vector<std::pair<std::string_view, std::uint32_t>>& keywords) {
  std::vector<std::uint8_t> anchors(std::size_t{1} << kAnchorBits, 0);
  std::vector<Anchored> anchored;
  for (const auto& [keyword, group] : keywords) {
    if (keyword.size() < 3) return;  // too short for a triple: no prefilter
    const auto* bytes = reinterpret_cast<const unsigned char*>(keyword.data());
    std::size_t best = 0;
    double best_score = 1e18;
    for (std::size_t i = 0; i + 2 < keyword.size(); ++i) {
      const double score =
          Commonness(bytes[i]) * Commonness(bytes[i + 1]) * Commonness(bytes[i + 2]);
      if (score < best_score) {
        best_score = score;
        best = i;
      }
    }
    anchored.push_back({TripleKey(Triple(bytes + best)), best, group, std::string(keyword)});
  }
  if (anchored.size() > 255) return;  // more than a byte can index: no prefilter
  std::sort(anchored.begin(), anchored.end(),
            [](const Anchored& a, const Anchored& b) { return a.key < b.key; });
  for (std::size_t i = anchored.size(); i-- > 0;)
    anchors[anchored[i].key] = static_cast<std::uint8_t>(i + 1);  // the first of its key
  anchors_ = std::move(anchors);
  anchored_ = std::move(anchored);
}

std::uint32_t KeywordMatcher::GroupsAnchoredAt(std::string_view text, std::size_t at) const {
  const std::uint32_t key =
      TripleKey(Triple(reinterpret_cast<const unsigned char*>(text.data()) + at));
  std::uint32_t groups = 0;
  for (auto it = anchored_.begin() + (anchors_[key] - 1); it != anchored_.end() && it->key == key;
       ++it) {
    // Another keyword's anchor, or a hash collision, fails the comparison.
    if (at >= it->offset && at - it->offset + it->keyword.size() <= text.size() &&
        std::memcmp(text.data() + (at - it->offset), it->keyword.data(), it->keyword.size()) == 0) {
      groups |= it->group;
    }
  }
  return groups;
}

bool KeywordMatcher::MayMatch(std::string_view text) const {
  if (anchors_.empty()) return true;
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const std::uint8_t* anchors = anchors_.data();
  const std::size_t size = text.size();
  std::size_t i = 0;
  for (; i + 11 <= size; i += 8) {
    if (AnyAnchorIn8(anchors, bytes + i)) return true;
  }
  for (; i + 2 < size; ++i) {
    if (AnchorHit(anchors, Triple(bytes + i))) return true;
  }
  return false;
}

void KeywordMatcher::Build(
    const std::vector<std::pair<std::string_view, std::uint32_t>>& keywords) {
  BuildAnchors(keywords);
  for (const auto& [keyword, group] : keywords) {
    for (char c : keyword) {
      auto& cls = byte_class_[static_cast<unsigned char>(c)];
      if (cls == 0) cls = static_cast<std::uint8_t>(classes_++);
    }
  }
  // The trie, then failure links folded into full DFA transitions.
  std::vector<std::vector<int>> trie(1, std::vector<int>(classes_, -1));
  output_.assign(1, 0);
  for (const auto& [keyword, group] : keywords) {
    int state = 0;
    for (char c : keyword) {
      const std::size_t cls = byte_class_[static_cast<unsigned char>(c)];
      if (trie[static_cast<std::size_t>(state)][cls] < 0) {
        trie[static_cast<std::size_t>(state)][cls] = static_cast<int>(trie.size());
        trie.emplace_back(classes_, -1);
        output_.push_back(0);
      }
      state = trie[static_cast<std::size_t>(state)][cls];
    }
    output_[static_cast<std::size_t>(state)] |= group;
  }
  const std::size_t states = trie.size();
  std::vector<std::uint16_t> next(states * classes_, 0);
  std::vector<std::size_t> fail(states, 0);
  std::deque<std::size_t> queue;
  for (std::size_t cls = 0; cls < classes_; ++cls) {
    if (trie[0][cls] > 0) {
      next[cls] = static_cast<std::uint16_t>(trie[0][cls]);
      queue.push_back(static_cast<std::size_t>(trie[0][cls]));
    }
  }
  while (!queue.empty()) {
    const std::size_t state = queue.front();
    queue.pop_front();
    output_[state] |= output_[fail[state]];  // keywords that end inside this one
    for (std::size_t cls = 0; cls < classes_; ++cls) {
      const int child = trie[state][cls];
      const std::uint16_t via_fail = next[fail[state] * classes_ + cls];
      if (child > 0) {
        fail[static_cast<std::size_t>(child)] = via_fail;
        next[state * classes_ + cls] = static_cast<std::uint16_t>(child);
        queue.push_back(static_cast<std::size_t>(child));
      } else {
        next[state * classes_ + cls] = via_fail;
      }
    }
  }
  // Row-offset form for the hot loop; outputs indexed by row.
  next_.resize(next.size());
  for (std::size_t i = 0; i < next.size(); ++i)
    next_[i] = static_cast<std::uint32_t>(next[i] * classes_);
  row_output_.assign(states * classes_, 0);
  for (std::size_t state = 0; state < states; ++state)
    row_output_[state * classes_] = output_[state];
}

std::uint32_t KeywordMatcher::Groups(std::string_view text) const {
  if (anchors_.empty()) return AutomatonGroups(text);
  // MayMatch's pass, which on a hit compares the keywords anchored there:
  // every occurrence of a keyword has its anchor at a fixed offset in it.
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const std::uint8_t* anchors = anchors_.data();
  const std::size_t size = text.size();
  std::uint32_t groups = 0;
  std::size_t i = 0;
  for (; i + 11 <= size; i += 8) {
    if (!AnyAnchorIn8(anchors, bytes + i)) continue;
    for (std::size_t k = i; k < i + 8; ++k) {
      if (AnchorHit(anchors, Load4(bytes + k))) groups |= GroupsAnchoredAt(text, k);
    }
  }
  for (; i + 2 < size; ++i) {
    if (AnchorHit(anchors, Triple(bytes + i))) groups |= GroupsAnchoredAt(text, i);
  }
  return groups;
}

std::uint32_t KeywordMatcher::AutomatonGroups(std::string_view text) const {
  std::uint32_t row = 0;
  std::uint32_t groups = 0;
  const std::uint32_t* table = next_.data();
  const std::uint32_t* output = row_output_.data();
  const std::uint8_t* classes = byte_class_.data();
  for (char c : text) {
    row = table[row + classes[static_cast<unsigned char>(c)]];
    groups |= output[row];
  }
  return groups;
}

void KeywordMatcher::FindAll(std::string_view text, std::vector<Hit>& hits) const {
  hits.clear();
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t size = text.size();
  if (anchors_.empty()) {
    // The automaton reports where keywords end, not which: only the groups
    // ending at each byte.
    std::uint32_t row = 0;
    for (std::size_t i = 0; i < size; ++i) {
      row = next_[row + byte_class_[bytes[i]]];
      if (row_output_[row] != 0) hits.push_back({i + 1, row_output_[row]});
    }
    return;
  }
  const std::uint8_t* anchors = anchors_.data();
  auto verify = [&](std::size_t at) {
    const std::uint32_t key = TripleKey(Triple(bytes + at));
    for (auto it = anchored_.begin() + (anchors_[key] - 1); it != anchored_.end() && it->key == key;
         ++it) {
      if (at >= it->offset && at - it->offset + it->keyword.size() <= size &&
          std::memcmp(text.data() + (at - it->offset), it->keyword.data(), it->keyword.size()) ==
              0) {
        hits.push_back({at - it->offset + it->keyword.size(), it->group});
      }
    }
  };
  std::size_t i = 0;
  for (; i + 11 <= size; i += 8) {
    if (!AnyAnchorIn8(anchors, bytes + i)) continue;
    for (std::size_t k = i; k < i + 8; ++k) {
      if (AnchorHit(anchors, Load4(bytes + k))) verify(k);
    }
  }
  for (; i + 2 < size; ++i) {
    if (AnchorHit(anchors, Triple(bytes + i))) verify(i);
  }
  // By anchor position, so nearly in order of end already.
  std::sort(hits.begin(), hits.end(), [](const Hit& a, const Hit& b) { return a.end < b.end; });
}

bool KeywordMatcher::AnyIn(std::string_view text) const { return Groups(text) != 0; }

}  // namespace rasd::ras
