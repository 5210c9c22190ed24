// The runtime as a shared library, built once per content hash and compiler by
// aoti_debug/codegen/native_library.py and loaded by JIT cpp_wrapper modules
// (glue_library.h) and by the Python runtime for its CPU stats and records
// (runtime/native_stats.py, runtime/cpu_records.py): every part, every level. Exports the
// two entry points, the ABI check, the CPU stats, the CPU records, the device-ring
// records, the kept launches of the stats kernel, the tensor-file writer and the dtype names,
// and (state.h) aoti_debug_runtime_warnings; everything else is internal. Built with
// AOTI_DEBUG_WITH_PYTHON (where Python's headers are), it also makes the Python runtime's
// CPU side function (cpu_values.h), its planned CUDA side function (ring_side.h) and
// the hooks of its express launches (ring_express.h).
#if AOTI_DEBUG_WITH_PYTHON
#include "cpu_values.h"  // first: Python.h ahead of the standard headers
#include "ring_side.h"
#include "ring_express.h"
#endif
#include "cpu_records.h"
#include "cpu_summary.h"
#include "entry.h"
#include "pt_writer.h"
#include "ring_records.h"

#define AOTI_DEBUG_EXPORT extern "C" __attribute__((visibility("default")))

// The namespace this library was built with: a module compiled against other sources
// must not call into it (the glue compares it with its own).
AOTI_DEBUG_EXPORT const char* aoti_debug_rt_abi() { return AOTI_DEBUG_NS_NAME; }

AOTI_DEBUG_EXPORT void aoti_debug_rt_launch(AOTI_DEBUG_NS::Graph* graph, AOTI_DEBUG_NS::Token* token,
                                            const AOTI_DEBUG_NS::Site* site, const AOTI_DEBUG_NS::Value* values,
                                            size_t count) {
  AOTI_DEBUG_NS::entry_launch(graph, token, site, values, count);
}

AOTI_DEBUG_EXPORT void aoti_debug_rt_done(AOTI_DEBUG_NS::Graph* graph, AOTI_DEBUG_NS::Token* token,
                                          const AOTI_DEBUG_NS::Site* site, const AOTI_DEBUG_NS::Value* values,
                                          size_t count) {
  AOTI_DEBUG_NS::entry_done(graph, token, site, values, count);
}

AOTI_DEBUG_EXPORT void aoti_debug_rt_call_end(AOTI_DEBUG_NS::Graph* graph) { AOTI_DEBUG_NS::entry_call_end(graph); }

AOTI_DEBUG_EXPORT void aoti_debug_rt_pending(AOTI_DEBUG_NS::Graph* graph) { AOTI_DEBUG_NS::entry_pending(graph); }

// Stats and checksum of CPU tensors for the Python runtime (runtime/native_stats.py);
// the layout of `spec`, `stats` and `checksums`: cpu_summary.h. Never throws.
AOTI_DEBUG_EXPORT int aoti_debug_rt_cpu_summaries(const int64_t* spec, size_t spec_len, size_t count, double* stats,
                                                  uint64_t* checksums, char* text, size_t text_cap) {
  try {
    return AOTI_DEBUG_NS::cpu_summaries(spec, spec_len, count, stats, checksums, text, text_cap);
  } catch (...) {  // std::bad_alloc gathering a strided tensor or formatting
    return -2;
  }
}

// The manifest lines (and print lines) of one launch side of CPU values for the Python
// runtime (runtime/cpu_records.py); the layout of `spec`: cpu_records.h. Never throws.
AOTI_DEBUG_EXPORT int aoti_debug_rt_cpu_records(int64_t* spec) {
  try {
    return AOTI_DEBUG_NS::cpu_records(spec);
  } catch (...) {  // std::bad_alloc
    return -2;
  }
}

#if AOTI_DEBUG_WITH_PYTHON
// The Python runtime's CPU launch side as one C function (cpu_values.h), configured with
// `config`: (function, whether it reads tensors from their TensorImpl), a new reference,
// or null with an exception set. Called with the GIL held (ctypes.PyDLL).
AOTI_DEBUG_EXPORT PyObject* aoti_debug_rt_cpu_values_function(PyObject* config) {
  try {
    return AOTI_DEBUG_NS::cpu_values_function(config);
  } catch (...) {  // std::bad_alloc
    return PyErr_NoMemory();
  }
}

