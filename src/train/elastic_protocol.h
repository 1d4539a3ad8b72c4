// What an elastic DataParallelTrainer run's workers and driver tell each other through the GCS
// KV (the job's namespace, under "train/<group>/", group = the workers' collective group):
//
//   failure/<g>    a survivor's report that a member of generation g failed (first reporter wins)
//   generation/<g> the driver's record of generation g: which ranks of generation g-1 left,
//                  and where each rank of g stands among the nodes (node_rank, local_rank,
//                  local_world_size); written before the groups' declaration of generation g,
//                  so it is there when a worker sees the declaration
//   recovered/<g>  the first step committed in generation g: its number and when
//   ready/<w>      a replacement worker w (numbered after the first placement's workers) is
//                  started and waits to join (it writes when, unix ms)
//   join/<g>       the driver's proposal: replacements wait to join the survivors of
//                  generation g at their next step boundary
//   boundary/<g>   rank 0's answer: the members of generation g all stand at a step boundary
//                  (after the step it names) and wait for the generation that adds them
//   joined/<w>     the generation that adds replacement w (written before it is declared)
//
// Every key names the generation it is about, so a message about an earlier one is never
// mistaken for the current one's.
//
// Plain functions on strings; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe::train::internal {

std::string ElasticPrefix(const std::string& group);  // "train/<group>/"
std::string FailureKey(const std::string& group, int64_t generation);
std::string GenerationKey(const std::string& group, int64_t generation);
std::string RecoveredKey(const std::string& group, int64_t generation);
std::string ReadyKey(const std::string& group, int worker);
std::string JoinKey(const std::string& group, int64_t generation);
std::string BoundaryKey(const std::string& group, int64_t generation);
std::string JoinedKey(const std::string& group, int worker);

struct FailureReport {
  int reporter = -1;     // the reporting member's rank
  int failed_rank = -1;  // the member it names (a rank of the report's generation)
  int64_t step = -1;     // steps the reporter had committed
  int64_t time_ms = 0;   // when the reporter noticed (unix ms)
  std::string reason;    // the CollectiveError's message
};
std::string EncodeFailureReport(const FailureReport& report);
std::optional<FailureReport> DecodeFailureReport(const std::string& text);

// The ranks of the previous generation that left ("2,3"; "" for none).
std::string EncodeRanks(const std::vector<int>& ranks);
std::optional<std::vector<int>> DecodeRanks(const std::string& text);

// Where a rank stands among the nodes of its generation (Context::node_rank, local_rank,
// local_world_size).
struct NodePlace {
  int node_rank = 0;         // its node's number: nodes holding members, in rank order
  int local_rank = 0;        // among the members on its node, in rank order
  int local_world_size = 1;  // the members on its node
  bool operator==(const NodePlace& other) const {
    return node_rank == other.node_rank && local_rank == other.local_rank &&
           local_world_size == other.local_world_size;
  }
};
// Each rank's place, given each rank's node (any id; "" is a node too), by rank: nodes are
// numbered densely in the order of their first rank, so a node that no longer holds a member
// leaves no gap.
std::vector<NodePlace> PlacesByRank(const std::vector<std::string>& node_of_rank);

// The record of a generation (GenerationKey): the ranks of the previous generation that left
// (none for generation 1, or for one that only adds replacements) and each rank's place.
struct GenerationRecord {
  std::vector<int> left;
  std::vector<NodePlace> places;  // by rank of this generation
};
std::string EncodeGenerationRecord(const GenerationRecord& record);
std::optional<GenerationRecord> DecodeGenerationRecord(const std::string& text);

struct Recovered {
  int64_t step = 0;     // the step committed
  int64_t time_ms = 0;  // when (unix ms)
};
std::string EncodeRecovered(const Recovered& recovered);
std::optional<Recovered> DecodeRecovered(const std::string& text);

// `members` lists, by rank, who (any id) holds each rank of a generation; returns those of the
// next generation once the ranks `left` leave: the others keep their order.
std::vector<int> WithoutRanks(const std::vector<int>& members, const std::vector<int>& left);

// What a failure's message says happened to the member: "died" (its connection closed: the
// process exited), "hung" (it made no progress before a deadline), or "failed".
std::string ClassifyFailure(const std::string& reason);

int64_t UnixMs();

}  // namespace troupe::train::internal
