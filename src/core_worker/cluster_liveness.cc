#include "src/core_worker/cluster_liveness.h"

#include <cmath>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace troupe {
namespace {

constexpr char kClusterUnreachableUrl[] = "type.troupe.dev/ClusterUnreachable";

std::string Seconds(absl::Duration d) {
  return absl::StrCat(std::round(absl::ToDoubleSeconds(d) * 10) / 10);
}

}  // namespace

absl::Status ClusterUnreachableStatus(const std::string& message) {
  absl::Status status = absl::UnavailableError(message);
  status.SetPayload(kClusterUnreachableUrl, absl::Cord("1"));
  return status;
}

bool IsClusterUnreachable(const absl::Status& status) {
  return status.GetPayload(kClusterUnreachableUrl).has_value();
}

ClusterLiveness::ClusterLiveness(Options options, const Clock* clock, Probe probe_gcs,
                                 Probe probe_raylet,
                                 std::function<void(const absl::Status&)> on_unreachable)
    : options_(std::move(options)),
      clock_(clock),
      probe_gcs_(std::move(probe_gcs)),
      probe_raylet_(std::move(probe_raylet)),
      on_unreachable_(std::move(on_unreachable)),
      last_reachable_(clock_->Now()) {}

void ClusterLiveness::Check() {
  {
    absl::MutexLock lock(&mu_);
    if (!unreachable_.ok()) return;  // declared once, for good
  }
  const absl::Status gcs = probe_gcs_();
  const absl::Status raylet = probe_raylet_();
  const absl::Time now = clock_->Now();
  absl::Status declared;
  {
    absl::MutexLock lock(&mu_);
    if (gcs.ok() && raylet.ok()) {
      last_reachable_ = now;
      return;
    }
    const absl::Duration down = now - last_reachable_;
    if (down < options_.reconnect_timeout) return;
    // The probes' messages name their peer (the GCS or the raylet and its address).
    std::string why;
    if (!gcs.ok()) why = std::string(gcs.message());
    if (!raylet.ok()) absl::StrAppend(&why, why.empty() ? "" : "; ", raylet.message());
    unreachable_ = ClusterUnreachableStatus(absl::StrCat(
        "the Troupe cluster at ", options_.gcs_address, " has been unreachable for ", Seconds(down),
        " s (", why,
        "), so this call cannot complete. Check that the cluster is running (`troupe status "
        "--address=",
        options_.gcs_address,
        "`), restart it if needed, and run the driver again; a cluster that takes longer to come "
        "back needs a larger reconnect limit (troupe::Config::gcs_reconnect_timeout_s or "
        "$TROUPE_GCS_RECONNECT_TIMEOUT_S, now ",
        Seconds(options_.reconnect_timeout), " s)"));
    declared = unreachable_;
  }
  if (on_unreachable_) on_unreachable_(declared);
}

absl::Status ClusterLiveness::status() const {
  absl::MutexLock lock(&mu_);
  return unreachable_;
}

}  // namespace troupe
