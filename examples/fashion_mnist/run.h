// The command line of the FashionMNIST training examples: flags → a DataParallelTrainer run.
#pragma once

#include <string>

namespace fashion_mnist {

// Parses the flags, connects (TROUPE_ADDRESS / --address, or an embedded cluster), trains, and
// prints the summary. Returns the process exit code.
int RunExample(int argc, char** argv, const std::string& program, const std::string& model,
               int default_epochs, int default_limit_batches);

}  // namespace fashion_mnist
