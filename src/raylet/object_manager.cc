#include "src/raylet/object_manager.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/rpc/grpc_status.h"
#include "src/rpc/request_validation.h"
#include "src/rpc/server.h"

namespace troupe {

ObjectManager::ObjectManager(ObjectStore* store, const ClusterToken& token)
    : store_(store), token_text_(token.ToString()), auth_(token) {}

absl::Status ObjectManager::Fetch(const ObjectId& id, const std::string& from_raylet_address) {
  {
    absl::MutexLock lock(&mu_);
    if (store_->Contains(id)) return absl::OkStatus();
    if (in_flight_.contains(id)) {
      while (in_flight_.contains(id)) done_.Wait(&mu_);
      auto it = finished_.find(id);
      return it == finished_.end() ? absl::OkStatus() : it->second;
    }
    in_flight_[id] = true;
    finished_.erase(id);
  }
  absl::Status status = Transfer(id, from_raylet_address);
  absl::MutexLock lock(&mu_);
  in_flight_.erase(id);
  if (!status.ok()) finished_[id] = status;
  done_.SignalAll();
  return status;
}

absl::Status ObjectManager::Transfer(const ObjectId& id, const std::string& from) {
  auto stub = rpc::ObjectManagerService::NewStub(MakeChannel(from));
  grpc::ClientContext context;
  AttachToken(&context, token_text_);
  rpc::PullObjectRequest request;
  request.set_object_id(id.Binary());
  request.set_chunk_size(kObjectChunkBytes);
  auto reader = stub->PullObject(&context, request);
  rpc::ObjectChunk chunk;
  int fd = -1;
  char* mapped = nullptr;
  int64_t size = 0, received = 0;
  absl::Status status;
  while (reader->Read(&chunk)) {
    if (fd < 0) {
      size = chunk.total_size();
      auto path = store_->Create(id, size, /*primary=*/false);
      if (!path.ok()) {
        status = path.status();
        context.TryCancel();
        break;
      }
      fd = open(path->c_str(), O_RDWR | O_CLOEXEC);
      if (fd < 0 ||
          (size > 0 && (mapped = static_cast<char*>(
                            mmap(nullptr, size, PROT_WRITE, MAP_SHARED, fd, 0))) == MAP_FAILED)) {
        status =
            absl::InternalError(absl::StrCat("cannot map ", *path, ": ", std::strerror(errno)));
        mapped = nullptr;
        context.TryCancel();
        break;
      }
    }
    if (chunk.offset() + static_cast<int64_t>(chunk.data().size()) > size) {
      status = absl::DataLossError("an object chunk runs past the object's size");
      context.TryCancel();
      break;
    }
    std::memcpy(mapped + chunk.offset(), chunk.data().data(), chunk.data().size());
    received += chunk.data().size();
  }
  grpc::Status finish = reader->Finish();
  if (status.ok() && !finish.ok())
    status = FromGrpcStatus(finish, absl::StrCat("raylet at ", from));
  if (status.ok() && fd < 0) status = absl::NotFoundError("the remote node sent nothing");
  if (status.ok() && received != size) {
    status = absl::DataLossError(absl::StrCat("received ", received, " of ", size, " bytes"));
  }
  if (mapped != nullptr) munmap(mapped, size);
  if (fd >= 0) close(fd);
  if (status.ok()) return store_->Seal(id);
  if (fd >= 0) store_->Abort(id);
  return status;
}

grpc::Status ObjectManager::PullObject(grpc::ServerContext* context,
                                       const rpc::PullObjectRequest* request,
                                       grpc::ServerWriter<rpc::ObjectChunk>* writer) {
  if (grpc::Status auth = auth_.Check(*context); !auth.ok()) return auth;
  if (absl::Status valid = ValidateRequest(*request); !valid.ok()) return ToGrpcStatus(valid);
  auto id = ObjectId::FromBinary(request->object_id());
  if (!id.ok()) return ToGrpcStatus(id.status());
  auto location = store_->Get(*id);
  if (!location.ok()) return ToGrpcStatus(location.status());
  const int64_t chunk_size = request->chunk_size() > 0 ? request->chunk_size() : kObjectChunkBytes;
  int fd = open(location->path.c_str(), O_RDONLY | O_CLOEXEC);
  grpc::Status status = grpc::Status::OK;
  if (fd < 0) {
    status = grpc::Status(grpc::StatusCode::INTERNAL, "cannot open the object's file");
  } else {
    rpc::ObjectChunk chunk;
    chunk.set_object_id(request->object_id());
    chunk.set_total_size(location->size);
    std::string buffer;
    int64_t offset = 0;
    do {
      const int64_t n = std::min(chunk_size, location->size - offset);
      buffer.resize(n);
      if (n > 0 && pread(fd, buffer.data(), n, offset) != n) {
        status = grpc::Status(grpc::StatusCode::INTERNAL, "short read of the object's file");
        break;
      }
      chunk.set_offset(offset);
      chunk.set_data(buffer);
      if (!writer->Write(chunk)) break;  // the puller went away
      offset += n;
    } while (offset < location->size);
    close(fd);
  }
  store_->Release(*id);
  return status;
}

grpc::Status ObjectManager::FreeObjects(grpc::ServerContext* context,
                                        const rpc::FreeObjectsRequest* request,
                                        rpc::FreeObjectsReply*) {
  if (grpc::Status auth = auth_.Check(*context); !auth.ok()) return auth;
  if (absl::Status valid = ValidateRequest(*request); !valid.ok()) return ToGrpcStatus(valid);
  for (const auto& binary : request->object_ids()) {
    if (auto id = ObjectId::FromBinary(binary); id.ok()) store_->Delete(*id);
  }
  return grpc::Status::OK;
}

}  // namespace troupe
