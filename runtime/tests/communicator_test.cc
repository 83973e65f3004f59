#include "rasd/runtime/communicator.h"

#include <numeric>
#include <thread>

#include "runtime_test_util.h"

namespace rasd::runtime::testing {
namespace {

class CommunicatorTest : public RuntimeTest {
 protected:
  void SetUp() override { MakeRuntime(8, 64 << 20, 8 << 20); }

  // Fills rank r's buffer with values that differ per rank and element, runs
  // an AllReduce and checks every rank against the host-side sum.
  void CheckAllReduce(int ranks, std::uint64_t count, int repetitions = 1) {
    std::vector<int> devices(static_cast<std::size_t>(ranks));
    std::iota(devices.begin(), devices.end(), 0);
    auto communicator = Communicator::Create(*runtime_, devices, {.owner = "train-0"});
    ASSERT_TRUE(communicator.has_value()) << communicator.error().ToString();
    std::vector<Allocation> buffers;
    std::vector<DeviceAddress> addresses;
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < ranks; ++r) {
      Stream& stream = (*communicator)->RankStream(r);
      buffers.push_back(Alloc(std::max<std::uint64_t>(count, 1) * sizeof(float), stream));
      addresses.push_back(buffers.back().address);
      std::vector<float> input(count);
      for (std::uint64_t i = 0; i < count; ++i)
        input[i] = static_cast<float>((r + 1) * 1000 + static_cast<int>(i % 997));
      Upload(stream, addresses.back(), input);
      inputs.push_back(std::move(input));
    }
    std::vector<float> expected(count, 0.0f);
    for (int repetition = 0; repetition < repetitions; ++repetition) {
      for (std::uint64_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int r = 0; r < ranks; ++r)
          sum += (repetition == 0 ? inputs[static_cast<std::size_t>(r)][i] : expected[i]);
        expected[i] = sum;
      }
      ASSERT_TRUE((*communicator)->AllReduce(addresses, count).has_value());
    }
    const auto synced = (*communicator)->Synchronize(10s);
    ASSERT_TRUE(synced.has_value()) << synced.error().ToString();
    for (int r = 0; r < ranks; ++r) {
      const auto result =
          Download((*communicator)->RankStream(r), addresses[static_cast<std::size_t>(r)], count);
      for (std::uint64_t i = 0; i < count; ++i) {
        ASSERT_FLOAT_EQ(result[i], expected[i])
            << "rank " << r << " element " << i << " of " << count;
      }
    }
    for (int r = 0; r < ranks; ++r) {
      ASSERT_TRUE(Pool(r).Free(buffers[static_cast<std::size_t>(r)]).has_value());
    }
  }
};

TEST_F(CommunicatorTest, AllReduceIsCorrectForTwoToEightRanksAndOddSizes) {
  for (int ranks = 2; ranks <= 8; ++ranks) {
    for (std::uint64_t count : {1u, 3u, 7u, 64u, 1001u, 65537u}) {
      SCOPED_TRACE(::testing::Message() << ranks << " ranks, " << count << " floats");
      CheckAllReduce(ranks, count);
    }
  }
}

TEST_F(CommunicatorTest, BackToBackAllReducesStayOrdered) { CheckAllReduce(5, 10007, 4); }

TEST_F(CommunicatorTest, OneRankIsANoOp) { CheckAllReduce(1, 100); }

TEST_F(CommunicatorTest, RejectsBadShapes) {
  EXPECT_EQ(Communicator::Create(*runtime_, {}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(Communicator::Create(*runtime_, {1, 1}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(Communicator::Create(*runtime_, {0, 9}).error().code, ErrorCode::kNotFound);
  auto communicator = Communicator::Create(*runtime_, {0, 1});
  ASSERT_TRUE(communicator.has_value());
  const DeviceAddress one[] = {0};
  EXPECT_EQ((*communicator)->AllReduce(one, 4).error().code, ErrorCode::kInvalidArgument);
}

TEST_F(CommunicatorTest, AbortReleasesRanksBlockedOnADeadPeerAtOnce) {
  auto communicator = Communicator::Create(*runtime_, {0, 1, 2, 3}, {.owner = "train-1"});
  ASSERT_TRUE(communicator.has_value());
  std::vector<Allocation> buffers;
  std::vector<DeviceAddress> addresses;
  for (int r = 0; r < 4; ++r) {
    buffers.push_back(Alloc(1 << 20, (*communicator)->RankStream(r)));
    addresses.push_back(buffers.back().address);
  }
  ASSERT_TRUE(sim_->InjectHang(2).has_value());  // rank 2 stops making progress
  ASSERT_TRUE((*communicator)->AllReduce(addresses, (1 << 20) / 4).has_value());
  const auto stuck = (*communicator)->Synchronize(100ms);
  ASSERT_FALSE(stuck.has_value());
  EXPECT_EQ(stuck.error().code, ErrorCode::kTimeout);
  // Liveness evidence: the hung rank's device saw its work time out (ranks
  // that wait on it may too; the heartbeat tells them apart).
  EXPECT_GE((*runtime_->GetDevice(2))->OpTimeouts(), 1U);

  const auto started = std::chrono::steady_clock::now();
  (*communicator)->Abort("rank 2's device hung");
  const auto released = (*communicator)->Synchronize(5s);
  const auto took = std::chrono::steady_clock::now() - started;
  ASSERT_FALSE(released.has_value());
  EXPECT_EQ(released.error().code, ErrorCode::kAborted);
  EXPECT_LT(took, 200ms) << "every rank must be released promptly";
  EXPECT_EQ((*communicator)->AllReduce(addresses, 16).error().code, ErrorCode::kAborted);
  ASSERT_TRUE(sim_->ResetDevice(2).has_value());
  for (int r = 0; r < 4; ++r)
    ASSERT_TRUE(Pool(r).Free(buffers[static_cast<std::size_t>(r)]).has_value());
}

TEST_F(CommunicatorTest, ABrokenLinkFailsTheCollective) {
  auto communicator = Communicator::Create(*runtime_, {0, 1, 2});
  ASSERT_TRUE(communicator.has_value());
  std::vector<Allocation> buffers;
  std::vector<DeviceAddress> addresses;
  for (int r = 0; r < 3; ++r) {
    buffers.push_back(Alloc(4096, (*communicator)->RankStream(r)));
    addresses.push_back(buffers.back().address);
  }
  ASSERT_TRUE(sim_->InjectLinkError(1, 2).has_value());
  // Rank 1's copy to rank 2 fails. The failure is asynchronous: it shows
  // either while the ring is still being enqueued (rank 1's stream has
  // already failed) or when the ranks are synchronized.
  const auto enqueued = (*communicator)->AllReduce(addresses, 1024);
  const auto status = enqueued ? (*communicator)->Synchronize(200ms) : enqueued;
  ASSERT_FALSE(status.has_value());
  EXPECT_TRUE(status.error().code == ErrorCode::kDeviceFault ||
              status.error().code == ErrorCode::kTimeout)
      << status.error().ToString();
  // The other ranks wait on rank 1 until the job aborts the communicator.
  (*communicator)->Abort("link 1-2 down");
  EXPECT_FALSE((*communicator)->Synchronize(5s).has_value());
}

}  // namespace
}  // namespace rasd::runtime::testing
