#include "completion.h"

#include <algorithm>

namespace rasd::ctl {
namespace {

std::vector<const CLI::Option*> NamedOptions(const CLI::App& app) {
  return app.get_options([](const CLI::Option* option) { return option->nonpositional(); });
}

// The option that `word` names in `app` or its parents (global options work
// after a command), or null.
const CLI::Option* FindOption(const std::vector<const CLI::App*>& path, const std::string& word) {
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    for (const auto* option : NamedOptions(**it)) {
      if (option->check_name(word)) return option;
    }
  }
  return nullptr;
}

// A flag (--json) expects no value: CLI11 gives it a type size of 1 but
// an expected count of 0.
bool TakesValue(const CLI::Option* option) { return option->get_items_expected_min() > 0; }

}  // namespace

std::vector<std::string> Complete(const CLI::App& app, const std::vector<std::string>& words,
                                  const CompletionHints& hints) {
  const std::string current = words.empty() ? std::string() : words.back();
  std::vector<const CLI::App*> path = {&app};
  std::set<const CLI::Option*> given;
  const CLI::Option* wants_value = nullptr;
  std::size_t positionals = 0;  // given to the innermost command
  for (std::size_t i = 0; i + 1 < words.size(); ++i) {
    const std::string& word = words[i];
    // After `--` (rasctl run -- CMD ...) the words are the command's own.
    if (word == "--") return {kCompleteFiles};
    if (wants_value) {
      wants_value = nullptr;
      continue;
    }
    if (word.starts_with("-")) {
      const auto equals = word.find('=');
      const auto* option = FindOption(path, word.substr(0, equals));
      if (option) {
        given.insert(option);
        if (TakesValue(option) && equals == std::string::npos) wants_value = option;
      }
      continue;
    }
    const CLI::App* sub = nullptr;
    for (const auto* candidate : path.back()->get_subcommands({})) {
      if (candidate->get_name() == word) sub = candidate;
    }
    if (sub && positionals == 0) {
      path.push_back(sub);
      continue;
    }
    ++positionals;
  }

  std::vector<std::string> out;
  auto offer = [&](const std::string& candidate) {
    if (candidate.starts_with(current)) out.push_back(candidate);
  };
  if (wants_value) {
    for (const auto& name : wants_value->get_lnames()) {
      const std::string flag = "--" + name;
      if (hints.file_options.contains(flag)) out.push_back(kCompleteFiles);
      if (auto values = hints.option_values.find(flag); values != hints.option_values.end()) {
        for (const auto& value : values->second) offer(value);
      }
    }
    return out;
  }
  if (current.starts_with("-")) {
    for (const auto* app_on_path : path) {
      for (const auto* option : NamedOptions(*app_on_path)) {
        if (given.contains(option) || option->get_lnames().empty()) continue;
        if (option->get_group().empty()) continue;  // hidden
        for (const auto& name : option->get_lnames()) {
          if (name != "help") offer("--" + name);
        }
      }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  const CLI::App* innermost = path.back();
  if (positionals == 0) {
    for (const auto* sub : innermost->get_subcommands({})) {
      if (!sub->get_group().empty()) offer(sub->get_name());
    }
  }
  const std::string& command = innermost->get_name();
  if (positionals == 0 && out.empty()) {
    if (auto values = hints.positional_values.find(command);
        values != hints.positional_values.end()) {
      for (const auto& value : values->second) offer(value);
    }
    if (hints.file_positionals.contains(command)) out.push_back(kCompleteFiles);
  }
  if (out.empty() && current.empty() && innermost != &app) {
    // Nothing else to say: the command's own options.
    for (const auto* option : NamedOptions(*innermost)) {
      if (given.contains(option) || option->get_group().empty()) continue;
      for (const auto& name : option->get_lnames()) {
        if (name != "help") out.push_back("--" + name);
      }
    }
  }
  return out;
}

}  // namespace rasd::ctl
