// The interface between generated wrapper code and the C++ runtime: what one
// instrumented launch passes (Site, Arg, Value), what a wrapper owns (Graph, Token),
// the device functions a GPU wrapper lends (DeviceOps) and the entry points' shape.
// Everything here is plain data read the same way by the wrapper side (glue_*.h) and
// by the runtime (the parts, compiled into a library or inlined into an AOTI .so).
#ifndef AOTI_DEBUG_PART_INTERFACE_H
#define AOTI_DEBUG_PART_INTERFACE_H

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "constants.h"

namespace AOTI_DEBUG_NS {

struct Arg {
  const char* name;  // record name (buf3, arg0_1, ks0)
  const char* role;  // input | output | inout
  const char* kind;  // tensor | symint | scalar | unknown (a hint; the C++ type decides)
  const char* expr;  // the wrapper expression, for the record's "expr"
  int index;         // position among this phase's values as the Python runtime counts them
  int uninitialised;         // before a launch: no earlier launch wrote its storage (metadata only)
  const char* volatile_why;  // nondeterministic by contract (an RNG seed): why, or "" if not
  // Before a launch: the earlier launch of this wrapper whose output this input is,
  // unchanged (manager.py's SiteArg.reuse): its site number and the value's position among
  // that site's after args; the record takes that one's stats (records.h). -1: none.
  int reuse_site = -1;
  int reuse_at = -1;
};

struct Site {
  const char* graph;   // subgraph name, "" for the top-level graph
  const char* kernel;  // raw kernel name
  const char* op;      // canonical op name (format.schema.canonical_op)
  schema::Level level;  // config.LEVELS, generated (constants.h)
  int sync;            // AOTI_DEBUG_SYNC at compile time
  int index_base;      // number of "before" values of this launch (record "index")
  int n;               // number of args passed at this phase
  const Arg* args;
  const char* kernels;  // the compile-time kernel filter, for run.json
  const char* phases;   // the compile-time phases, for run.json
  const char* file;     // __FILE__ of the wrapper source
  int line;             // __LINE__ of this call in it
  const char* source;   // what Inductor says the kernel was made from ("" if unknown)
  const char* graph_kind;  // forward | backward | inference ("" if unknown), for run.json
  const char* compile_id;  // Dynamo's compile id of the graph ("" under AOTInductor export)
  int id;                  // the site's number in this wrapper (record "site"; -1: none)
  const char* provenance;  // format.provenance.Provenance as JSON ("" if unknown): sites.jsonl
  // 1: the wrapper calls pending() before whatever may write a tensor this side read (and
  // call_end() at the call's end), so at level stats and print its stats launch may wait and go with
  // the sides after it as one (device_launch.h's PendingRun). 0 (older wrappers, tests): never.
  int defers = 0;
};

// c10::ScalarType values (stable ABI: the same numbers aoti_torch_dtype_*() return).
// Hard-coded so that shim-only hosts need not implement every dtype getter.
enum DType : int32_t {
  kU8 = 0, kI8 = 1, kI16 = 2, kI32 = 3, kI64 = 4, kF16 = 5, kF32 = 6, kF64 = 7,
  kC32 = 8, kC64 = 9, kC128 = 10, kBool = 11, kBF16 = 15, kF8E5M2 = 23,
  kF8E4M3FN = 24, kF8E5M2FNUZ = 25, kF8E4M3FNUZ = 26, kU16 = 27, kU32 = 28, kU64 = 29,
};
constexpr int32_t kDeviceCpu = 0;
constexpr int32_t kDeviceCuda = 1;

struct LazyBase;

// One value handed to launch()/done(): a tensor handle, an ArrayRefTensor (borrowed as a
// new handle, which the runtime deletes after reading it: release()), a scalar with its
// C++ type, or a lazy value (lazy(): an expression the runtime evaluates when it reads
// the value). Trivially copyable and 16 bytes: each value a call site passes costs two
// stores, and a call site needs no cleanup code (wrapper compile time).
class Value {
 public:
  enum Kind : int32_t { kNone, kTensor, kInt, kDouble, kBool, kOther, kBorrowed, kLazy };

