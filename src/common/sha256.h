// SHA-256 of files and strings (OpenSSL's libcrypto), in lowercase hex. Used to store
// executables content-addressed. Stateless; thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace troupe {

std::string Sha256Hex(const std::string& data);
absl::StatusOr<std::string> Sha256OfFile(const std::string& path);

}  // namespace troupe
