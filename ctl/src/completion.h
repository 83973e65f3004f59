#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace rasd::ctl {

// What the parser's structure does not say: the values an option or a
// command's positional argument takes.
struct CompletionHints {
  std::map<std::string, std::vector<std::string>> option_values;  // "--severity" -> classes
  std::set<std::string> file_options;                             // "--socket"
  std::map<std::string, std::vector<std::string>> positional_values;  // "inject" -> kinds
  std::set<std::string> file_positionals;                             // "scan"
};

// The file marker among Complete's candidates: the shell completes file
// names there.
inline constexpr const char* kCompleteFiles = "__files__";

// Candidates for the last of `words` (the command line after "rasctl", the
// last word being the one under the cursor, possibly empty), read from the
// CLI11 tree itself so that completion never falls behind the commands:
// subcommands, the current command's options and the global ones (they work
// anywhere), an option's values. Options already given are not offered
// again.
std::vector<std::string> Complete(const CLI::App& app, const std::vector<std::string>& words,
                                  const CompletionHints& hints);

}  // namespace rasd::ctl
