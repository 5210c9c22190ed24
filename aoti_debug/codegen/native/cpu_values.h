// One CPU launch side of the Python runtime in one C call (runtime/cpu_records.py,
// Records.values_side): the side's values are read here through the Python C API, packed
// into the spec cpu_records.h reads, numbered (the caller's next_seq, once the side is
// known to be written here) and written. What Records.values_side does in Python, value
// by value and in the same order, without the interpreter between the values: ~1 us a
// side instead of ~3. Compiled into the library where Python's headers are
// (AOTI_DEBUG_WITH_PYTHON, native_library.py); the Python path stays for the others.
// Where the build found how torch's Python tensor object holds its tensor
// (AOTI_DEBUG_THPVARIABLE: native_library.tensor_object_layout) and a probe tensor reads
// the same both ways when the function is made, a tensor's metadata is read from its
// TensorImpl instead of through seven Python attributes.
#ifndef AOTI_DEBUG_PART_CPU_VALUES_H
#define AOTI_DEBUG_PART_CPU_VALUES_H

#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#if AOTI_DEBUG_THPVARIABLE
// torch 2.13's c10 headers use C++20 bit-field initialisers; the runtime is C++17.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wc++20-extensions"
#include <c10/core/TensorImpl.h>
#include <c10/core/UndefinedTensorImpl.h>
#pragma GCC diagnostic pop
#endif

#include "cpu_records.h"

