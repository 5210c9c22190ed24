// Wrapper side, AOTInductor .so files: the launch()/done() that generated call sites
// call, running the runtime compiled into this .so (the parts this level needs), so
// that the package needs nothing of aoti_debug where it runs.
#ifndef AOTI_DEBUG_PART_GLUE_INLINE_H
#define AOTI_DEBUG_PART_GLUE_INLINE_H

#include <cstdio>
#include <initializer_list>

#include "glue_cuda.h"
#include "interface.h"
#ifndef _WIN32
#include "entry.h"
#endif

namespace AOTI_DEBUG_NS {
namespace {

#ifdef _WIN32
void warn_unsupported() {
  static const bool once = (std::fprintf(stderr, "[aoti_debug] warning: the C++ runtime needs POSIX; this model "
                                                 "runs uninstrumented\n"), true);
  (void)once;
}
AOTI_DEBUG_GLUE_FN void launch(const Site&, std::initializer_list<Value> values) noexcept {
  warn_unsupported();
  Value::release(values.begin(), values.size());
}
AOTI_DEBUG_GLUE_FN void done(const Site&, std::initializer_list<Value> values) AOTI_DEBUG_DONE_NOEXCEPT {
  Value::release(values.begin(), values.size());
}
AOTI_DEBUG_GLUE_FN void call_end() noexcept {}
AOTI_DEBUG_GLUE_FN void pending() noexcept {}
#else
Graph this_graph = {nullptr, kWrapperDevice};
thread_local Token this_token = {0, 0};

AOTI_DEBUG_GLUE_FN void launch(const Site& site, std::initializer_list<Value> values) noexcept {
  entry_launch(&this_graph, &this_token, &site, values.begin(), values.size());
}

AOTI_DEBUG_GLUE_FN void done(const Site& site, std::initializer_list<Value> values) AOTI_DEBUG_DONE_NOEXCEPT {
  if (site.sync) sync_device(site, this_token.launch, values.begin(), values.size());  // a device error propagates
  entry_done(&this_graph, &this_token, &site, values.begin(), values.size());
}

AOTI_DEBUG_GLUE_FN void call_end() noexcept { entry_call_end(&this_graph); }

AOTI_DEBUG_GLUE_FN void pending() noexcept { entry_pending(&this_graph); }
#endif

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_GLUE_INLINE_H
