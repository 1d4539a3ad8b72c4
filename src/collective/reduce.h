// Element types and reduction kernels of the CPU backend. f16 and bf16 are converted to f32,
// combined in f32 and rounded back (round to nearest even) once per combination.
// Stateless; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "troupe/collective.h"

namespace troupe::collective {

size_t ElementSize(DataType dtype);
const char* DataTypeName(DataType dtype);
const char* ReduceOpName(ReduceOp op);

// dst[i] = dst[i] (op) src[i] for i < count. kAvg combines as kSum (see FinishAverage).
void ReduceInto(DataType dtype, ReduceOp op, void* dst, const void* src, size_t count);
// For kAvg: divides the reduced sums by `world_size` (integer division for integer types).
void FinishAverage(DataType dtype, void* data, size_t count, int world_size);

float HalfToFloat(uint16_t half);
uint16_t FloatToHalf(float value);
float BFloat16ToFloat(uint16_t value);
uint16_t FloatToBFloat16(float value);

}  // namespace troupe::collective
