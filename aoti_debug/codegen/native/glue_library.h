// Wrapper side, JIT cpp_wrapper modules: the launch()/done() that generated call sites
// call, forwarding to the runtime library built once (native_library.py) at the path
// the emitter defines as AOTI_DEBUG_LIBRARY. It is loaded at this wrapper's first
// instrumented launch; one instance per process, so every graph shares its state. A
// library that cannot be loaded is one warning, and the model runs uninstrumented.
// Kept small: this is compiled into every wrapper.
#ifndef AOTI_DEBUG_PART_GLUE_LIBRARY_H
#define AOTI_DEBUG_PART_GLUE_LIBRARY_H

#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "glue_cuda.h"
#include "interface.h"

#ifndef _WIN32
#include <dlfcn.h>
#endif

#ifndef AOTI_DEBUG_LIBRARY
#define AOTI_DEBUG_LIBRARY ""
#endif

namespace AOTI_DEBUG_NS {
namespace {

struct Library {
  EntryFn launch;
  EntryFn done;
  void (*call_end)(Graph*);
  void (*pending)(Graph*);
};

__attribute__((cold, noinline)) Library load_library() {
  Library lib = {nullptr, nullptr, nullptr, nullptr};
  const char* path = AOTI_DEBUG_LIBRARY;
  const char* why = nullptr;
#ifdef _WIN32
  why = "the C++ runtime needs POSIX";
#else
  void* h = *path ? ::dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (!*path) {
    why = "the aoti_debug C++ runtime library could not be built when this model was compiled (its log says why)";
  } else if (!h) {
    why = ::dlerror();
  } else {
    auto abi = reinterpret_cast<const char* (*)()>(::dlsym(h, "aoti_debug_rt_abi"));
    lib.launch = reinterpret_cast<EntryFn>(::dlsym(h, "aoti_debug_rt_launch"));
    lib.done = reinterpret_cast<EntryFn>(::dlsym(h, "aoti_debug_rt_done"));
    lib.call_end = reinterpret_cast<void (*)(Graph*)>(::dlsym(h, "aoti_debug_rt_call_end"));
    lib.pending = reinterpret_cast<void (*)(Graph*)>(::dlsym(h, "aoti_debug_rt_pending"));
    if (!abi || !lib.launch || !lib.done || !lib.call_end || !lib.pending ||
        std::strcmp(abi(), AOTI_DEBUG_NS_NAME) != 0) {
      lib = {nullptr, nullptr, nullptr, nullptr};
      why = "it is not the aoti_debug runtime this model was compiled for";
    }
  }
#endif
  if (!lib.launch) {
    std::fflush(stderr);
    std::fprintf(stderr, "[aoti_debug] warning: cannot load the aoti_debug C++ runtime library %s: %s; this model "
                 "runs uninstrumented\n", *path ? path : "(none)", why ? why : "unknown error");
    std::fflush(stderr);
  }
  return lib;
}

const Library& library() {
  static const Library lib = load_library();
  return lib;
}

Graph this_graph = {nullptr, kWrapperDevice};
thread_local Token this_token = {0, 0};

AOTI_DEBUG_GLUE_FN void launch(const Site& site, std::initializer_list<Value> values) noexcept {
  const Library& lib = library();
  if (lib.launch) {
    lib.launch(&this_graph, &this_token, &site, values.begin(), values.size());
  } else {
    Value::release(values.begin(), values.size());
  }
}

AOTI_DEBUG_GLUE_FN void done(const Site& site, std::initializer_list<Value> values) AOTI_DEBUG_DONE_NOEXCEPT {
  if (site.sync) sync_device(site, this_token.launch, values.begin(), values.size());  // a device error propagates
  const Library& lib = library();
  if (lib.done) {
    lib.done(&this_graph, &this_token, &site, values.begin(), values.size());
  } else {
    Value::release(values.begin(), values.size());
  }
}

AOTI_DEBUG_GLUE_FN void call_end() noexcept {
  const Library& lib = library();
  if (lib.call_end) lib.call_end(&this_graph);
}

AOTI_DEBUG_GLUE_FN void pending() noexcept {
  const Library& lib = library();
  if (lib.pending) lib.pending(&this_graph);
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_GLUE_LIBRARY_H