  Value(AtenTensorHandle h) : bits_(reinterpret_cast<intptr_t>(h)), kind_(kTensor) {}
  Value(std::nullptr_t) : bits_(0), kind_(kNone) {}

  template <class T>
  Value(const T& x) {
    using U = std::decay_t<T>;
    if constexpr (std::is_same_v<U, bool>) {
      bits_ = x ? 1 : 0;
      kind_ = kBool;
    } else if constexpr (std::is_integral_v<U> || std::is_enum_v<U>) {
      bits_ = static_cast<int64_t>(x);
      kind_ = kInt;
    } else if constexpr (std::is_floating_point_v<U>) {
      double d = static_cast<double>(x);
      std::memcpy(&bits_, &d, sizeof(d));
      kind_ = kDouble;
    } else if constexpr (std::is_base_of_v<LazyBase, U>) {
      bits_ = reinterpret_cast<intptr_t>(static_cast<const LazyBase*>(&x));  // lives until the call returns
      kind_ = kLazy;
    } else if constexpr (std::is_convertible_v<const U&, AtenTensorHandle>) {
      bits_ = reinterpret_cast<intptr_t>(static_cast<AtenTensorHandle>(x));
      kind_ = kTensor;
    } else if constexpr (HasBorrow<U>::value) {
      // ArrayRefTensor (stack-allocation mode): a non-owning tensor over its memory.
      bits_ = reinterpret_cast<intptr_t>(x.borrowAsTensor());
      kind_ = kBorrowed;
    } else {
      bits_ = 0;
      kind_ = kOther;
    }
  }

  // The value of what a lazy value's expression returned: a handle it owns (an RAII
  // handle returned by value) is released into the value, deleted after it is read.
  template <class R>
  static Value take(R&& r) {
    using U = std::decay_t<R>;
    if constexpr (!std::is_lvalue_reference_v<R> && HasRelease<U>::value) {
      return owned(static_cast<AtenTensorHandle>(r.release()));
    } else {
      return Value(r);
    }
  }

  // A handle the runtime deletes after reading it.
  static Value owned(AtenTensorHandle h) {
    Value v(h);
    v.kind_ = kBorrowed;
    return v;
  }

  // A null handle is no tensor (decided here, not at each call site).
  Kind kind() const { return kind_ == kTensor || kind_ == kBorrowed ? (bits_ ? kTensor : kNone) : kind_; }
  AtenTensorHandle handle() const { return reinterpret_cast<AtenTensorHandle>(bits_); }
  int64_t as_int() const { return bits_; }
  double as_double() const {
    double d;
    std::memcpy(&d, &bits_, sizeof(d));
    return d;
  }
  const LazyBase* lazy() const { return kind_ == kLazy ? reinterpret_cast<const LazyBase*>(bits_) : nullptr; }
  // Deletes the handles borrowed for `values` (once, after they were read).
  static void release(const Value* values, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (values[i].kind_ == kBorrowed && values[i].bits_) aoti_torch_delete_tensor_object(values[i].handle());
    }
  }

 private:
  template <class U, class = void>
  struct HasBorrow : std::false_type {};
  template <class U>
  struct HasBorrow<U, std::void_t<decltype(std::declval<const U&>().borrowAsTensor())>>
      : std::true_type {};
  template <class U, class = void>
  struct HasRelease : std::false_type {};
  template <class U>
  struct HasRelease<U, std::void_t<decltype(static_cast<AtenTensorHandle>(std::declval<U&>().release()))>>
      : std::true_type {};

  int64_t bits_;
  Kind kind_;
};

// An argument expression that makes something (a reinterpreted view), evaluated by the
// runtime only when it reads the value, in code of its own: written inline in the
// wrapper's function, each such expression would add a shim call, an error check and
// an RAII cleanup to that (large) function before and after the launch.
struct LazyBase {
  Value (*eval)(const LazyBase* self);
};

template <class F>
struct Lazy : LazyBase {
  F fn;
  explicit Lazy(F f) : LazyBase{&Lazy::run}, fn(f) {}
  static Value run(const LazyBase* self) { return Value::take(static_cast<const Lazy*>(self)->fn()); }
};

