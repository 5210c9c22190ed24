// Manifest records: one JSON line per value of one side of a launch, with the keys of
// format.schema.Record (schema::rec, generated), appended together (manifest.h: held
// until the graph call ends, or written at once); at
// level print also one stats line per value on stderr. Tensor files (level save) are
// compiled in only where AOTI_DEBUG_WITH_FILES is set.
#ifndef AOTI_DEBUG_PART_RECORDS_H
#define AOTI_DEBUG_PART_RECORDS_H

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "constants.h"
#include "device_stats.h"
#include "dtypes.h"
#include "env.h"
#include "graph.h"
#include "host_tensor.h"
#include "interface.h"
#include "json.h"
#include "manifest.h"
#include "state.h"
#include "stats.h"
#include "text.h"

#ifndef AOTI_DEBUG_WITH_FILES
#define AOTI_DEBUG_WITH_FILES 1
#endif
#if AOTI_DEBUG_WITH_FILES
#include "pt_writer.h"
#endif

namespace AOTI_DEBUG_NS {
namespace {

// The name of a tensor file of the C++ runtime (format.schema.tensor_filename, with a
// "c" so that it never collides with the Python runtime's in the same run directory).
std::string tensor_file_name(int64_t seq, const char* phase, const char* kernel, const char* arg) {
  char num[24];
  std::snprintf(num, sizeof(num), "c%08lld", static_cast<long long>(seq));
  return std::string(schema::kTensorDir) + "/" + num + "-" + phase + "-" + sanitize(kernel, 80) + "-" +
      sanitize(arg, 40) + ".pt";
}

// kind, dtype, shape, stride, device, numel: what a record says of any tensor.
const TypeInfo* record_metadata(AtenTensorHandle h, HostTensor& t, std::string& err, JsonObject& rec) {
  namespace R = schema::rec;
  err = describe(h, t);
  const TypeInfo* ti = err.empty() ? type_info(t.dtype) : nullptr;
  rec.str(R::kKind, "tensor");
  if (ti) {
    rec.str(R::kDtype, ti->name);
  } else {
    rec.str(R::kDtype, "dtype" + std::to_string(t.dtype));
  }
  rec.ints(R::kShape, t.shape).ints(R::kStride, t.stride);
  rec.str(R::kDevice, device_string(t.device_type, t.device_index));
  rec.num(R::kNumel, t.numel);
  return ti;
}

#if AOTI_DEBUG_WITH_FILES
// Level save: the tensor file of one record, or a pointer to an identical earlier one.
// Returns an error text ("" when fine).
std::string save_values(Shared& S, const Site& site, const Arg& a, const char* phase, const TypeInfo& ti,
                        const HostTensor& t, const std::string& content_key, JsonObject& rec) {
  namespace R = schema::rec;
  if (!saves_launch(S, tl_launch)) {
    rec.str(R::kSkipped, "launch " + std::to_string(tl_launch) + " is not in " + schema::env::kSaveLaunches);
    return "";
  }
  if (!content_key.empty()) {
    auto same = S.content_files.find(content_key);
    if (same != S.content_files.end()) {
      // Identical values already on disk (a weight read every call, an input that is
      // the unchanged output of an earlier launch): point at that file.
      rec.str(R::kFile, same->second);
      rec.boolean(R::kShared, true);
      return "";
    }
  }
  if (S.max_bytes >= 0 && S.bytes_written + static_cast<int64_t>(t.nbytes) > S.max_bytes) {
    rec.str(R::kSkipped, "AOTI_DEBUG_MAX_BYTES reached");
    return "";
  }
  S.bytes_written += static_cast<int64_t>(t.nbytes);
  std::string fname = tensor_file_name(S.seq, phase, site.kernel, a.name);
  std::string werr = write_pt(S.path + "/" + fname, ti, t.shape, t.numel, t.data, t.nbytes, S.force_zip64);
  if (!werr.empty()) {
    warn_once(S, "save", werr);
    return werr;
  }
  rec.str(R::kFile, fname);
  if (!content_key.empty()) S.content_files.emplace(content_key, fname);
  return "";
}
#endif

// `on_device`: the tensor's stats computed on the device (device_stats.h), or null;
// `hole`: they come later (level stats, device_stats.h's ring): where they go in the
// record's text is noted there instead.
void record_tensor(Shared& S, const Site& site, const Arg& a, const char* phase, AtenTensorHandle h,
                   const DeviceOps* dev, JsonObject& rec, const Summary* on_device, QueuedHole* hole = nullptr) {
  namespace R = schema::rec;
  HostTensor t;
  std::string err;
  const TypeInfo* ti = record_metadata(h, t, err, rec);
  if (a.uninitialised && std::strcmp(phase, "before") == 0) {
    // Memory no launch had written yet: what it holds is not data (no stats, no file).
    rec.boolean(R::kUninitialised, true);
    return;
  }
  if (hole && err.empty()) {
    hole->stats_at = rec.value(R::kStats).size();
    hole->checksum_at = rec.value(R::kChecksum).size();
    return;
  }
  if (err.empty() && !on_device) err = host_values(h, t, dev);
  Summary sm;
  if (on_device) sm = *on_device;
  bool have_stats = err.empty() && (on_device || (t.data && summarize(t.data, t.numel, t.dtype, sm)));
  if (err.empty() && !have_stats) err = "stats: unsupported dtype";
  std::string content_key;
  if (have_stats) {
    std::string& o = rec.value(R::kStats);  // the record's text, appended to in place
    const size_t st = o.size();
    append_stats_json(o, sm);
    const size_t st_end = o.size();
    rec.value(R::kChecksum) += '"';
    append_checksum(o, sm.checksum);
    o += '"';
    // Identity of the values (as hooks._content_key): dtype, shape, checksum, exact stats;
    // only level save points at files by it.
    if (site.level == schema::kSave) {
      content_key = std::string(ti->name) + "|" + shape_text(t.shape) + "|" + o.substr(o.size() - 17, 16) + "|" +
          o.substr(st, st_end - st);
    }
  } else {
    rec.raw(R::kStats, "null");
  }
  if (site.level == schema::kSave && err.empty()) {
#if AOTI_DEBUG_WITH_FILES
    err = save_values(S, site, a, phase, *ti, t, content_key, rec);
#else
    err = "save: tensor files are not compiled into this runtime";
    warn_once(S, "save", err);
#endif
  } else if (!err.empty()) {
    warn_once(S, "tensor-" + err.substr(0, err.find(':')),
              std::string("cannot record ") + a.name + " of " + site.kernel + ": " + err);
  }
  if (!err.empty()) rec.str(R::kError, err);
  if (site.level == schema::kPrint) {
    std::string line = "[aoti_debug] " + pad_phase(phase) + " " + site.kernel + " launch=" +
        std::to_string(tl_launch) + " " + a.name + " (" + a.role + ") " + (ti ? ti->name : "?") + "[" +
        shape_text(t.shape) + "] " + device_string(t.device_type, t.device_index) +
        " min=" + (have_stats ? fmt6(sm.mn) : "-") + " max=" + (have_stats ? fmt6(sm.mx) : "-") +
        " mean=" + (have_stats ? fmt6(sm.mean) : "-") + " std=" + (have_stats ? fmt6(sm.sd) : "-") +
        " absmax=" + (have_stats ? fmt6(sm.absmax) : "-") + " nan=" + std::to_string(sm.nan) +
        " inf=" + std::to_string(sm.inf);
    emit_line(line);
  }
}

void record_scalar(const Site& site, const Arg& a, const char* phase, const Value& v, JsonObject& rec) {
  namespace R = schema::rec;
  std::string value;
  const char* dtype = nullptr;
  const char* kind = std::strcmp(a.kind, "symint") == 0 ? "symint" : "scalar";
  switch (v.kind()) {
    case Value::kInt: value = std::to_string(v.as_int()); dtype = "int"; break;
    case Value::kBool: value = v.as_int() ? "true" : "false"; dtype = "bool"; break;
    case Value::kDouble: {
      double d = v.as_double();
      // format.schema's one policy for non-finite floats: the strings "nan", "inf", "-inf".
      value = d != d ? "\"nan\"" : std::isinf(d) ? (d > 0 ? "\"inf\"" : "\"-inf\"") : fmt_double(d);
      dtype = "float";
      break;
    }
    case Value::kNone: kind = "none"; break;
    default: kind = "other"; value = "\"unknown\""; break;
  }
  rec.str(R::kKind, kind);
  if (!value.empty()) rec.raw(R::kValue, value);
  if (dtype) rec.str(R::kDtype, dtype);
  if (site.level == schema::kPrint) {
    std::string shown = v.kind() == Value::kBool ? (v.as_int() ? "True" : "False")
        : v.kind() == Value::kDouble ? (v.as_double() != v.as_double() ? "nan" : fmt_double(v.as_double()))
        : v.kind() == Value::kNone ? "None" : value;
    if (v.kind() == Value::kDouble && std::isinf(v.as_double())) shown = v.as_double() > 0 ? "inf" : "-inf";
    emit_line("[aoti_debug] " + pad_phase(phase) + " " + site.kernel + " launch=" +
              std::to_string(tl_launch) + " " + a.name + " = " + shown);
  }
}

// A site's provenance, once per (graph, site) in this run: one line of sites.jsonl
// (format/provenance.py), the JSON the emitter wrote embedded as it is. Caller holds S.mu.
void write_site(Shared& S, const Site& site, const std::string& label) {
  if (site.id < 0) return;
  std::string key = label + "\n" + std::to_string(site.id);
  if (!S.sites_written.insert(key).second) return;
  JsonObject obj;
  obj.str("graph", label).num("site", site.id).str("kernel", site.kernel);
  obj.raw("provenance", (site.provenance && *site.provenance) ? site.provenance : "{}");
  std::string line = obj.close() + "\n";
  std::string path = S.path + "/" + schema::kSitesFile;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && write_all(fd, line.data(), line.size()) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok) warn_once(S, "sites", "cannot append to the sites file in '" + S.path + "'");
}

// The fields of a site's records that do not change from one call to the next, encoded
// once per graph and run (Local::texts): [0] those between "launch" and "kernel_call",
// [1 + i] those of its i-th value after "kernel_call". Caller holds S.mu.
const std::vector<std::string>& site_texts(Local& L, const Site& site, const char* phase, const std::string& label) {
  namespace R = schema::rec;
  const bool before = std::strcmp(phase, "before") == 0;
  std::vector<std::string>& t = L.texts[{&site, before}];
  if (!t.empty()) return t;
  JsonObject head;
  head.str(R::kGraph, label).str(R::kWrapper, "cpp").str(R::kKernel, site.kernel).str(R::kOp, site.op);
  t.push_back(head.inner());
  for (int i = 0; i < site.n; ++i) {
    const Arg& a = site.args[i];
    JsonObject body;
    body.str(R::kPhase, phase).str(R::kArg, a.name).str(R::kRole, a.role);
    body.num(R::kIndex, (before ? 0 : site.index_base) + a.index);
    if (site.id >= 0) body.num(R::kSite, site.id);
    if (a.expr && *a.expr && std::strcmp(a.expr, a.name) != 0) body.str(R::kExpr, a.expr);
    if (a.volatile_why && *a.volatile_why) body.str(R::kVolatile, a.volatile_why);
    t.push_back(body.inner());
  }
  return t;
}

// Caller holds S.mu; the run is open. The records go to the manifest, or one line each
// (no newline) into `lines_out` where given (the flight recorder: flight.h).
void record_side(Shared& S, Local& L, const Site& site, const Value* v, size_t count, const char* phase,
                 const std::string& label, const DeviceOps* dev, std::vector<std::string>* lines_out = nullptr) {
  namespace R = schema::rec;
  size_t n = std::min(static_cast<size_t>(site.n), count);
  // CUDA tensors summarised on the device need no copy (save needs the values anyway).
  // At level stats (no flight recorder: it judges each side as it is made) their results
  // are not waited for: the side's records are queued until they are there, and so is
  // every later side until the queue is written (device_stats.h's ring).
  DeviceQueue& Q = device_queue();
  if (!Q.sides.empty()) drain_queue(S, false);
  std::vector<Summary> on_device;
  std::vector<char> done;
  Deferred deferred;
  const bool defer = site.level == schema::kStats && !lines_out;
  if (site.level != schema::kSave) device_summaries(S, site, v, n, phase, dev, on_device, done, defer, deferred);
  // The model may run on a stream of its own (AOTI's run(stream)); the shim's copy runs
  // on the current one: wait for the device before reading any of its tensors.
  for (size_t i = 0; dev && dev->synchronize && i < n; ++i) {
    int32_t type = kDeviceCpu;
    if (i < done.size() && done[i]) continue;
    if (v[i].kind() == Value::kTensor && aoti_torch_get_device_type(v[i].handle(), &type) == 0 &&
        type != kDeviceCpu) {
      int e = dev->synchronize();
      if (e != 0) {
        warn_once(S, "device-sync", std::string("device error before reading values: ") +
                                        (dev->error_string ? dev->error_string(e) : "error " + std::to_string(e)));
      }
      break;
    }
  }
  write_site(S, site, label);
  const std::vector<std::string>& texts = site_texts(L, site, phase, label);
  thread_local std::string lines;  // its capacity kept from side to side
  lines.clear();
  if (!lines_out) lines.reserve(512 * n);
  std::vector<QueuedHole> holes;
  for (size_t i = 0; i < n; ++i) {
    const Arg& a = site.args[i];
    S.seq += 1;
    JsonObject rec;
    rec.num(R::kSeq, S.seq).num(R::kLaunch, tl_launch).fields(texts[0]).num(R::kKernelCall, tl_call);
    rec.fields(texts[1 + i]);
    if (v[i].kind() == Value::kTensor) {
      const bool later = i < done.size() && done[i] == 2;
      const Summary* sm = i < done.size() && done[i] == 1 ? &on_device[i] : nullptr;
      QueuedHole hole{std::string::npos, 0, 0, later ? deferred.rows[i] : 0};
      record_tensor(S, site, a, phase, v[i].handle(), dev, rec, sm, later ? &hole : nullptr);
      if (hole.stats_at != std::string::npos) {  // offsets in the record's text -> in the side's lines
        hole.stats_at += lines.size();
        hole.checksum_at += lines.size();
        hole.end_at = lines.size() + rec.size();
        holes.push_back(hole);
      }
    } else {
      record_scalar(site, a, phase, v[i], rec);
    }
    if (lines_out) {
      lines_out->push_back(rec.close());
      continue;
    }
    rec.close_into(lines);
    lines += '\n';
  }
  if (lines_out) return;
  if (holes.empty() && Q.sides.empty()) {
    if (L.ends_calls && !site.sync) {
      hold_lines(S, lines);
    } else {
      append_manifest(S, lines);
    }
    return;
  }
  QueuedSide q;
  q.lines = lines;
  if (!holes.empty()) {
    q.holes = std::move(holes);
    q.segment = deferred.segment;
    q.owner = deferred.owner;
    deferred.segment->sides += 1;
  }
  Q.append = &append_manifest;
  Q.drain = &drain_queue;
  Q.pid = static_cast<long>(::getpid());
  Q.sides.push_back(std::move(q));
  if (!Q.exit_hook) {
    Q.exit_hook = true;
    std::atexit(&drain_at_exit);
  }
}

// Writes every side still queued (device_stats.h's ring), waiting for their results
// (bounded), and every line held. Caller holds S.mu.
void flush_records(Shared& S) {
  if (!device_queue().sides.empty()) drain_queue(S, true);
  write_held(S);
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_RECORDS_H
