// NodeFault on a real SQLite store and a manual clock: the first fault
// stands with its reason and time, it outlives a restart, a damaged saved
// fault stands rather than vanish, and an operator's clear is saved.

#include "node_fault.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "rasd/common/unix_nanos.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class NodeFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("node");
    Boot();
  }
  void TearDown() override {
    node_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }
  // A fresh rasd on the same state directory.
  void Boot() {
    node_.reset();
    store_.reset();
    auto store = ras::StateStore::Open(dir_ / "state", clock_);
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    node_ = std::make_unique<NodeFault>(*store_, *clock_);
    node_->Restore();
  }

  fs::path dir_;
  std::shared_ptr<common::ManualClock> clock_ = std::make_shared<common::ManualClock>();
  std::unique_ptr<ras::StateStore> store_;
  std::unique_ptr<NodeFault> node_;
};

TEST_F(NodeFaultTest, TheFirstFaultStandsWithItsReasonAndTimeAcrossARestart) {
  EXPECT_FALSE(node_->Current().has_value());
  const auto first_at = clock_->Wall();
  EXPECT_TRUE(node_->Declare("MCE bank 4: uncorrected"));
  clock_->Advance(1h);
  EXPECT_FALSE(node_->Declare("a later fault")) << "the first one stands";
  Boot();
  ASSERT_TRUE(node_->Current().has_value());
  EXPECT_EQ(node_->Current()->reason, "MCE bank 4: uncorrected");
  EXPECT_EQ(common::UnixNanos(node_->Current()->since), common::UnixNanos(first_at));

  node_->Clear();
  Boot();
  EXPECT_FALSE(node_->Current().has_value()) << "an operator's clear is saved";
  EXPECT_TRUE(node_->Declare("again"));
}

TEST_F(NodeFaultTest, ADamagedSavedFaultStandsRatherThanVanish) {
  for (const std::string& damage :
       {std::string(R"({"reason": 5, "since_ns": 1})"), std::string(R"({"reason": "x"})"),
        std::string("[]"), std::string("not json")}) {
    ASSERT_TRUE(store_->SaveNodeValue("node_fault", damage));
    Boot();
    ASSERT_TRUE(node_->Current().has_value()) << damage;
    EXPECT_NE(node_->Current()->reason.find("cannot be read back"), std::string::npos)
        << node_->Current()->reason;
  }
}

TEST_F(NodeFaultTest, AFaultThatCannotBeSavedStillHoldsWhileRasdRuns) {
  store_->SetWriteFault([](std::string_view) -> std::optional<Error> {
    return Error{ErrorCode::kIoError, "database or disk is full"};
  });
  EXPECT_TRUE(node_->Declare("PCIe fatal"));
  ASSERT_TRUE(node_->Current().has_value());
  EXPECT_EQ(node_->Current()->reason, "PCIe fatal");
}

TEST_F(NodeFaultTest, ASavedFaultThatCannotBeReadStandsUntilCleared) {
  node_.reset();
  store_->SetReadFault([](std::string_view what) -> std::optional<Error> {
    if (what != "node value") return std::nullopt;
    return Error{ErrorCode::kIoError, "disk I/O error"};
  });
  node_ = std::make_unique<NodeFault>(*store_, *clock_);
  node_->Restore();
  ASSERT_TRUE(node_->Current().has_value()) << "unknown is not the same as none";
  EXPECT_EQ(node_->Current()->reason, "the saved node fault cannot be read (disk I/O error)");
  store_->SetReadFault(nullptr);
  node_->Clear();
  Boot();
  EXPECT_FALSE(node_->Current().has_value()) << "the operator's clear was saved";
}

}  // namespace
}  // namespace rasd::daemon
