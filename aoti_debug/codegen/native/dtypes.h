// Element types: the torch name, pickled storage class and checksum unit of each
// dtype the runtime reads; device names as torch prints them.
#ifndef AOTI_DEBUG_PART_DTYPES_H
#define AOTI_DEBUG_PART_DTYPES_H

#include <cstdint>
#include <string>

#include "constants.h"
#include "interface.h"

namespace AOTI_DEBUG_NS {
namespace {

struct TypeInfo {
  const char* name;     // torch dtype name without "torch."
  const char* storage;  // the pickled storage class (torch.FloatStorage or a dtype)
  int unit;             // bytes per checksum unit (complex: one part)
  int units;            // units per element (2 for complex)
  bool floating;
};

const TypeInfo* type_info(int32_t dt) {
  static const TypeInfo kF32i{"float32", "FloatStorage", 4, 1, true};
  static const TypeInfo kF64i{"float64", "DoubleStorage", 8, 1, true};
  static const TypeInfo kF16i{"float16", "HalfStorage", 2, 1, true};
  static const TypeInfo kBF16i{"bfloat16", "BFloat16Storage", 2, 1, true};
  static const TypeInfo kI64i{"int64", "LongStorage", 8, 1, false};
  static const TypeInfo kI32i{"int32", "IntStorage", 4, 1, false};
  static const TypeInfo kI16i{"int16", "ShortStorage", 2, 1, false};
  static const TypeInfo kI8i{"int8", "CharStorage", 1, 1, false};
  static const TypeInfo kU8i{"uint8", "ByteStorage", 1, 1, false};
  static const TypeInfo kBooli{"bool", "BoolStorage", 1, 1, false};
  static const TypeInfo kC64i{"complex64", "ComplexFloatStorage", 4, 2, true};
  static const TypeInfo kC128i{"complex128", "ComplexDoubleStorage", 8, 2, true};
  static const TypeInfo kC32i{"complex32", "complex32", 2, 2, true};
  static const TypeInfo kU16i{"uint16", "uint16", 2, 1, false};
  static const TypeInfo kU32i{"uint32", "uint32", 4, 1, false};
  static const TypeInfo kU64i{"uint64", "uint64", 8, 1, false};
  static const TypeInfo kE4M3{"float8_e4m3fn", "float8_e4m3fn", 1, 1, true};
  static const TypeInfo kE5M2{"float8_e5m2", "float8_e5m2", 1, 1, true};
  static const TypeInfo kE4M3Z{"float8_e4m3fnuz", "float8_e4m3fnuz", 1, 1, true};
  static const TypeInfo kE5M2Z{"float8_e5m2fnuz", "float8_e5m2fnuz", 1, 1, true};
  switch (dt) {
    case kF32: return &kF32i;
    case kF64: return &kF64i;
    case kF16: return &kF16i;
    case kBF16: return &kBF16i;
    case kI64: return &kI64i;
    case kI32: return &kI32i;
    case kI16: return &kI16i;
    case kI8: return &kI8i;
    case kU8: return &kU8i;
    case kBool: return &kBooli;
    case kC64: return &kC64i;
    case kC128: return &kC128i;
    case kC32: return &kC32i;
    case kU16: return &kU16i;
    case kU32: return &kU32i;
    case kU64: return &kU64i;
    case kF8E4M3FN: return &kE4M3;
    case kF8E5M2: return &kE5M2;
    case kF8E4M3FNUZ: return &kE4M3Z;
    case kF8E5M2FNUZ: return &kE5M2Z;
    default: return nullptr;
  }
}

std::string device_string(int32_t type, int32_t index) {
  if (type == kDeviceCpu) return "cpu";
  if (type == kDeviceCuda) return "cuda:" + std::to_string(index);
  return "device" + std::to_string(type) + ":" + std::to_string(index);
}


}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_DTYPES_H