namespace AOTI_DEBUG_NS {
namespace {

// What cpu_values_side returns besides cpu_records' own codes (cpu_records.py reads them).
constexpr int kValuesNotHere = -100;  // a value this path does not write: the dict path records the side
constexpr int kValuesFlatten = -101;  // a list or tuple among the values: the caller flattens the side
constexpr int kValuesSpecSmall = -102;  // the spec buffer is too small: spec[kSlotLength] says how many int64
// Set once per process by cpu_values_function; the objects are kept alive by it.
struct CpuValuesConfig {
  PyObject* codes = nullptr;  // {torch.dtype: (code, itemsize, is_complex)}
  PyTypeObject* tensor = nullptr;
  PyTypeObject* parameter = nullptr;
  PyObject* strided = nullptr;
  int64_t nogil_bytes = 0;
  bool direct = false;  // tensors' metadata read from their TensorImpl (tensor_item_direct)
  PyObject *dtype = nullptr, *layout = nullptr, *is_cpu = nullptr, *is_neg = nullptr, *is_conj = nullptr,
           *shape = nullptr, *stride = nullptr, *data_ptr = nullptr;
};

CpuValuesConfig& cpu_values_config() {
  static CpuValuesConfig c;
  return c;
}

// Appends int64s to the spec while it has room, counting them all.
struct SpecOut {
  int64_t* spec;
  size_t cap;
  size_t at = kCpuHeader;
  void put(int64_t x) {
    if (at < cap) spec[at] = x;
    ++at;
  }
};

// 1: *out holds the attribute's (or method's) truth; 0: an exception is set.
int truth(PyObject* v, PyObject* name, bool call, bool* out) {
  PyObject* r = call ? PyObject_CallMethodNoArgs(v, name) : PyObject_GetAttr(v, name);
  if (!r) return 0;
  *out = r == Py_True;
  Py_DECREF(r);
  return 1;
}

// Appends the ints of a tuple (torch.Size, stride()); 0: an exception is set.
int put_ints(SpecOut& s, PyObject* tuple) {
  const Py_ssize_t n = PyTuple_GET_SIZE(tuple);
  for (Py_ssize_t i = 0; i < n; ++i) {
    long long x = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
    if (x == -1 && PyErr_Occurred()) return 0;
    s.put(x);
  }
  return 1;
}

// One tensor's item (cpu_records.h: kind, text, data, dtype, ndim, shape, strides), read
// in Records.values_side's order. 1: written; 0: not one this path writes; -1: an
// exception is set.
int tensor_item(const CpuValuesConfig& c, SpecOut& s, PyObject* v, const int64_t* slot) {
  PyObject* dtype = PyObject_GetAttr(v, c.dtype);
  if (!dtype) return -1;
  PyObject* kind = PyDict_GetItemWithError(c.codes, dtype);  // borrowed: the dict holds its key
  Py_DECREF(dtype);
  if (!kind) return PyErr_Occurred() ? -1 : 0;
  if (!PyTuple_Check(kind) || PyTuple_GET_SIZE(kind) < 3) return 0;
  const long code = PyLong_AsLong(PyTuple_GET_ITEM(kind, 0));
  if (code == -1 && PyErr_Occurred()) return -1;
  const bool complex = PyObject_IsTrue(PyTuple_GET_ITEM(kind, 2)) == 1;
  PyObject* layout = PyObject_GetAttr(v, c.layout);
  if (!layout) return -1;
  const bool strided = layout == c.strided;
  Py_DECREF(layout);
  if (!strided) return 0;
  bool yes = false;
  if (!truth(v, c.is_cpu, false, &yes)) return -1;
  if (!yes) return 0;
  if (!truth(v, c.is_neg, true, &yes)) return -1;
  if (yes) return 0;
  if (complex) {
    if (!truth(v, c.is_conj, true, &yes)) return -1;
    if (yes) return 0;
  }
  PyObject* shape = PyObject_GetAttr(v, c.shape);
  if (!shape) return -1;
  int ok = 0;
  PyObject* ptr = nullptr;
  PyObject* stride = nullptr;
  long long data = 0;
  if (!PyTuple_Check(shape)) {
    PyErr_SetString(PyExc_TypeError, "a tensor's shape is not a tuple");
    goto done;
  }
  ptr = PyObject_CallMethodNoArgs(v, c.data_ptr);
  if (!ptr) goto done;
  data = PyLong_AsLongLong(ptr);
  if (data == -1 && PyErr_Occurred()) goto done;
  stride = PyObject_CallMethodNoArgs(v, c.stride);
  if (!stride) goto done;
  if (!PyTuple_Check(stride)) {
    PyErr_SetString(PyExc_TypeError, "a tensor's stride() is not a tuple");
    goto done;
  }
  s.put(slot[0]);
  s.put(slot[2]);
  s.put(data);
  s.put(code);
  s.put(PyTuple_GET_SIZE(shape));
  ok = put_ints(s, shape) && put_ints(s, stride);
done:
  Py_DECREF(shape);
  Py_XDECREF(ptr);
  Py_XDECREF(stride);
  return ok ? 1 : -1;
}

#if AOTI_DEBUG_THPVARIABLE
// torch's Python tensor object (python_variable.h's THPVariable), up to its tensor: an
// at::Tensor (1) or a c10::MaybeOwned<at::Tensor> (2), each an intrusive pointer to the
// TensorImpl (after MaybeOwned's flag).
struct TensorObject {
  PyObject_HEAD
#if AOTI_DEBUG_THPVARIABLE == 2
  bool borrowed;
#endif
  c10::TensorImpl* impl;
};

// tensor_item from the TensorImpl: the same answers, in the same order. 1: written; 0:
// not one this path writes; 2: read it through its attributes instead (an undefined
// tensor, or the TensorImpl threw: the attributes raise what Python would).
int tensor_item_direct(SpecOut& s, PyObject* v, const int64_t* slot) {
  c10::TensorImpl* impl = reinterpret_cast<TensorObject*>(v)->impl;
  if (!impl || impl == c10::UndefinedTensorImpl::singleton()) return 2;
  try {
    const int32_t code = static_cast<int32_t>(impl->dtype().toScalarType());
    const TypeInfo* ti = type_info(code);
    if (!ti) return 0;
    if (impl->layout() != c10::kStrided || !impl->is_cpu() || impl->is_neg()) return 0;
    if (ti->units == 2 && impl->is_conj()) return 0;
    const c10::IntArrayRef sizes = impl->sizes();
    const c10::IntArrayRef strides = impl->strides();
    const int64_t data = static_cast<int64_t>(reinterpret_cast<intptr_t>(impl->mutable_data()));  // as data_ptr()
    s.put(slot[0]);
    s.put(slot[2]);
    s.put(data);
    s.put(code);
    s.put(static_cast<int64_t>(sizes.size()));
    for (int64_t x : sizes) s.put(x);
    for (int64_t x : strides) s.put(x);
    return 1;
  } catch (...) {  // c10::Error
    return 2;
  }
}

// Whether `probe` (a plain CPU tensor) reads the same from its TensorImpl as through its
// attributes: the layout the build assumed is this torch's. Clears any exception.
bool direct_reads_agree(const CpuValuesConfig& c, PyObject* probe) {
  if (Py_TYPE(probe) != c.tensor) return false;
  const int64_t slot[3] = {0, 0, 0};
  int64_t a[64] = {}, b[64] = {};
  SpecOut by_attributes{a, 64}, by_impl{b, 64};
  const int ra = tensor_item(c, by_attributes, probe, slot);
  if (ra < 0) PyErr_Clear();
  const int rb = tensor_item_direct(by_impl, probe, slot);
  return ra == 1 && rb == 1 && by_attributes.at == by_impl.at && by_attributes.at <= 64 &&
         std::memcmp(a, b, sizeof(int64_t) * by_attributes.at) == 0;
}
#endif

bool as_int64(PyObject* o, int64_t* out) {
  long long x = PyLong_AsLongLong(o);
  if (x == -1 && PyErr_Occurred()) return false;
  *out = x;
  return true;
}

// side(spec, spec_cap, values, slots, slots_len, texts, texts_len, launch, call, fd, out,
//      out_cap, next_seq) -> int
// `spec`: the caller's buffer of `spec_cap` int64 (at least kCpuHeader); `slots`: per
// value of the plan its (kind as a tensor, kind as an int, text number), `slots_len`
// values; `out`: the output buffer. Returns cpu_records' code (0, -3: a larger output
// buffer, the spec kept for a second call; -4: the write failed, ...) or one of kValues*.
PyObject* cpu_values_side(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 13) {
    PyErr_SetString(PyExc_TypeError, "cpu values side: 13 arguments");
    return nullptr;
  }
  const CpuValuesConfig& c = cpu_values_config();
  int64_t a[13] = {};
  for (int i : {0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11}) {
    if (!as_int64(args[i], &a[i])) return nullptr;
  }
  PyObject* values = args[2];
  if (!PyTuple_Check(values) && !PyList_Check(values)) return PyLong_FromLong(kValuesNotHere);
  PyObject** items = PySequence_Fast_ITEMS(values);
  const int64_t count = std::min<int64_t>(a[4], PySequence_Fast_GET_SIZE(values));
  if (count <= 0 || a[1] < static_cast<int64_t>(kCpuHeader)) return PyLong_FromLong(kValuesNotHere);
  int64_t* spec = reinterpret_cast<int64_t*>(static_cast<intptr_t>(a[0]));
  const int64_t* slots = reinterpret_cast<const int64_t*>(static_cast<intptr_t>(a[3]));
  SpecOut s{spec, static_cast<size_t>(a[1])};
  for (int64_t i = 0; i < count; ++i) {
    PyObject* v = items[i];
    const int64_t* slot = slots + 3 * i;
    PyTypeObject* type = Py_TYPE(v);
    if (type == c.tensor || type == c.parameter) {
#if AOTI_DEBUG_THPVARIABLE
      int r = c.direct ? tensor_item_direct(s, v, slot) : 2;
      if (r == 2) r = tensor_item(c, s, v, slot);
#else
      int r = tensor_item(c, s, v, slot);
#endif
      if (r == 0) return PyLong_FromLong(kValuesNotHere);
      if (r < 0) {
        if (!PyErr_ExceptionMatches(PyExc_RuntimeError)) return nullptr;
        PyErr_Clear();  // a tensor without strides or storage (another layout)
        return PyLong_FromLong(kValuesNotHere);
      }
    } else if (PyLong_CheckExact(v)) {
      int overflow = 0;
      long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
      if (overflow) return PyLong_FromLong(kValuesNotHere);
      if (x == -1 && PyErr_Occurred()) return nullptr;
      s.put(slot[1]);
      s.put(slot[2]);
      s.put(x);
    } else if (v == Py_None) {
      s.put(kItemNone);
      s.put(slot[2]);
    } else if (PyList_Check(v) || PyTuple_Check(v)) {
      return PyLong_FromLong(kValuesFlatten);
    } else {
      return PyLong_FromLong(kValuesNotHere);
    }
  }
  if (s.at > s.cap) {
    spec[kSlotLength] = static_cast<int64_t>(s.at);
    return PyLong_FromLong(kValuesSpecSmall);
  }
  PyObject* n = PyLong_FromLongLong(count);
  if (!n) return nullptr;
  PyObject* first = PyObject_CallOneArg(args[12], n);  // next_seq(count)
  Py_DECREF(n);
  if (!first) return nullptr;
  int64_t seq = 0;
  const bool seq_ok = as_int64(first, &seq);
  Py_DECREF(first);
  if (!seq_ok) return nullptr;
  spec[kSlotLayout] = kCpuLayout;
  spec[kSlotLength] = static_cast<int64_t>(s.at);
  spec[kSlotCount] = count;
  spec[kSlotSeq] = seq;
  spec[kSlotLaunch] = a[7];
  spec[kSlotCall] = a[8];
  spec[kSlotFd] = a[9];
  spec[kSlotTexts] = a[5];
  spec[kSlotTextsLen] = a[6];
  spec[kSlotSave] = static_cast<int64_t>(reinterpret_cast<intptr_t>(&PyEval_SaveThread));
  spec[kSlotRestore] = static_cast<int64_t>(reinterpret_cast<intptr_t>(&PyEval_RestoreThread));
  spec[kSlotNogilBytes] = c.nogil_bytes;
  spec[kSlotOut] = a[10];
  spec[kSlotCap] = a[11];
  spec[kSlotLinesEnd] = spec[kSlotPrintEnd] = spec[kSlotErrno] = 0;
  int rc;
  try {
    rc = cpu_records(spec);
  } catch (...) {  // std::bad_alloc
    rc = -2;
  }
  return PyLong_FromLong(rc);
}

PyMethodDef cpu_values_def = {"cpu_values_side", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(
                                  &cpu_values_side)), METH_FASTCALL, "One CPU launch side's records (cpu_values.h)."};

