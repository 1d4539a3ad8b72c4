// The wire format of the object data port (object_data_server.h), shared by the server and
// DataObjectPuller. All integers are big-endian. One connection carries requests one after
// another, each answered before the next is read.
//   request:  magic "TROD" | version u16 | token length u16 | id length u16 | 0 u16 |
//             offset i64 | length i64 (0: to the end) | token | object id
//   reply:    magic "TROD" | code u32 (absl::StatusCode) | message length u32 | message
//             and when the code is OK:
//             total size i64 | range length i64 | owner worker id length u16 |
//             owner node id length u16 | owner worker id | owner node id | the range's bytes
// After an error reply the server closes the connection.
// Plain functions on byte strings; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace troupe {

inline constexpr uint32_t kObjectDataMagic = 0x54524F44;  // "TROD"
inline constexpr uint16_t kObjectDataVersion = 1;
inline constexpr size_t kDataRequestFixedBytes = 28;
inline constexpr size_t kDataReplyFixedBytes = 12;
inline constexpr size_t kDataReplyRangeBytes = 20;
// Bounds on the variable parts, so a peer cannot make the other side allocate much.
inline constexpr size_t kMaxDataTokenBytes = 512;
inline constexpr size_t kMaxDataIdBytes = 64;
inline constexpr size_t kMaxDataMessageBytes = 4096;

struct DataRequest {
  std::string token;
  std::string object_id;  // binary
  int64_t offset = 0;
  int64_t length = 0;
};

struct DataRangeHeader {
  int64_t total_size = 0;
  int64_t length = 0;
  std::string owner_worker_id;  // binary, may be empty
  std::string owner_node_id;
};

std::string EncodeDataRequest(const DataRequest& request);
// The fixed part: how many token and id bytes follow. InvalidArgument for a bad magic or version
// or lengths past the bounds.
struct DataRequestSizes {
  size_t token_bytes;
  size_t id_bytes;
  int64_t offset;
  int64_t length;
};
absl::StatusOr<DataRequestSizes> DecodeDataRequestFixed(const char* fixed);

// An error reply (the message is cut to kMaxDataMessageBytes).
std::string EncodeDataError(const absl::Status& status);
// An OK reply's head, before the range's bytes.
std::string EncodeDataRangeHeader(const DataRangeHeader& header);
// The fixed part of a reply: its code and message length. DataLoss for a bad magic.
struct DataReplySizes {
  absl::StatusCode code;
  size_t message_bytes;
};
absl::StatusOr<DataReplySizes> DecodeDataReplyFixed(const char* fixed);
// The range header's fixed part (kDataReplyRangeBytes): fills sizes and id lengths.
absl::StatusOr<DataRangeHeader> DecodeDataRangeFixed(const char* fixed, size_t* worker_id_bytes,
                                                     size_t* node_id_bytes);

}  // namespace troupe
