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
#include "device_launch.h"
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

// The directory descriptor a run file `name` ("tensors/<leaf>" or "<leaf>") is made or
// removed at, and its name there: files are never opened by path below the run directory.
int run_file_at(const Shared& S, const std::string& name, const char*& leaf) {
  const size_t n = std::strlen(schema::kTensorDir);
  if (name.size() > n + 1 && name.compare(0, n, schema::kTensorDir) == 0 && name[n] == '/') {
    leaf = name.c_str() + n + 1;
    return S.tensor_fd;
  }
  leaf = name.c_str();
  return S.dir_fd;
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
  const char* leaf = nullptr;
  const int at = run_file_at(S, fname, leaf);
  std::string werr = write_pt_at(at, leaf, S.path + "/" + fname, ti, t.shape, t.numel, t.data, t.nbytes,
                                 S.force_zip64);
  if (!werr.empty()) {
    warn_once(S, "save", werr);
    return werr;
  }
  rec.str(R::kFile, fname);
  if (!content_key.empty()) S.content_files.emplace(content_key, fname);
  return "";
}
#endif

// A level print line: into its side's `prints` where given (written with the side's
// records), else to stderr now.
void put_print_line(std::string* prints, const std::string& line) {
  if (!prints) return emit_line(line);
  *prints += line;
  *prints += '\n';
}

// A level print line up to its value's name, a tensor's or a scalar's
// (format.schema.print_parts).
void append_print_start(std::string& o, const Site& site, const Arg& a, const char* phase) {
  o += "[aoti_debug] ";
  o += pad_phase(phase);
  o += ' ';
  o += site.kernel;
  o += " launch=";
  o += std::to_string(tl_launch);
  o += ' ';
  o += a.name;
}

// A tensor's level print line up to its stats.
void append_print_head(std::string& o, const Site& site, const Arg& a, const char* phase, const TypeInfo* ti,
                       const HostTensor& t) {
  append_print_start(o, site, a, phase);
  o += " (";
  o += a.role;
  o += ") ";
  o += ti ? ti->name : "?";
  o += '[';
  o += shape_text(t.shape);
  o += "] ";
  o += device_string(t.device_type, t.device_index);
}

// `on_device`: the tensor's stats computed on the device (device_stats.h), or null;
// `hole`: they come later (levels stats and print, device_stats.h's ring): where they go
// in the record's text (and in `prints`, its print line's) is noted there instead.
// `made` (where given): set to the stats recorded, if any (`*have` then true).
// `prints` (level print, where given): the print line is appended there, with its
// newline, instead of written to stderr.
void record_tensor(Shared& S, const Site& site, const Arg& a, const char* phase, AtenTensorHandle h,
                   const DeviceOps* dev, JsonObject& rec, const Summary* on_device, QueuedHole* hole = nullptr,
                   Summary* made = nullptr, bool* have = nullptr, std::string* prints = nullptr) {
  namespace R = schema::rec;
  HostTensor t;
  std::string err;
  const TypeInfo* ti = record_metadata(h, t, err, rec);
  if (a.uninitialised && std::strcmp(phase, "before") == 0) {
    // Memory no launch had written yet: what it holds is not data (no stats, no file; at
    // level print a line without stats, as format.schema.print_line writes its record).
    rec.boolean(R::kUninitialised, true);
    if (site.level == schema::kPrint) {
      std::string line;
      append_print_head(line, site, a, phase, ti, t);
      append_print_stats(line, nullptr);
      put_print_line(prints, line);
    }
    return;
  }
  if (hole && err.empty()) {
    hole->stats_at = rec.value(R::kStats).size();
    hole->checksum_at = rec.value(R::kChecksum).size();
    if (site.level == schema::kPrint && prints) {
      append_print_head(*prints, site, a, phase, ti, t);
      hole->print_at = prints->size();
      *prints += '\n';
    }
    return;
  }
  if (err.empty() && !on_device) err = host_values(h, t, dev);
  Summary sm;
  if (on_device) sm = *on_device;
  bool have_stats = err.empty() && (on_device || (t.data && summarize(t.data, t.numel, t.dtype, sm)));
  if (err.empty() && !have_stats) err = "stats: unsupported dtype";
  if (made && have_stats) {
    *made = sm;
    *have = true;
  }
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
    std::string line;
    append_print_head(line, site, a, phase, ti, t);
    append_print_stats(line, have_stats ? &sm : nullptr);
    put_print_line(prints, line);
  }
}

