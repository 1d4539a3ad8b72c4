#include "src/cli/redis_flags.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace troupe {

void RedisFlags::Register(FlagParser* flags) {
  flags->AddString("redis-address", &address,
                   "host:port of a Redis that keeps the GCS's state, so the GCS can be restarted "
                   "(default: $TROUPE_REDIS_ADDRESS for `start`; none: state is in memory only).");
  flags->AddString("redis-username", &username, "Redis ACL user (default: the default user).");
  flags->AddString("redis-password-file", &password_file,
                   "File holding the Redis password (default: $TROUPE_REDIS_PASSWORD; the "
                   "password itself is never a flag).");
  flags->AddInt("redis-give-up-s", &give_up_s,
                "The GCS exits when Redis has been unreachable this long.");
}

absl::Status RedisFlags::Resolve(bool address_from_env) {
  if (address.empty() && address_from_env) {
    if (const char* env = std::getenv("TROUPE_REDIS_ADDRESS")) address = env;
  }
  if (give_up_s <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--redis-give-up-s must be > 0, got ", give_up_s));
  }
  if (!enabled()) {
    if (!username.empty() || !password_file.empty()) {
      return absl::InvalidArgumentError(
          "--redis-username and --redis-password-file need --redis-address");
    }
    return absl::OkStatus();
  }
  if (address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--redis-address expects HOST:PORT, got '", address, "'"));
  }
  if (!password_file.empty()) {
    std::error_code error;
    auto absolute = std::filesystem::absolute(password_file, error);
    if (!error) password_file = absolute.string();
  }
  return absl::OkStatus();
}

absl::StatusOr<RedisOptions> RedisFlags::ToOptions(const std::string& key_prefix) const {
  RedisOptions options;
  options.address = address;
  options.username = username;
  options.key_prefix = key_prefix;
  options.give_up_after = absl::Seconds(give_up_s);
  if (!password_file.empty()) {
    std::ifstream in(password_file);
    if (!in) {
      return absl::NotFoundError(
          absl::StrCat("cannot read --redis-password-file ", password_file));
    }
    std::stringstream text;
    text << in.rdbuf();
    options.password = std::string(absl::StripTrailingAsciiWhitespace(text.str()));
  } else if (const char* env = std::getenv("TROUPE_REDIS_PASSWORD")) {
    options.password = env;
  }
  return options;
}

std::vector<std::string> RedisFlags::ToArgs() const {
  if (!enabled()) return {};
  std::vector<std::string> args = {absl::StrCat("--redis-address=", address),
                                   absl::StrCat("--redis-give-up-s=", give_up_s)};
  if (!username.empty()) args.push_back(absl::StrCat("--redis-username=", username));
  if (!password_file.empty()) {
    args.push_back(absl::StrCat("--redis-password-file=", password_file));
  }
  return args;
}

std::string RedisKeyPrefix(const std::string& cluster_id_hex) {
  return absl::StrCat("troupe:", cluster_id_hex);
}

}  // namespace troupe
