#include "src/common/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "src/common/ids.h"

namespace troupe {
namespace {

struct DigestContext {
  DigestContext() : ctx(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr); }
  ~DigestContext() { EVP_MD_CTX_free(ctx); }
  void Update(const void* data, size_t size) { EVP_DigestUpdate(ctx, data, size); }
  std::string HexDigest() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_DigestFinal_ex(ctx, digest, &length);
    return BytesToHex(std::string_view(reinterpret_cast<char*>(digest), length));
  }
  EVP_MD_CTX* ctx;
};

}  // namespace

std::string Sha256Hex(const std::string& data) {
  DigestContext context;
  context.Update(data.data(), data.size());
  return context.HexDigest();
}

absl::StatusOr<std::string> Sha256OfFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path + ": " + std::strerror(errno));
  DigestContext context;
  std::vector<char> chunk(1 << 20);
  while (in) {
    in.read(chunk.data(), chunk.size());
    context.Update(chunk.data(), static_cast<size_t>(in.gcount()));
  }
  return context.HexDigest();
}

}  // namespace troupe
