// ResNet18 on FashionMNIST with data-parallel workers (docs/train.md):
//
//   bazel-bin/examples/resnet18_fashion_mnist/resnet18_fashion_mnist --num-workers=2
//       --epochs=10 --limit-batches=0 --lr-schedule=cosine
//
// Short by default (1 epoch of 40 batches per worker) so it finishes in a few minutes.
#include "examples/fashion_mnist/run.h"

int main(int argc, char** argv) {
  return fashion_mnist::RunExample(argc, argv, "resnet18_fashion_mnist", "resnet18",
                                   /*default_epochs=*/1, /*default_limit_batches=*/40);
}
