#include "src/common/gpu_devices.h"

#include "gtest/gtest.h"

namespace troupe {
namespace {

TEST(VisibleDevicesForLeaseTest, IndicesArePhysicalWhenTheRayletSeesEveryGpu) {
  EXPECT_EQ(VisibleDevicesForLease("0,1", nullptr), "0,1");
  EXPECT_EQ(VisibleDevicesForLease("1", ""), "1");
}

TEST(VisibleDevicesForLeaseTest, IndicesAreLookedUpInTheRayletsOwnList) {
  EXPECT_EQ(VisibleDevicesForLease("0", "2,3"), "2");
  EXPECT_EQ(VisibleDevicesForLease("1,2", "4,5,6"), "5,6");
  EXPECT_EQ(VisibleDevicesForLease("0", "GPU-1234abcd,GPU-5678"), "GPU-1234abcd");  // UUIDs
  EXPECT_EQ(VisibleDevicesForLease("7", "2,3"), "7");  // past the list: kept as given
}

// Regression (issue 31 item 3): `troupe train launch` gave a rank the raylet's index unmapped,
// so a raylet under CUDA_VISIBLE_DEVICES=2,3 sent rank 0 to physical GPU 0.
TEST(ChildVisibleDevicesTest, AWorkerThatSeesTheRayletsGpusMapsItsLeaseThroughThem) {
  EXPECT_EQ(ChildVisibleDevices("0", "all", "2,3"), "2");
  EXPECT_EQ(ChildVisibleDevices("1", "all", "2,3"), "3");
  EXPECT_EQ(ChildVisibleDevices("1", "all", nullptr), "1");
  EXPECT_EQ(ChildVisibleDevices("1", nullptr, "2,3"), "3");
}

TEST(ChildVisibleDevicesTest, AMaskedWorkerPassesItsOwnListOn) {
  // The raylet (CUDA_VISIBLE_DEVICES=2,3) already masked this worker, leased index 1, to "3".
  EXPECT_EQ(ChildVisibleDevices("1", "assigned", "3"), "3");
}

TEST(ChildVisibleDevicesTest, NoLeaseSeesNoGpu) {
  EXPECT_EQ(ChildVisibleDevices("", "all", "2,3"), "");
}

}  // namespace
}  // namespace troupe
