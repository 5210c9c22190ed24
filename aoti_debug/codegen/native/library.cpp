// The runtime as a shared library, built once per content hash and compiler by
// aoti_debug/codegen/native_library.py and loaded by JIT cpp_wrapper modules
// (glue_library.h): every part, every level. Exports the two entry points, the ABI
// check and (state.h) aoti_debug_runtime_warnings; everything else is internal.
#include "entry.h"

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
