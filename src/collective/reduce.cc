#include "src/collective/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace troupe::collective {
namespace {

template <typename To, typename From>
To BitCast(From from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof(to));
  return to;
}

template <typename T>
T Combine(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return a + b;
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
  }
  return a;
}

// Integer sums and products wrap around (two's complement), as in NCCL, instead of being
// undefined behaviour.
template <typename T, typename Unsigned>
T CombineInteger(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<T>(static_cast<Unsigned>(a) + static_cast<Unsigned>(b));
    case ReduceOp::kProduct:
      return static_cast<T>(static_cast<Unsigned>(a) * static_cast<Unsigned>(b));
    default:
      return Combine(op, a, b);
  }
}

// One loop per (type, op) so the compiler vectorises it; loads and stores go through memcpy
// because ring-buffer positions need not be aligned for T.
template <typename T, typename F>
void ReduceLoop(char* dst, const char* src, size_t count, F combine) {
  for (size_t i = 0; i < count; ++i) {
    T a, b;
    std::memcpy(&a, dst + i * sizeof(T), sizeof(T));
    std::memcpy(&b, src + i * sizeof(T), sizeof(T));
    a = combine(a, b);
    std::memcpy(dst + i * sizeof(T), &a, sizeof(T));
  }
}

template <typename T>
void ReduceFloat(ReduceOp op, char* dst, const char* src, size_t count) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return ReduceLoop<T>(dst, src, count, [](T a, T b) { return a + b; });
    case ReduceOp::kProduct:
      return ReduceLoop<T>(dst, src, count, [](T a, T b) { return a * b; });
    case ReduceOp::kMin:
      return ReduceLoop<T>(dst, src, count, [](T a, T b) { return std::min(a, b); });
    case ReduceOp::kMax:
      return ReduceLoop<T>(dst, src, count, [](T a, T b) { return std::max(a, b); });
  }
}

template <typename T, typename Unsigned>
void ReduceInteger(ReduceOp op, char* dst, const char* src, size_t count) {
  ReduceLoop<T>(dst, src, count, [op](T a, T b) { return CombineInteger<T, Unsigned>(op, a, b); });
}

// 16-bit floats: widen a block to f32, combine, narrow back.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void Reduce16(ReduceOp op, char* dst, const char* src, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    uint16_t a, b;
    std::memcpy(&a, dst + 2 * i, 2);
    std::memcpy(&b, src + 2 * i, 2);
    const uint16_t out = Narrow(Combine(op, Widen(a), Widen(b)));
    std::memcpy(dst + 2 * i, &out, 2);
  }
}

template <typename T>
void DivideLoop(char* data, size_t count, T divisor) {
  for (size_t i = 0; i < count; ++i) {
    T value;
    std::memcpy(&value, data + i * sizeof(T), sizeof(T));
    value = static_cast<T>(value / divisor);
    std::memcpy(data + i * sizeof(T), &value, sizeof(T));
  }
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void Divide16(char* data, size_t count, float divisor) {
  for (size_t i = 0; i < count; ++i) {
    uint16_t value;
    std::memcpy(&value, data + 2 * i, 2);
    value = Narrow(Widen(value) / divisor);
    std::memcpy(data + 2 * i, &value, 2);
  }
}

}  // namespace

size_t ElementSize(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kUInt8:
      return 1;
  }
  return 1;
}

const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return "f32";
    case DataType::kFloat64:
      return "f64";
    case DataType::kFloat16:
      return "f16";
    case DataType::kBFloat16:
      return "bf16";
    case DataType::kInt32:
      return "i32";
    case DataType::kInt64:
      return "i64";
    case DataType::kUInt8:
      return "u8";
  }
  return "?";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProduct:
      return "prod";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "?";
}

void ReduceInto(DataType dtype, ReduceOp op, void* dst_ptr, const void* src_ptr, size_t count) {
  char* dst = static_cast<char*>(dst_ptr);
  const char* src = static_cast<const char*>(src_ptr);
  switch (dtype) {
    case DataType::kFloat32:
      return ReduceFloat<float>(op, dst, src, count);
    case DataType::kFloat64:
      return ReduceFloat<double>(op, dst, src, count);
    case DataType::kInt32:
      return ReduceInteger<int32_t, uint32_t>(op, dst, src, count);
    case DataType::kInt64:
      return ReduceInteger<int64_t, uint64_t>(op, dst, src, count);
    case DataType::kUInt8:
      return ReduceInteger<uint8_t, uint8_t>(op, dst, src, count);
    case DataType::kFloat16:
      return Reduce16<HalfToFloat, FloatToHalf>(op, dst, src, count);
    case DataType::kBFloat16:
      return Reduce16<BFloat16ToFloat, FloatToBFloat16>(op, dst, src, count);
  }
}

void FinishAverage(DataType dtype, void* data_ptr, size_t count, int world_size) {
  char* data = static_cast<char*>(data_ptr);
  switch (dtype) {
    case DataType::kFloat32:
      return DivideLoop<float>(data, count, world_size);
    case DataType::kFloat64:
      return DivideLoop<double>(data, count, world_size);
    case DataType::kInt32:
      return DivideLoop<int32_t>(data, count, world_size);
    case DataType::kInt64:
      return DivideLoop<int64_t>(data, count, world_size);
    case DataType::kUInt8:
      return DivideLoop<uint8_t>(data, count, world_size);
    case DataType::kFloat16:
      return Divide16<HalfToFloat, FloatToHalf>(data, count, world_size);
    case DataType::kBFloat16:
      return Divide16<BFloat16ToFloat, FloatToBFloat16>(data, count, world_size);
  }
}

float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000) << 16;
  const uint32_t exponent = (half >> 10) & 0x1f;
  uint32_t mantissa = half & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {  // inf / nan
    bits = sign | 0x7f800000 | (mantissa << 13);
  } else if (exponent != 0) {  // normal
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // zero
    bits = sign;
  } else {  // subnormal: normalise
    int shift = 0;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | ((113 - shift) << 23) | ((mantissa & 0x3ff) << 13);
  }
  return BitCast<float>(bits);
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = BitCast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs = bits & 0x7fffffff;
  if (abs >= 0x7f800000) {  // inf / nan
    return sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0);
  }
  if (abs >= 0x477ff000) return sign | 0x7c00;  // rounds to a value above the f16 range
  if (abs < 0x38800000) {                       // below the smallest normal: subnormal or 0
    if (abs < 0x33000000) return sign;          // rounds to zero
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffff) | 0x800000;
    const int shift = 126 - exponent;  // value / 2^-24, as an integer
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t half = ((abs >> 13) - (112 << 10));
  const uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return sign | static_cast<uint16_t>(half);
}

float BFloat16ToFloat(uint16_t value) { return BitCast<float>(static_cast<uint32_t>(value) << 16); }

uint16_t FloatToBFloat16(float value) {
  uint32_t bits = BitCast<uint32_t>(value);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);  // nan
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace troupe::collective
