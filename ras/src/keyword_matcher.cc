#include "keyword_matcher.h"

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

void KeywordMatcher::Build(
    const std::vector<std::pair<std::string_view, std::uint32_t>>& keywords) {
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

bool KeywordMatcher::AnyIn(std::string_view text) const { return Groups(text) != 0; }

}  // namespace rasd::ras
