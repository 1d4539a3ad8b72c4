// Context for docs/api.md's snippets (tests/doc_snippets_test.py): what the snippets use but do
// not show. Declarations only: the snippets are compiled, not linked.
#pragma once

#include <chrono>
#include <iostream>

#include "troupe/api.h"

int Plus(int a, int b);
double Scale(double x, double factor);
int Overloaded(int a, int b);
double Overloaded(double x);

struct Trainer {
  static Trainer* Create();
  int Train(int steps);
};
TROUPE_REMOTE(Trainer::Create, &Trainer::Train);
int Step(int n);
TROUPE_REMOTE(Step);