// Emitted as lazy([&]() -> decltype(auto) { return EXPR; }).
template <class F>
Lazy<F> lazy(F f) {
  return Lazy<F>(f);
}

// The commonest such expression, a view of a tensor handle
// (wrap_with_raii_handle_if_needed(reinterpret_tensor_wrapper(base, ndim, sizes, strides,
// offset))), as plain data: no template, no function of its own per call site.
struct View : LazyBase {
  AtenTensorHandle base;
  int64_t ndim;
  const int64_t* sizes;
  const int64_t* strides;
  int64_t offset;
  static Value make(const LazyBase* self) {
    const View* v = static_cast<const View*>(self);
    AtenTensorHandle out = nullptr;
    if (aoti_torch__reinterpret_tensor(v->base, v->ndim, v->sizes, v->strides, v->offset, &out) != 0) {
      return Value(nullptr);
    }
    return Value::owned(out);
  }
};

inline View view(AtenTensorHandle base, int64_t ndim, const int64_t* sizes, const int64_t* strides, int64_t offset) {
  return View{{&View::make}, base, ndim, sizes, strides, offset};
}

// The CUDA runtime functions a GPU wrapper lends the runtime (the runtime itself links
// no CUDA: one build serves CPU and GPU wrappers). Return codes: 0 is success.
struct DeviceOps {
  int (*synchronize)();                                  // cudaDeviceSynchronize
  const char* (*error_string)(int error);                // cudaGetErrorString
  int (*copy_to_host)(void* dst, const void* src, size_t n);  // cudaMemcpy, device to host
  int (*alloc_host)(void** p, size_t n);                 // cudaMallocHost (pinned)
  void (*free_host)(void* p);                            // cudaFreeHost
  void (*clear_error)();                                 // cudaGetLastError
  int (*device_name)(char* buf, size_t cap);             // the current device's name
  int (*current_stream)(int32_t device, void** stream);  // torch's (the wrapper's); device_stats.h
  const unsigned char* stats_pack;  // stats kernels linked into this .so (AOTI), or null
  const char* stats_pack_file;      // ... or their file (cpp_wrapper), or ""
};

// One per wrapper .so (a static of its glue): the runtime keeps that graph's label and
// per-kernel call counts behind `state`; its address also names the .so (dladdr).
struct Graph {
  void* state;
  const DeviceOps* device;  // null in CPU wrappers
};

// Per thread and wrapper: the launch number and kernel call that launch() handed out,
// for the done() of the same launch (a nested graph's launches must not change it).
struct Token {
  int64_t launch;
  int64_t call;
};

// The entry points (runtime side: entry.h; exported by the JIT library as
// aoti_debug_rt_launch / aoti_debug_rt_done). They never throw, and release the values.
using EntryFn = void (*)(Graph* graph, Token* token, const Site* site, const Value* values, size_t n);

}  // namespace AOTI_DEBUG_NS

// The glue's launch()/done(): out of line (no inlining, and with GCC no
// interprocedural cloning per constant Site), so that a call site is a few instructions.
#if defined(__GNUC__) && !defined(__clang__)
#define AOTI_DEBUG_GLUE_FN [[maybe_unused]] __attribute__((noipa))
#elif defined(__GNUC__)
#define AOTI_DEBUG_GLUE_FN [[maybe_unused]] __attribute__((noinline))
#else
#define AOTI_DEBUG_GLUE_FN [[maybe_unused]]
#endif
// done() throws only for AOTI_DEBUG_SYNC in GPU wrappers; elsewhere neither entry point
// does, and a call site needs no unwinding code.
#ifdef AOTI_DEBUG_CUDA
#define AOTI_DEBUG_DONE_NOEXCEPT
#else
#define AOTI_DEBUG_DONE_NOEXCEPT noexcept
#endif

// The namespace generated call sites spell (cpp_runtime.NAMESPACE): a fixed
// name for the emitted code, an alias of the namespace derived from the runtime's
// content hash (AOTI_DEBUG_NS), which is what its symbols carry.
namespace aoti_debug_rt_1 = AOTI_DEBUG_NS;

#endif  // AOTI_DEBUG_PART_INTERFACE_H