void record_scalar(const Site& site, const Arg& a, const char* phase, const Value& v, JsonObject& rec,
                   std::string* prints = nullptr) {
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
    std::string line;
    append_print_start(line, site, a, phase);
    line += " = ";
    line += shown;
    put_print_line(prints, line);
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
  int fd = ::openat(S.dir_fd, schema::kSitesFile, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
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

// ---- inputs taken from their producers' records (Arg::reuse_site; manager.py's links)
// What the after records of a launch got, per value, for the inputs of later launches of
// the same graph call that codegen linked to them: its summary (computed on the host, or
// on the device for a side that was waited for) or its row of a device-ring segment, the
// row only while that segment is in the same fill.
struct Made {
  enum Kind : uint8_t { kNone, kSummary, kRow };
  Kind kind = kNone;
  uint32_t row = 0;
  Segment* seg = nullptr;
  uint64_t fill = 0;
  DeviceStats* owner = nullptr;
  Summary sm;
};

struct MadeSide {
  uint64_t call = ~uint64_t{0};  // the graph call it was made in (none yet)
  std::vector<Made> values;
};

// Per thread (two threads may run one wrapper at once: AOTInductor's model container)
// and graph: the number of its calls that ended on this thread (entry_call_end), and per
// site number what its after side made in the current call.
struct Links {
  uint64_t call = 0;
  std::vector<MadeSide> sites;
};

Links& links_of(const Local& L) {
  thread_local std::map<const Local*, Links> all;
  return all[&L];
}

// What `a` (an input of a launch side) takes from its producer in this call, or null
// (no link, the producer's record not made in this call or not summarised, its row's
// segment filled anew since).
const Made* producer_made(const Links& k, const Arg& a) {
  if (a.reuse_site < 0 || a.reuse_at < 0 || static_cast<size_t>(a.reuse_site) >= k.sites.size()) return nullptr;
  const MadeSide& ms = k.sites[static_cast<size_t>(a.reuse_site)];
  if (ms.call != k.call || static_cast<size_t>(a.reuse_at) >= ms.values.size()) return nullptr;
  const Made& m = ms.values[static_cast<size_t>(a.reuse_at)];
  if (m.kind == Made::kNone) return nullptr;
  if (m.kind == Made::kRow && (m.seg->fills != m.fill || m.seg->state == Segment::kFree)) return nullptr;
  return &m;
}

// Caller holds S.mu; the run is open. The records go to the manifest, or one line each
// (no newline) into `lines_out` where given (the flight recorder: flight.h). At levels
// stats and print an input linked to its producer (Arg::reuse_site) takes the stats that
// launch's after record got in this call (its summary, or its ring row: the side's rows
// may then be in two segments, its own and the producer's, kept from reuse until the
// side is written), and says so ("reused"); outside the flight recorder, whose sides are
// judged as they are made.
void record_side(Shared& S, Local& L, const Site& site, const Value* v, size_t count, const char* phase,
                 const std::string& label, const DeviceOps* dev, std::vector<std::string>* lines_out = nullptr) {
  namespace R = schema::rec;
  size_t n = std::min(static_cast<size_t>(site.n), count);
  // CUDA tensors summarised on the device need no copy (save needs the values anyway).
  // At levels stats and print (no flight recorder: it judges each side as it is made)
  // their results are not waited for: the side's records (and print lines) are queued
  // until they are there, and so is every later side until the queue is written
  // (device_stats.h's ring).
  DeviceQueue& Q = device_queue();
  if (!Q.sides.empty()) drain_queue(S, false);
  std::vector<Summary> on_device;
  std::vector<char> done;
  Deferred deferred;
  // At level print too the side's lines wait for the ring, and its print lines with them
  // (written when the values are there, in launch order: device_ring.h's drain_one),
  // except under AOTI_DEBUG_SYNC, whose lines go out before the next launch.
  const bool defer = (site.level == schema::kStats || (site.level == schema::kPrint && !site.sync)) && !lines_out;
  const bool before = std::strcmp(phase, "before") == 0;
  Links* links = !lines_out && site.id >= 0 && (site.level == schema::kStats || site.level == schema::kPrint)
                     ? &links_of(L) : nullptr;
  std::vector<const Made*> take;  // per value: what it takes from its producer, or null
  std::vector<char> taken;        // (device_summaries' mask)
  struct Pin {  // the one producer's segment whose rows this side takes: not reused meanwhile
    Segment* g = nullptr;
    DeviceStats* owner = nullptr;
    ~Pin() {
      if (g) unpin(*g);  // (a queued side holds it by then)
    }
  } pin;
  if (links && before) {
    const size_t id = static_cast<size_t>(site.id);
    if (id < links->sites.size()) links->sites[id].call = ~uint64_t{0};  // its after side makes them anew
    for (size_t i = 0; i < n; ++i) {
      const Made* m = site.args[i].reuse_site >= 0 && v[i].kind() == Value::kTensor
                          ? producer_made(*links, site.args[i]) : nullptr;
      if (!m) continue;
      if (m->kind == Made::kRow) {
        if (pin.g && pin.g != m->seg) continue;  // rows of one earlier segment a side: this one is read
        if (!pin.g) {
          m->seg->sides += 1;
          pin.g = m->seg;
          pin.owner = m->owner;
        }
      }
      take.resize(n, nullptr);
      taken.resize(n, 0);
      take[i] = m;
      taken[i] = 1;
    }
  }
  if (site.level != schema::kSave) {
    device_summaries(S, site, v, n, phase, dev, on_device, done, defer, deferred, taken.empty() ? nullptr : &taken);
  }
  // The model may run on a stream of its own (AOTI's run(stream)); the shim's copy runs
  // on the current one: wait for the device before reading any of its tensors (not those
  // summarised on the device, taken from a producer, or never written: none is read).
  for (size_t i = 0; dev && dev->synchronize && i < n; ++i) {
    int32_t type = kDeviceCpu;
    if ((i < done.size() && done[i]) || (i < take.size() && take[i]) || (before && site.args[i].uninitialised)) {
      continue;
    }
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
  thread_local std::string prints;  // level print: the side's print lines, written with its records
  prints.clear();
  std::string* const printing = site.level == schema::kPrint ? &prints : nullptr;
  std::vector<QueuedHole> holes;
  // The rows taken from the pinned segment are the side's own segment's where it has none other.
  Segment* pinned = pin.g;
  Segment* own = deferred.segment ? deferred.segment : pinned;
  MadeSide* made = nullptr;
  if (links && !before) {
    const size_t id = static_cast<size_t>(site.id);
    if (id >= links->sites.size()) links->sites.resize(id + 1);
    made = &links->sites[id];
    made->call = links->call;
    made->values.assign(n, Made());
  }
  for (size_t i = 0; i < n; ++i) {
    const Arg& a = site.args[i];
    S.seq += 1;
    JsonObject rec;
    rec.num(R::kSeq, S.seq).num(R::kLaunch, tl_launch).fields(texts[0]).num(R::kKernelCall, tl_call);
    rec.fields(texts[1 + i]);
    if (v[i].kind() == Value::kTensor) {
      const Made* m = i < take.size() ? take[i] : nullptr;
      if (m) rec.num(R::kReused, a.reuse_site);
      const bool later = i < done.size() && done[i] == 2;
      const bool from_row = m && m->kind == Made::kRow;
      const Summary* sm = m && !from_row ? &m->sm : i < done.size() && done[i] == 1 ? &on_device[i] : nullptr;
      QueuedHole hole{std::string::npos, 0, 0, from_row ? m->row : later ? deferred.rows[i] : 0};
      hole.taken = from_row && own != pinned;
      Summary kept;
      bool have = false;
      record_tensor(S, site, a, phase, v[i].handle(), dev, rec, sm, later || from_row ? &hole : nullptr,
                    made ? &kept : nullptr, &have, printing);
      if (made && later && hole.stats_at != std::string::npos) {
        made->values[i] = Made{Made::kRow, deferred.rows[i], deferred.segment, deferred.segment->fills,
                               deferred.owner, Summary()};
      } else if (made && have) {
        made->values[i].kind = Made::kSummary;
        made->values[i].sm = kept;
      }
      if (hole.stats_at != std::string::npos) {  // offsets in the record's text -> in the side's lines
        hole.stats_at += lines.size();
        hole.checksum_at += lines.size();
        hole.end_at = lines.size() + rec.size();
        holes.push_back(hole);
      }
    } else {
      record_scalar(site, a, phase, v[i], rec, printing);
    }
    if (lines_out) {
      lines_out->push_back(rec.close());
      continue;
    }
    rec.close_into(lines);
    lines += '\n';
  }
  if (lines_out) {
    write_prints(prints);
    return;
  }
  if (holes.empty() && Q.sides.empty()) {
    write_prints(prints);
    if (L.ends_calls && !site.sync) {
      hold_lines(S, lines);
    } else {
      append_manifest(S, lines);
    }
    return;
  }
  QueuedSide q;
  q.lines = lines;
  q.prints = prints;
  if (!holes.empty()) {
    q.holes = std::move(holes);
    q.segment = own;
    q.owner = deferred.segment ? deferred.owner : pin.owner;
    own->sides += 1;
    if (own != pinned && pinned) {
      q.taken = pinned;
      pinned->sides += 1;
    }
  }
  Q.append = &append_manifest;
  Q.drain = &drain_queue;
  Q.pid = this_pid();
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
