// The runtime as a static object for AOTInductor packages, built once per content hash,
// compiler, flags and level features (AOTI_DEBUG_WITH_RECORDS, AOTI_DEBUG_WITH_FILES) by
// aoti_debug/codegen/native_object.py, with -fPIC and hidden visibility, and linked into
// each package, whose wrapper compiles only glue_linked.h. The package needs nothing of
// aoti_debug where it runs. It exports only what state.h gives default visibility on
// purpose: the process-wide state (STB_GNU_UNIQUE) and aoti_debug_runtime_warnings.
#include "entry.h"
#define AOTI_DEBUG_OBJECT_SOURCE 1  // glue_linked.h: its declarations of the entry points only
#include "glue_linked.h"

namespace AOTI_DEBUG_NS {

void linked_launch(Graph* graph, Token* token, const Site* site, const Value* values, size_t n) noexcept {
  entry_launch(graph, token, site, values, n);
}

void linked_done(Graph* graph, Token* token, const Site* site, const Value* values, size_t n) noexcept {
  entry_done(graph, token, site, values, n);
}

void linked_call_end(Graph* graph) noexcept { entry_call_end(graph); }

void linked_pending(Graph* graph) noexcept { entry_pending(graph); }

}  // namespace AOTI_DEBUG_NS
