// Wrapper side, AOTInductor .so files: the launch()/done() that generated call sites
// call, forwarding to the runtime object that AOTInductor links into this .so
// (object.cpp, built once by native_object.py): the package needs nothing of aoti_debug
// where it runs, and its wrapper compiles only this glue, not the runtime.
// Kept small: this is compiled into every wrapper.
#ifndef AOTI_DEBUG_PART_GLUE_LINKED_H
#define AOTI_DEBUG_PART_GLUE_LINKED_H

#include <cstddef>
#include <initializer_list>

#include "glue_cuda.h"
#include "interface.h"

namespace AOTI_DEBUG_NS {

// The entry points (entry.h) as the object defines them (object.cpp includes this
// header for these declarations). Hidden: a package exports nothing that its runtime
// inlined would not have exported.
#if defined(__GNUC__)
#define AOTI_DEBUG_HIDDEN __attribute__((visibility("hidden")))
#else
#define AOTI_DEBUG_HIDDEN
#endif
AOTI_DEBUG_HIDDEN void linked_launch(Graph* graph, Token* token, const Site* site, const Value* values,
                                     size_t n) noexcept;
AOTI_DEBUG_HIDDEN void linked_done(Graph* graph, Token* token, const Site* site, const Value* values,
                                   size_t n) noexcept;
AOTI_DEBUG_HIDDEN void linked_call_end(Graph* graph) noexcept;
AOTI_DEBUG_HIDDEN void linked_pending(Graph* graph) noexcept;

#ifndef AOTI_DEBUG_OBJECT_SOURCE  // the wrapper's side
namespace {

Graph this_graph = {nullptr, kWrapperDevice};
thread_local Token this_token = {0, 0};

AOTI_DEBUG_GLUE_FN void launch(const Site& site, std::initializer_list<Value> values) noexcept {
  linked_launch(&this_graph, &this_token, &site, values.begin(), values.size());
}

AOTI_DEBUG_GLUE_FN void done(const Site& site, std::initializer_list<Value> values) AOTI_DEBUG_DONE_NOEXCEPT {
  if (site.sync) sync_device(site, this_token.launch, values.begin(), values.size());  // a device error propagates
  linked_done(&this_graph, &this_token, &site, values.begin(), values.size());
}

AOTI_DEBUG_GLUE_FN void call_end() noexcept { linked_call_end(&this_graph); }

AOTI_DEBUG_GLUE_FN void pending() noexcept { linked_pending(&this_graph); }

}  // namespace
#endif  // AOTI_DEBUG_OBJECT_SOURCE

}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_GLUE_LINKED_H