// The function, configured with (codes, torch.Tensor, torch.nn.Parameter, torch.strided,
// nogil bytes, a probe tensor: non-contiguous, on the CPU), with whether it reads
// tensors from their TensorImpl: (function, bool), a new reference, or null with an
// exception set. Called with the GIL held.
PyObject* cpu_values_function(PyObject* config) {
  CpuValuesConfig& c = cpu_values_config();
  PyObject *codes, *tensor, *parameter, *strided, *probe;
  long long nogil = 0;
  if (!PyArg_ParseTuple(config, "O!OOOLO", &PyDict_Type, &codes, &tensor, &parameter, &strided, &nogil, &probe)) {
    return nullptr;
  }
  if (!PyType_Check(tensor) || !PyType_Check(parameter)) {
    PyErr_SetString(PyExc_TypeError, "cpu values: the tensor types are not types");
    return nullptr;
  }
  if (!c.dtype) {  // the names, once
    c.dtype = PyUnicode_InternFromString("dtype");
    c.layout = PyUnicode_InternFromString("layout");
    c.is_cpu = PyUnicode_InternFromString("is_cpu");
    c.is_neg = PyUnicode_InternFromString("is_neg");
    c.is_conj = PyUnicode_InternFromString("is_conj");
    c.shape = PyUnicode_InternFromString("shape");
    c.stride = PyUnicode_InternFromString("stride");
    c.data_ptr = PyUnicode_InternFromString("data_ptr");
    if (!c.dtype || !c.layout || !c.is_cpu || !c.is_neg || !c.is_conj || !c.shape || !c.stride || !c.data_ptr) {
      c.dtype = nullptr;
      return nullptr;
    }
  }
  // The latest configuration wins (one per process: every Records of it passes the same).
  Py_INCREF(codes);
  Py_INCREF(tensor);
  Py_INCREF(parameter);
  Py_INCREF(strided);
  Py_XDECREF(c.codes);
  Py_XDECREF(reinterpret_cast<PyObject*>(c.tensor));
  Py_XDECREF(reinterpret_cast<PyObject*>(c.parameter));
  Py_XDECREF(c.strided);
  c.codes = codes;
  c.tensor = reinterpret_cast<PyTypeObject*>(tensor);
  c.parameter = reinterpret_cast<PyTypeObject*>(parameter);
  c.strided = strided;
  c.nogil_bytes = nogil;
#if AOTI_DEBUG_THPVARIABLE
  c.direct = direct_reads_agree(c, probe);
#else
  (void)probe;
#endif
  PyObject* fn = PyCFunction_New(&cpu_values_def, nullptr);
  if (!fn) return nullptr;
  return Py_BuildValue("(NO)", fn, c.direct ? Py_True : Py_False);
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_CPU_VALUES_H