// The Python runtime's planned CUDA launch side as one C function (ring_side.h),
// configured with the `config` of aoti_debug_rt_cpu_values_function: the function, None
// where it cannot read tensors from their TensorImpl, or null with an exception set.
// Called with the GIL held (ctypes.PyDLL).
AOTI_DEBUG_EXPORT PyObject* aoti_debug_rt_ring_side_function(PyObject* config) {
  try {
    return AOTI_DEBUG_NS::ring_side_function(config);
  } catch (...) {  // std::bad_alloc
    return PyErr_NoMemory();
  }
}

// The hooks of the Python runtime's express launches as one C function (ring_express.h),
// reading the globals of `modules` (session, hooks, device_ring, fused_stats): the
// function, None where ring_side_function's is not made here, or null with an exception
// set. Called with the GIL held (ctypes.PyDLL), after aoti_debug_rt_ring_side_function.
AOTI_DEBUG_EXPORT PyObject* aoti_debug_rt_ring_express_function(PyObject* modules) {
  try {
    return AOTI_DEBUG_NS::ring_express_function(modules);
  } catch (...) {  // std::bad_alloc
    return PyErr_NoMemory();
  }
}
#endif

// The manifest lines of device-ring records for the Python runtime's writer thread
// (runtime/ring_records.py); the layout of `spec`: ring_records.h. Never throws.
AOTI_DEBUG_EXPORT int aoti_debug_rt_ring_records(int64_t* spec) {
  try {
    return AOTI_DEBUG_NS::ring_records(spec);
  } catch (...) {  // std::bad_alloc
    return -2;
  }
}

// The Python runtime's kept launches of its stats kernel (runtime/fused_stats.py,
// `_pack_launches`): one call a launch side instead of one Triton launcher call a
// launch (~16 us of host time each on an H100 host). The layout of `spec`, `out`,
// `k_total` and the result: cu::launch_kept (device_driver.h); `out` and `k_total` are
// the side's ring rows (one call's, passed apart so that two threads never share them).
// Called with the GIL held (ctypes.PyDLL).
AOTI_DEBUG_EXPORT int aoti_debug_rt_kept_launches(const int64_t* spec, uint64_t out, int32_t k_total) {
  return AOTI_DEBUG_NS::cu::launch_kept(spec, out, k_total);
}

// A tensor file as the C++ runtime writes one (pt_writer.h), for the Python runtime's
// writer thread at level save (runtime/native_stats.py, Library.write_pt): `nbytes`
// contiguous bytes at `data`, of c10::ScalarType `code` and shape `shape[0..ndim)`, to
// the new file `path` in the directory `dir_fd` (-1: `path` is a path), made with
// O_EXCL|O_NOFOLLOW. Returns 0; -2 for what this runtime does not write (the caller uses
// torch.save); -1 with the error's text in `err` (at most `cap` bytes, NUL included) when
// the file could not be written (none is left behind). Called without the GIL (ctypes.CDLL).
AOTI_DEBUG_EXPORT int aoti_debug_rt_write_pt(int dir_fd, const char* path, int32_t code, const int64_t* shape,
                                             int32_t ndim, const void* data, uint64_t nbytes, char* err,
                                             size_t cap) {
  try {
    const AOTI_DEBUG_NS::TypeInfo* ti = AOTI_DEBUG_NS::type_info(code);
    if (!ti || !path || ndim < 0 || (ndim && !shape) || (nbytes && !data)) return -2;
    std::vector<int64_t> dims(shape, shape + ndim);
    int64_t numel = 1;
    for (int64_t d : dims) {
      if (d < 0) return -2;
      numel *= d;
    }
    if (static_cast<uint64_t>(numel) * static_cast<uint64_t>(ti->unit * ti->units) != nbytes) return -2;
    const std::string e =
        AOTI_DEBUG_NS::write_pt_at(dir_fd >= 0 ? dir_fd : AT_FDCWD, path, path, *ti, dims, numel, data, nbytes, false);
    if (e.empty()) return 0;
    if (err && cap) {
      const size_t n = std::min(cap - 1, e.size());
      std::memcpy(err, e.data(), n);
      err[n] = '\0';
    }
    return -1;
  } catch (...) {  // std::bad_alloc
    return -2;
  }
}

// The torch name (without "torch.") of a c10::ScalarType code this runtime reads, or
// null: the Python runtime builds its dtype table from this, so the codes live in one place.
AOTI_DEBUG_EXPORT const char* aoti_debug_rt_dtype_name(int32_t code) {
  const AOTI_DEBUG_NS::TypeInfo* ti = AOTI_DEBUG_NS::type_info(code);
  return ti ? ti->name : nullptr;
}
