// Raylet's introspection handlers (declared in raylet.h): what the head's state API and
// `troupe memory|logs` read from each node. Read-only; gRPC threads.
#include <filesystem>

#include "src/raylet/node_logs.h"
#include "src/raylet/raylet.h"

namespace troupe {

absl::Status Raylet::HandleListStoreObjects(const rpc::ListStoreObjectsRequest&,
                                            rpc::ListStoreObjectsReply* reply) {
  reply->set_node_id(options_.node_id.Binary());
  // Who holds which pin: copied under the lock, matched to the store's list after.
  absl::flat_hash_map<ObjectId, std::vector<std::pair<WorkerId, int>>> readers;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [reader, pins] : pins_by_reader_) {
      for (const auto& [id, count] : pins) readers[id].emplace_back(reader, count);
    }
  }
  for (const StoredObjectInfo& info : object_store_.List()) {
    rpc::StoreObject* out = reply->add_objects();
    out->set_object_id(info.id.Binary());
    out->set_size(info.size);
    if (!info.owner.worker_id.IsNil()) out->set_owner_worker_id(info.owner.worker_id.Binary());
    if (!info.owner.node_id.IsNil()) out->set_owner_node_id(info.owner.node_id.Binary());
    out->set_primary(info.primary);
    out->set_spilled(info.spilled);
    out->set_sealed(info.sealed);
    out->set_pins(info.pins);
    int attributed = 0;
    if (auto it = readers.find(info.id); it != readers.end()) {
      for (const auto& [reader, count] : it->second) {
        rpc::ReaderPin* pin = out->add_reader_pins();
        pin->set_worker_id(reader.Binary());
        pin->set_count(count);
        attributed += count;
      }
    }
    if (info.pins > attributed) {  // readers that gave no worker ID
      out->add_reader_pins()->set_count(info.pins - attributed);
    }
  }
  return absl::OkStatus();
}

absl::Status Raylet::HandleListNodeWorkers(const rpc::ListNodeWorkersRequest&,
                                           rpc::ListNodeWorkersReply* reply) {
  reply->set_node_id(options_.node_id.Binary());
  for (const WorkerPool::WorkerState& state : worker_pool_.Describe()) {
    rpc::NodeWorker* out = reply->add_workers();
    out->set_worker_id(state.worker->worker_id.Binary());
    out->set_pid(state.worker->pid);
    out->set_state(!state.registered ? "STARTING" : state.idle ? "IDLE" : "LEASED");
    out->set_job_id(state.worker->job_id.Binary());
    out->set_log_file(std::filesystem::path(state.worker->log_path).filename().string());
    out->set_cuda_visible_devices(state.worker->cuda_visible_devices);
  }
  return absl::OkStatus();
}

absl::Status Raylet::HandleListLogFiles(const rpc::ListLogFilesRequest&,
                                        rpc::ListLogFilesReply* reply) {
  reply->set_node_id(options_.node_id.Binary());
  for (const LogFileEntry& file : ListLogFiles(options_.session_dir + "/logs")) {
    rpc::LogFileInfo* out = reply->add_files();
    out->set_name(file.name);
    out->set_size(file.size);
    out->set_mtime_ms(file.mtime_ms);
  }
  return absl::OkStatus();
}

absl::Status Raylet::HandleReadLogFile(const rpc::ReadLogFileRequest& request,
                                       rpc::ReadLogFileReply* reply) {
  auto chunk = ReadLogFile(options_.session_dir + "/logs", request.name(), request.offset(),
                           request.lines(), request.max_bytes());
  if (!chunk.ok()) return chunk.status();
  reply->set_data(std::move(chunk->data));
  reply->set_offset(chunk->offset);
  reply->set_next_offset(chunk->next_offset);
  reply->set_size(chunk->size);
  return absl::OkStatus();
}

}  // namespace troupe
