// Troupe::train outside the repository: two CPU workers all-reduce their ranks through the
// collective group the trainer forms, and report. Exits 0 only when the driver gets the report.
#include <iostream>
#include <vector>

#include "troupe/api.h"
#include "troupe/collective.h"
#include "troupe/train.h"

void TrainLoop(const troupe::train::LoopConfig& config) {
  const auto& context = troupe::train::GetContext();
  std::vector<double> rank = {static_cast<double>(context.world_rank)};
  troupe::collective::AllReduce(rank, troupe::collective::ReduceOp::kSum, context.group);
  troupe::train::Report({{"rank_sum", rank[0]}, {"world_size", double(context.world_size)}});
}
TROUPE_TRAIN_LOOP(TrainLoop);

int main(int argc, char** argv) {
  troupe::Config config;
  config.num_cpus = 4;  // an embedded cluster (unless TROUPE_ADDRESS names one) with room for both
  troupe::Init(config);
  troupe::train::RunConfig run;
  run.storage_path = argc > 1 ? argv[1] : "/tmp/troupe_train_check";
  run.verbose = false;
  troupe::train::DataParallelTrainer trainer(TrainLoop, {}, {.num_workers = 2}, run);
  troupe::train::Result result = trainer.Fit();
  troupe::Shutdown();
  const bool ok = result.error.empty() && result.metrics["rank_sum"] == 1 &&
                  result.metrics["world_size"] == 2;
  std::cout << "rank_sum = " << result.metrics["rank_sum"] << ", world_size = "
            << result.metrics["world_size"] << (result.error.empty() ? "" : ", error: " + result.error)
            << std::endl;
  return ok ? 0 : 1;
}
