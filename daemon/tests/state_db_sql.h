#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <string>

#include "rasd/ras/state_store.h"

namespace rasd::daemon {

// Runs `sql` on the state database under `state_dir` through a second
// connection: how a test damages a saved row as a bad disk or an edit would.
inline void ExecStateSql(const std::filesystem::path& state_dir, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((state_dir / ras::StateStore::kDatabaseFile).c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
      << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

}  // namespace rasd::daemon
