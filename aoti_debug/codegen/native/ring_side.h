// A planned CUDA launch side of the Python runtime at level stats in one C call
// (runtime/hooks.py GraphHandle._planned_rows; fused_stats.side_spec writes `spec`): the
// side's values checked against the plan they were planned from, as SidePlan.matches
// checks them (a tensor's dtype, device, shape and stride, read from its TensorImpl; a
// scalar's type and value), its ring tensors against the addresses the kept launches
// read, and those launches repeated into the side's ring rows (cu::launch_kept). What
// matches(), the address check and fused_stats._launch_side do in Python, ~20 us a side
// on an H100 host, without the interpreter between the values. Where this cannot decide
// (a tensor subclass, a tensor without a TensorImpl that reads, no CUDA context of the
// plan's device), it says so and the Python path decides. Only where the build found
// how torch's Python tensor object holds its tensor (AOTI_DEBUG_THPVARIABLE) and the
// probe of cpu_values_function agrees; the Python path stays for everything else.
#ifndef AOTI_DEBUG_PART_RING_SIDE_H
#define AOTI_DEBUG_PART_RING_SIDE_H

#include "cpu_values.h"  // first: Python.h ahead of the standard headers

#include <cmath>
#include <cstdint>
#include <cstring>

#include "device_driver.h"

