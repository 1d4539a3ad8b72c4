// A small MLP (784-512-512-10) on FashionMNIST with data-parallel workers: the quick example.
//
//   bazel-bin/examples/mlp_fashion_mnist/mlp_fashion_mnist --num-workers=2 --epochs=3
#include "examples/fashion_mnist/run.h"

int main(int argc, char** argv) {
  return fashion_mnist::RunExample(argc, argv, "mlp_fashion_mnist", "mlp",
                                   /*default_epochs=*/3, /*default_limit_batches=*/0);
}
