#pragma once

#include <iosfwd>

namespace rasd::ctl {

// `rasctl scan`: reads a saved kernel log from `in` and prints every RAS
// record recognised in it, INFO included: one JSON object per line with
// --json (the corpus field names), else a table and a summary by origin
// and severity. Offline: no daemon involved. Returns the exit code.
int RunScan(std::istream& in, bool json, std::ostream& out);

}  // namespace rasd::ctl