namespace AOTI_DEBUG_NS {
namespace {

// `spec` (int64; fused_stats.side_spec): kSideHeader entries, then one item per value, in
// the side's order. Header: layout, the spec's length (int64s), value count, the kept
// launches' spec (0: none), the device ordinal they run on, whether the ring rows must be
// 16-byte aligned (1) or not (0).
constexpr int64_t kSideLayout = 1;
constexpr int kSideHeader = 6;
// Items: a ring tensor (kind, dtype code, device type, device index, ndim, sizes, strides,
// address), a tensor read for its metadata only (the same without the address), an int
// (kind, value), None (kind), a bool (kind, 0 or 1), a float (kind, its double's bits).
enum SideItem : int64_t { kSideRing = 0, kSideTensor = 1, kSideInt = 2, kSideNone = 3, kSideBool = 4, kSideFloat = 5 };
// Results (fused_stats reads them): launched; a value is not what the plan was made from
// (the full path records the side); every value matches but a ring tensor moved (the
// caller summarises the side again); this function cannot decide (the Python path does).
// A launch that failed: kSideCuda + its CUresult (the launches before it were made), or
// kSideNoDriver (nothing launched).
constexpr int kSideLaunched = 0, kSideMismatch = 1, kSideMoved = 2, kSideNotHere = 3, kSideNoDriver = 4;
constexpr int kSideCuda = 1000;

#if AOTI_DEBUG_THPVARIABLE
// One tensor item at `p` against `v` (a torch.Tensor or Parameter); `moved` set where a
// ring tensor is at another address. kSideLaunched (it matches), kSideMismatch or kSideNotHere.
int side_tensor(PyObject* v, const int64_t*& p, const int64_t* end, bool& moved) {
  if (end - p < 5) return kSideNotHere;
  const bool ring = p[0] == kSideRing;
  const int64_t ndim = p[4];
  if (ndim < 0 || end - p < 5 + 2 * ndim + (ring ? 1 : 0)) return kSideNotHere;
  const int64_t* item = p;
  p += 5 + 2 * ndim + (ring ? 1 : 0);
  c10::TensorImpl* impl = reinterpret_cast<TensorObject*>(v)->impl;
  if (!impl || impl == c10::UndefinedTensorImpl::singleton()) return kSideNotHere;
  try {
    if (static_cast<int64_t>(impl->dtype().toScalarType()) != item[1]) return kSideMismatch;
    if (impl->layout() != c10::kStrided) return kSideMismatch;
    const c10::Device device = impl->device();
    if (static_cast<int64_t>(device.type()) != item[2] || static_cast<int64_t>(device.index()) != item[3]) {
      return kSideMismatch;
    }
    const c10::IntArrayRef sizes = impl->sizes();
    const c10::IntArrayRef strides = impl->strides();
    if (static_cast<int64_t>(sizes.size()) != ndim || static_cast<int64_t>(strides.size()) != ndim) {
      return kSideMismatch;
    }
    for (int64_t d = 0; d < ndim; ++d) {
      if (sizes[d] != item[5 + d] || strides[d] != item[5 + ndim + d]) return kSideMismatch;
    }
    if (ring) {
      // A negated view reads its memory negated: the kept launches never read one.
      if (impl->is_neg() || impl->is_conj()) return kSideMismatch;
      if (static_cast<int64_t>(reinterpret_cast<intptr_t>(impl->mutable_data())) != item[5 + 2 * ndim]) moved = true;
    }
  } catch (...) {  // c10::Error: symbolic sizes, no storage
    return kSideNotHere;
  }
  return kSideLaunched;
}

// The check of `values` against `spec`, then its kept launches into ring rows from `out`
// (k_total rows from it to the segment's end, as _launch_side passes): one of the
// kSide* results, or -1 with a Python exception set. ring_side and the express side
// (ring_express.h) both call it.
int side_call(const int64_t* spec, PyObject* values, int64_t out, int64_t k_total) {
  const CpuValuesConfig& c = cpu_values_config();
  if (!spec || !c.direct || spec[0] != kSideLayout || spec[1] < kSideHeader ||
      (!PyTuple_Check(values) && !PyList_Check(values))) {
    return kSideNotHere;
  }
  const int64_t count = spec[2];
  if (PySequence_Fast_GET_SIZE(values) != count) return kSideMismatch;
  PyObject** items = PySequence_Fast_ITEMS(values);
  const int64_t* p = spec + kSideHeader;
  const int64_t* end = spec + spec[1];
  bool moved = false;
  for (int64_t i = 0; i < count; ++i) {
    PyObject* v = items[i];
    if (p >= end) return kSideNotHere;
    const int64_t kind = p[0];
    int r = kSideLaunched;
    if (kind == kSideRing || kind == kSideTensor) {
      PyTypeObject* type = Py_TYPE(v);
      if (type != c.tensor && type != c.parameter) {
        // Not a plain tensor: a subclass may still match (the Python path asks isinstance).
        return PyType_IsSubtype(type, c.tensor) ? kSideNotHere : kSideMismatch;
      }
      r = side_tensor(v, p, end, moved);
    } else if (end - p < 2 && kind != kSideNone) {
      r = kSideNotHere;
    } else if (kind == kSideInt) {
      int overflow = 0;
      const long long x = PyLong_CheckExact(v) ? PyLong_AsLongLongAndOverflow(v, &overflow) : 0;
      if (!PyLong_CheckExact(v) || overflow || x != p[1]) r = kSideMismatch;
      p += 2;
    } else if (kind == kSideNone) {
      if (v != Py_None) r = kSideMismatch;
      p += 1;
    } else if (kind == kSideBool) {
      if (v != (p[1] ? Py_True : Py_False)) r = kSideMismatch;
      p += 2;
    } else if (kind == kSideFloat) {
      double want;
      std::memcpy(&want, &p[1], sizeof(want));
      // As Python compares: NaN never matches, and -0.0 is not 0.0 (their records differ).
      if (!PyFloat_CheckExact(v) || PyFloat_AS_DOUBLE(v) != want ||
          std::signbit(PyFloat_AS_DOUBLE(v)) != std::signbit(want)) {
        r = kSideMismatch;
      }
      p += 2;
    } else {
      r = kSideNotHere;
    }
    if (PyErr_Occurred()) return -1;
    if (r != kSideLaunched) return r;
  }
  if (moved) return kSideMoved;
  const int64_t* launches = reinterpret_cast<const int64_t*>(static_cast<intptr_t>(spec[3]));
  if (!launches || launches[0] == 0) return kSideLaunched;
  if (spec[5] != ((out % 16) == 0 ? 1 : 0)) return kSideNotHere;
  const cu::Api* api = cu::process_api();
  if (!api) return kSideNoDriver;
  cu::Device current = -1, want = -2;
  if (api->ctx_get_device(&current) != 0 || api->device_get(&want, static_cast<int>(spec[4])) != 0 ||
      current != want) {
    return kSideNotHere;
  }
  const cu::Result r = cu::launch_kept(launches, static_cast<uint64_t>(out), static_cast<int32_t>(k_total));
  return r == 0 ? kSideLaunched : r == -1 ? kSideNoDriver : kSideCuda + r;
}

// side(spec, values, out, k_total) -> int: side_call from Python (the hooks' _planned_rows).
PyObject* ring_side(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4) {
    PyErr_SetString(PyExc_TypeError, "ring side: 4 arguments");
    return nullptr;
  }
  int64_t a[4] = {};
  for (int i : {0, 2, 3}) {
    if (!as_int64(args[i], &a[i])) return nullptr;
  }
  const int r = side_call(reinterpret_cast<const int64_t*>(static_cast<intptr_t>(a[0])), args[1], a[2], a[3]);
  return r < 0 ? nullptr : PyLong_FromLong(r);
}

PyMethodDef ring_side_def = {"ring_side", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&ring_side)),
                             METH_FASTCALL, "One planned CUDA launch side's check and kept launches (ring_side.h)."};
#endif

// The function, configured as cpu_values_function is (the same `config`, the same
// probe): a new reference, None where tensors cannot be read from their TensorImpl here
// (the Python path then checks and launches), or null with an exception set.
PyObject* ring_side_function(PyObject* config) {
  PyObject* made = cpu_values_function(config);
  if (!made) return nullptr;
  Py_DECREF(made);
#if AOTI_DEBUG_THPVARIABLE
  if (cpu_values_config().direct) return PyCFunction_New(&ring_side_def, nullptr);
#endif
  Py_RETURN_NONE;
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_RING_SIDE_H
