// Level names: "[aoti_debug] before|after launch=N graph=G kernel=K call=C" around each
// launch (format.schema.names_line), the graph line once per graph (graph_line) and,
// with AOTI_DEBUG_NAMES_ARGS, the site line and one arg line per value (site_line,
// arg_line): metadata only (no values, no sync), safe right before a faulting launch.
// One write(2) per line, so that a crash never swallows the last one.
#ifndef AOTI_DEBUG_PART_NAMES_H
#define AOTI_DEBUG_PART_NAMES_H

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "constants.h"
#include "dtypes.h"
#include "graph.h"
#include "interface.h"
#include "json.h"
#include "state.h"
#include "text.h"

namespace AOTI_DEBUG_NS {
namespace {

std::string names_line(const char* phase, int64_t launch, const std::string& graph, const char* kernel,
                       int64_t call) {
  return std::string("[aoti_debug] ") + phase + " launch=" + std::to_string(launch) + " graph=" + graph +
      " kernel=" + kernel + " call=" + std::to_string(call);
}

// format.schema.graph_line: once per graph at level names, before its first launch.
void announce_graph(Local& L, const Site& site, const void* anchor) {
  if (L.announced) return;
  L.announced = true;
  std::string label = "graph" + std::to_string(L.index);
  emit_line("[aoti_debug] graph=" + label + " wrapper=cpp file=" + graph_file(anchor, site.file));
}

// AOTI_DEBUG_NAMES_ARGS (aoti-debug locate): format.schema.site_line and one arg_line per
// value.
void describe_args(const Site& site, const Value* v, size_t count) {
  std::string src;  // site_line joins whitespace runs with one space
  bool sp = false;
  for (const char* p = site.source ? site.source : ""; *p; ++p) {
    if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
      sp = !src.empty();
      continue;
    }
    if (sp) src.push_back(' ');
    sp = false;
    src.push_back(*p);
  }
  // The provenance JSON holds no space (format.provenance.Provenance.to_json).
  std::string prov = site.provenance && *site.provenance && !std::strchr(site.provenance, ' ')
      ? std::string(" prov=") + site.provenance : std::string();
  emit_line("[aoti_debug] site launch=" + std::to_string(tl_launch) + " line=" + std::to_string(site.line) + prov +
            " from=" + src);
  size_t n = std::min(static_cast<size_t>(site.n), count);
  for (size_t i = 0; i < n; ++i) {
    const Arg& a = site.args[i];
    std::string line = "[aoti_debug] arg launch=" + std::to_string(tl_launch) + " name=" + field(a.name) +
        " role=" + field(a.role);
    switch (v[i].kind()) {
      case Value::kTensor: {
        AtenTensorHandle h = v[i].handle();
        int64_t ndim = 0, offset = 0, nbytes = 0;
        int64_t* sizes = nullptr;
        int64_t* strides = nullptr;
        int32_t dtype = -1, dev = 0, idx = 0;
        void* ptr = nullptr;
        aoti_torch_get_dim(h, &ndim);
        aoti_torch_get_sizes(h, &sizes);
        aoti_torch_get_strides(h, &strides);
        aoti_torch_get_dtype(h, &dtype);
        aoti_torch_get_device_type(h, &dev);
        aoti_torch_get_device_index(h, &idx);
        const TypeInfo* ti = type_info(dtype);
        line += " kind=tensor dtype=" + (ti ? std::string(ti->name) : "dtype" + std::to_string(dtype));
        line += " shape=" + (sizes ? int_list(sizes, ndim) : std::string("-"));
        line += " stride=" + (strides ? int_list(strides, ndim) : std::string("-"));
        line += " device=" + device_string(dev, idx);
        if (aoti_torch_get_storage_offset(h, &offset) == 0) line += " offset=" + std::to_string(offset);
        if (aoti_torch_get_data_ptr(h, &ptr) == 0) {
          char buf[32];
          std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(ptr)));
          line += std::string(" ptr=") + buf;
        }
        if (aoti_torch_get_storage_size(h, &nbytes) == 0) line += " nbytes=" + std::to_string(nbytes);
        break;
      }
      case Value::kInt:
      case Value::kDouble:
      case Value::kBool: {
        const char* kind = std::strcmp(a.kind, "symint") == 0 ? "symint" : "scalar";
        std::string value = v[i].kind() == Value::kInt ? std::to_string(v[i].as_int())
            : v[i].kind() == Value::kBool ? (v[i].as_int() ? "True" : "False")
            : fmt_double(v[i].as_double());
        line += std::string(" kind=") + kind + " value=" + field(value);
        break;
      }
      case Value::kNone: line += " kind=none"; break;
      default: line += " kind=other type=unknown"; break;
    }
    emit_line(line);
  }
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_NAMES_H
