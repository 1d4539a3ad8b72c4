#include "src/gcs/store_client.h"

#include "absl/synchronization/notification.h"

namespace troupe {

absl::StatusOr<StoreClient::Rows> ScanTableSync(StoreClient* store, const std::string& table) {
  absl::Notification done;
  absl::StatusOr<StoreClient::Rows> rows;
  store->AsyncScan(table, "", [&](absl::StatusOr<StoreClient::Rows> result) {
    rows = std::move(result);
    done.Notify();
  });
  done.WaitForNotification();
  return rows;
}

void PutBestEffort(StoreClient* store, const std::string& table, const std::string& key,
                   std::string value) {
  store->AsyncPut(table, key, std::move(value), /*overwrite=*/true, nullptr);
}

}  // namespace troupe
