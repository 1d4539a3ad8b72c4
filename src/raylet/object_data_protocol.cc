#include "src/raylet/object_data_protocol.h"

#include "absl/strings/str_cat.h"

namespace troupe {
namespace {

template <typename T>
void Put(std::string* out, T value) {
  char bytes[sizeof(T)];
  for (size_t i = 0; i < sizeof(T); ++i) {
    bytes[i] = static_cast<char>(static_cast<uint64_t>(value) >> (8 * (sizeof(T) - 1 - i)));
  }
  out->append(bytes, sizeof(T));
}

template <typename T>
T Get(const char* in) {
  uint64_t value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value = (value << 8) | static_cast<uint8_t>(in[i]);
  return static_cast<T>(value);
}

}  // namespace

std::string EncodeDataRequest(const DataRequest& request) {
  std::string out;
  Put<uint32_t>(&out, kObjectDataMagic);
  Put<uint16_t>(&out, kObjectDataVersion);
  Put<uint16_t>(&out, static_cast<uint16_t>(request.token.size()));
  Put<uint16_t>(&out, static_cast<uint16_t>(request.object_id.size()));
  Put<uint16_t>(&out, 0);
  Put<int64_t>(&out, request.offset);
  Put<int64_t>(&out, request.length);
  out += request.token;
  out += request.object_id;
  return out;
}

absl::StatusOr<DataRequestSizes> DecodeDataRequestFixed(const char* fixed) {
  if (Get<uint32_t>(fixed) != kObjectDataMagic) {
    return absl::InvalidArgumentError("not a Troupe object data request (bad magic)");
  }
  if (const uint16_t version = Get<uint16_t>(fixed + 4); version != kObjectDataVersion) {
    return absl::InvalidArgumentError(absl::StrCat("object data protocol version ", version,
                                                   " is not supported (this raylet speaks ",
                                                   kObjectDataVersion, ")"));
  }
  DataRequestSizes sizes{Get<uint16_t>(fixed + 6), Get<uint16_t>(fixed + 8),
                         Get<int64_t>(fixed + 12), Get<int64_t>(fixed + 20)};
  if (sizes.token_bytes > kMaxDataTokenBytes || sizes.id_bytes > kMaxDataIdBytes) {
    return absl::InvalidArgumentError("an oversized object data request");
  }
  return sizes;
}

std::string EncodeDataError(const absl::Status& status) {
  const std::string message(status.message().substr(0, kMaxDataMessageBytes));
  std::string out;
  Put<uint32_t>(&out, kObjectDataMagic);
  Put<uint32_t>(&out, static_cast<uint32_t>(status.code()));
  Put<uint32_t>(&out, static_cast<uint32_t>(message.size()));
  out += message;
  return out;
}

std::string EncodeDataRangeHeader(const DataRangeHeader& header) {
  std::string out = EncodeDataError(absl::OkStatus());
  Put<int64_t>(&out, header.total_size);
  Put<int64_t>(&out, header.length);
  Put<uint16_t>(&out, static_cast<uint16_t>(header.owner_worker_id.size()));
  Put<uint16_t>(&out, static_cast<uint16_t>(header.owner_node_id.size()));
  out += header.owner_worker_id;
  out += header.owner_node_id;
  return out;
}

absl::StatusOr<DataReplySizes> DecodeDataReplyFixed(const char* fixed) {
  if (Get<uint32_t>(fixed) != kObjectDataMagic) {
    return absl::DataLossError("not a Troupe object data reply (bad magic)");
  }
  const uint32_t code = Get<uint32_t>(fixed + 4);
  const uint32_t message_bytes = Get<uint32_t>(fixed + 8);
  if (code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated) ||
      message_bytes > kMaxDataMessageBytes) {
    return absl::DataLossError("a malformed object data reply");
  }
  return DataReplySizes{static_cast<absl::StatusCode>(code), message_bytes};
}

absl::StatusOr<DataRangeHeader> DecodeDataRangeFixed(const char* fixed, size_t* worker_id_bytes,
                                                     size_t* node_id_bytes) {
  DataRangeHeader header;
  header.total_size = Get<int64_t>(fixed);
  header.length = Get<int64_t>(fixed + 8);
  *worker_id_bytes = Get<uint16_t>(fixed + 16);
  *node_id_bytes = Get<uint16_t>(fixed + 18);
  if (header.total_size < 0 || header.length < 0 || header.length > header.total_size ||
      *worker_id_bytes > kMaxDataIdBytes || *node_id_bytes > kMaxDataIdBytes) {
    return absl::DataLossError("a malformed object data range header");
  }
  return header;
}

}  // namespace troupe
