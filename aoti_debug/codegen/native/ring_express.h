// One hook of an express launch (runtime/hooks.py: both sides of the launch planned,
// GraphHandle._express) in one C call: what _express_launch / _express_done and the
// planned side under them (_ring_side, _taken_rows, _planned_rows, Ring.reserve,
// Session.submit_planned, SideRun.add) do in Python, on the same Python objects, in the
// same order, under the same locks (taken without waiting: a lock some other thread
// holds sends the hook back to Python, which waits for it). ~20 us of interpreter a side
// on an H100 host were the bookkeeping around the side function's ~6 us
// (benchmarks/hook_parts.py); here it is C-API calls.
//
// Whatever this function does not take (a session or CUDA-graph capture the hook must
// look at, a side whose plan has no template or spec yet, a segment to turn over, host
// records, taken rows of another segment, a value the spec declines) it leaves to the
// Python path before anything of the side is done, saying how far it went:
// kExpressDeclined (nothing done: the Python express path, or the hook's own), or
// kExpressSideLeft (the launch is numbered and its numbers are in the thread's state;
// the side is Python's). Rows it reserved before declining stay unused, as the Python
// path leaves them when a side falls back. Its kept launches that failed after some
// were made: kSideCuda + the CUresult, as side_call says (the hook records the side in
// full, as _planned_rows' caller does).
#ifndef AOTI_DEBUG_PART_RING_EXPRESS_H
#define AOTI_DEBUG_PART_RING_EXPRESS_H

#include "ring_side.h"  // first: Python.h ahead of the standard headers

#include <pthread.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

namespace AOTI_DEBUG_NS {
namespace {

#if AOTI_DEBUG_THPVARIABLE
constexpr int kExpressDone = 0, kExpressDeclined = 1, kExpressSideLeft = 2;
// ring_records.py's kRingEntryBaseSide tag and length (ring_records.h reads the entries).
constexpr int64_t kExpressBaseSide = 5;
constexpr int kExpressBaseSideLen = 8;

// A new reference, released at the end of its scope.
struct Ref {
  PyObject* p = nullptr;
  Ref() = default;
  explicit Ref(PyObject* o) : p(o) {}
  ~Ref() { Py_XDECREF(p); }
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  void reset(PyObject* o) {
    Py_XDECREF(p);
    p = o;
  }
  explicit operator bool() const { return p != nullptr; }
};

// The modules whose globals the hooks read (looked up at every call, as Python reads
// them: a test or a bench may replace one), and the names, interned once.
struct ExpressEnv {
  PyObject *session_module = nullptr, *hooks_module = nullptr, *ring_module = nullptr, *fused_module = nullptr;
#define AOTI_DEBUG_EXPRESS_NAMES(X)                                                                             \
  X(sess) X(label) X(before) X(after) X(producer) X(calls) X(tls) X(site_id) X(_session) X(pid) X(_cuda)         \
  X(_is_capturing) X(_count_lock) X(launch) X(seq) X(call) X(made) X(REUSE) X(ENABLED) X(_rings) X(_raw_stream) \
  X(_launch_hooks_installed) X(host) X(lines) X(texts) X(fast) X(reused) X(device) X(index) X(ring_count)      \
  X(records) X(rows) X(_lock) X(current) X(used) X(cap) X(addr) X(arrival) X(_queue_lock) X(_open_run)         \
  X(_thread) X(_queue) X(event) X(finish) X(entries) X(plans) X(size) X(frombytes) X(acquire) X(release)      \
  X(_knobs) X(launch_enter_hook) X(launch_exit_hook)
#define AOTI_DEBUG_EXPRESS_FIELD(name) PyObject* n_##name = nullptr;
  AOTI_DEBUG_EXPRESS_NAMES(AOTI_DEBUG_EXPRESS_FIELD)
#undef AOTI_DEBUG_EXPRESS_FIELD
};

ExpressEnv& express_env() {
  static ExpressEnv e;
  return e;
}

// This process's id (a forked child's own: set again in the child), asked once instead of
// at every hook (a system call).
int64_t express_pid = -1;
void express_forked() { express_pid = static_cast<int64_t>(getpid()); }

// A lock (a new reference, kept) taken without waiting: state 1 (taken; released when
// its scope ends), 0 (some thread holds it, this one included) or -1 (an exception).
struct TryLock {
  PyObject* lock = nullptr;
  int state = -1;
  explicit TryLock(PyObject* l) : lock(l) {
    if (!lock) return;
    PyObject* args[2] = {lock, Py_False};
    Ref got(PyObject_VectorcallMethod(express_env().n_acquire, args, 2, nullptr));
    state = !got ? -1 : got.p == Py_True ? 1 : 0;
  }
  ~TryLock() {
    if (state == 1) {
      PyObject *type, *value, *trace;
      PyErr_Fetch(&type, &value, &trace);  // (an error of the caller's stays the one it raises)
      PyObject* args[1] = {lock};
      Ref done(PyObject_VectorcallMethod(express_env().n_release, args, 1, nullptr));
      if (!done) PyErr_Clear();
      PyErr_Restore(type, value, trace);
    }
    Py_XDECREF(lock);
  }
  TryLock(const TryLock&) = delete;
  TryLock& operator=(const TryLock&) = delete;
};

// An attribute as int64: false with an exception set where it is not an int.
bool attr_int64(PyObject* o, PyObject* name, int64_t* out) {
  Ref v(PyObject_GetAttr(o, name));
  return v && as_int64(v.p, out);
}

bool set_int64(PyObject* o, PyObject* name, int64_t value) {
  Ref v(PyLong_FromLongLong(value));
  return v && PyObject_SetAttr(o, name, v.p) == 0;
}

// The thread's `made` dict of the hooks (GraphHandle._made_rows), None where it has none.
PyObject* thread_made(PyObject* tls) {
  PyObject* made = PyObject_GetAttr(tls, express_env().n_made);
  if (!made && PyErr_ExceptionMatches(PyExc_AttributeError)) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  return made;
}

// Where hooks left this function (a line of this file, and how often), for tests and
// benches (express_left; fused_stats.express_left): 32 lines at most, in order of first use.
int64_t express_left_lines[32][2] = {};

int left(int line, int code) {
  for (auto& entry : express_left_lines) {
    if (entry[0] == line || entry[0] == 0) {
      entry[0] = line;
      ++entry[1];
      break;
    }
  }
  return code;
}

// Whether Triton launch hooks are installed (fused_stats._launch_hooks_installed: then the
// Python path launches): 1 yes, 0 no, -1 an exception. Its common answers read here (the
// knobs it found: each slot None or a HookChain with no calls), anything else asked of it.
int launch_hooks(const ExpressEnv& e) {
  Ref knobs(PyObject_GetAttr(e.fused_module, e.n__knobs));
  if (!knobs) return -1;
  if (knobs.p != Py_None) {
    bool empty = true;
    for (PyObject* name : {e.n_launch_enter_hook, e.n_launch_exit_hook}) {
      Ref hook(PyObject_GetAttr(knobs.p, name));
      if (!hook) return -1;
      if (hook.p == Py_None) continue;
      Ref calls(PyObject_GetAttr(hook.p, e.n_calls));
      if (!calls) {
        PyErr_Clear();
        empty = false;
        break;
      }
      if (!PyList_CheckExact(calls.p)) {
        empty = false;
        break;
      }
      if (PyList_GET_SIZE(calls.p) != 0) return 1;
    }
    if (empty) return 0;
  }
  Ref fn(PyObject_GetAttr(e.fused_module, e.n__launch_hooks_installed));
  if (!fn) return -1;
  Ref hooked(PyObject_CallNoArgs(fn.p));
  if (!hooked) return -1;
  const int yes = PyObject_IsTrue(hooked.p);
  return yes;
}

// Whether every taken row is a row of `arrival`'s segment: a run's entries address its
// own host copy alone (taken rows of another segment: a RingSide job, Python's).
bool same_arrival(const std::vector<PyObject*>& taken, PyObject* arrival) {
  for (PyObject* a : taken) {
    if (a != arrival) return false;
  }
  return true;
}

// One planned side (GraphHandle._ring_side with its plan's spec, template and taken rows
// in hand): kExpressDone, kExpressSideLeft, kSideCuda + r, or -1 (an exception).
int express_plan(PyObject* x, PyObject* sess, PyObject* tls, PyObject* plan, PyObject* values, int64_t launch,
                 int64_t call) {
  const ExpressEnv& e = express_env();
  Ref enabled(PyObject_GetAttr(e.ring_module, e.n_ENABLED));
  if (!enabled) return -1;
  if (enabled.p != Py_True) return left(__LINE__, kExpressSideLeft);
  Ref host(PyObject_GetAttr(plan, e.n_host)), lines(PyObject_GetAttr(plan, e.n_lines)),
      texts(PyObject_GetAttr(plan, e.n_texts)), fast(PyObject_GetAttr(plan, e.n_fast)),
      reused(PyObject_GetAttr(plan, e.n_reused)), device(PyObject_GetAttr(plan, e.n_device));
  if (!host || !lines || !texts || !fast || !reused || !device) return -1;
  // Host records, no template or no spec yet: the Python path (which makes them).
  if (!PyTuple_Check(host.p) || PyTuple_GET_SIZE(host.p) != 0 || lines.p == Py_None || !PyTuple_Check(texts.p) ||
      PyTuple_GET_SIZE(texts.p) < 5 || !PyTuple_Check(fast.p) || PyTuple_GET_SIZE(fast.p) < 3 ||
      !PyTuple_Check(reused.p)) {
    return left(__LINE__, kExpressSideLeft);
  }
  int64_t spec = 0, text_address = 0, text_records = 0, text_size = 0;
  if (!as_int64(PyTuple_GET_ITEM(fast.p, 2), &spec) || !as_int64(PyTuple_GET_ITEM(texts.p, 2), &text_address) ||
      !as_int64(PyTuple_GET_ITEM(texts.p, 3), &text_records) || !as_int64(PyTuple_GET_ITEM(texts.p, 4), &text_size)) {
    return -1;
  }
  // Taken rows (_taken_rows): each the producer's after row of this call, in this thread.
  const Py_ssize_t n_taken = PyTuple_GET_SIZE(reused.p);
  std::vector<int64_t> taken_rows;
  std::vector<PyObject*> taken_arrivals;  // borrowed from `made`'s entries, which `made_ref` keeps
  Ref made_ref;
  if (n_taken) {
    Ref reuse(PyObject_GetAttr(e.hooks_module, e.n_REUSE));
    if (!reuse) return -1;
    made_ref.reset(thread_made(tls));
    if (!made_ref) return -1;
    if (reuse.p != Py_True || !PyDict_CheckExact(made_ref.p) || PyDict_GET_SIZE(made_ref.p) == 0) {
      return left(__LINE__, kExpressSideLeft);
    }
    taken_rows.reserve(n_taken);
    for (Py_ssize_t i = 0; i < n_taken; ++i) {
      PyObject* item = PyTuple_GET_ITEM(reused.p, i);  // (position, producer site, its after position)
      if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) return left(__LINE__, kExpressSideLeft);
      PyObject* entry = PyDict_GetItemWithError(made_ref.p, PyTuple_GET_ITEM(item, 1));
      if (!entry) return PyErr_Occurred() ? -1 : left(__LINE__, kExpressSideLeft);
      if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3 || !PyTuple_Check(PyTuple_GET_ITEM(entry, 2))) {
        return left(__LINE__, kExpressSideLeft);
      }
      int64_t at = 0, first = 0;
      if (!as_int64(PyTuple_GET_ITEM(item, 2), &at) || !as_int64(PyTuple_GET_ITEM(entry, 1), &first)) return -1;
      PyObject* rows = PyTuple_GET_ITEM(entry, 2);
      if (at < 0 || at >= PyTuple_GET_SIZE(rows) || PyTuple_GET_ITEM(rows, at) == Py_None) return left(__LINE__, kExpressSideLeft);
      int64_t row = 0;
      if (!as_int64(PyTuple_GET_ITEM(rows, at), &row)) return -1;
      taken_rows.push_back(first + row);
      taken_arrivals.push_back(PyTuple_GET_ITEM(entry, 0));
    }
  }
  Ref arrival;
  int64_t first = 0;
  if (device.p == Py_None) {  // every tensor taken from its producers: the values checked alone
    if (!n_taken || !same_arrival(taken_arrivals, taken_arrivals.back())) return left(__LINE__, kExpressSideLeft);
    const int rc = side_call(reinterpret_cast<const int64_t*>(static_cast<intptr_t>(spec)), values, 0, 0);
    if (rc < 0) return -1;
    if (rc != kSideLaunched) return left(__LINE__, kExpressSideLeft);
    Py_INCREF(taken_arrivals.back());
    arrival.reset(taken_arrivals.back());
  } else {
    // The ring of the device's current stream (device_ring.ring_for): the one the spec's launches write.
    Ref index(PyObject_GetAttr(device.p, e.n_index)), raw(PyObject_GetAttr(e.ring_module, e.n__raw_stream)),
        rings(PyObject_GetAttr(e.ring_module, e.n__rings));
    if (!index || !raw || !rings) return -1;
    if (index.p == Py_None || raw.p == Py_None || !PyDict_Check(rings.p)) return left(__LINE__, kExpressSideLeft);
    Ref stream(PyObject_CallOneArg(raw.p, index.p));
    if (!stream) return -1;
    Ref key(PyTuple_Pack(2, index.p, stream.p));
    if (!key) return -1;
    PyObject* ring = PyDict_GetItemWithError(rings.p, key.p);  // borrowed: `rings` keeps it
    if (!ring) return PyErr_Occurred() ? -1 : left(__LINE__, kExpressSideLeft);
    if (PyTuple_GET_ITEM(fast.p, 0) != ring) return left(__LINE__, kExpressSideLeft);
    const int hooked = launch_hooks(e);
    if (hooked < 0) return -1;
    if (hooked) return left(__LINE__, kExpressSideLeft);  // Triton's launch hooks: the Python path
    int64_t k = 0, used = 0, cap = 0, addr = 0;
    if (!attr_int64(plan, e.n_ring_count, &k)) return -1;
    Ref seg;
    {  // Ring.reserve, where the segment has room (else the Python path ships it and takes another)
      TryLock lock(PyObject_GetAttr(ring, e.n__lock));
      if (lock.state < 0) return -1;
      if (lock.state == 0) return left(__LINE__, kExpressSideLeft);
      seg.reset(PyObject_GetAttr(ring, e.n_current));
      if (!seg) return -1;
      if (seg.p == Py_None) return left(__LINE__, kExpressSideLeft);
      if (!attr_int64(seg.p, e.n_used, &used) || !attr_int64(seg.p, e.n_cap, &cap)) return -1;
      first = (used + 7) & ~int64_t{7};
      if (first + k > cap) return left(__LINE__, kExpressSideLeft);
      if (!set_int64(seg.p, e.n_used, first + k)) return -1;
    }
    if (!attr_int64(seg.p, e.n_addr, &addr)) return -1;
    arrival.reset(PyObject_GetAttr(seg.p, e.n_arrival));
    if (!arrival) return -1;
    if (!same_arrival(taken_arrivals, arrival.p)) return left(__LINE__, kExpressSideLeft);
    const int rc = side_call(reinterpret_cast<const int64_t*>(static_cast<intptr_t>(spec)), values, addr + 64 * first,
                             cap - 7 * first / 8);
    if (rc < 0) return -1;
    if (rc >= kSideCuda) return rc;
    if (rc != kSideLaunched) return left(__LINE__, kExpressSideLeft);  // (nothing launched)
  }
  // The side's records numbered and appended to the open run of its arrival (Session.submit_planned).
  Ref records(PyObject_GetAttr(plan, e.n_records));
  if (!records) return -1;
  const Py_ssize_t n_records = PyObject_Length(records.p);
  if (n_records < 0) return -1;
  bool appended = false;
  int64_t seq = -1;
  {
    TryLock count(PyObject_GetAttr(sess, e.n__count_lock));
    if (count.state < 0) return -1;
    if (count.state == 1) {
      int64_t last = 0;
      if (!attr_int64(sess, e.n_seq, &last) || !set_int64(sess, e.n_seq, last + n_records)) return -1;
      seq = last + 1;
    }
  }
  if (seq > 0) {
    TryLock queue_lock(PyObject_GetAttr(sess, e.n__queue_lock));
    if (queue_lock.state < 0) return -1;
    if (queue_lock.state == 1) {
      Ref job(PyObject_GetAttr(sess, e.n__open_run)), thread(PyObject_GetAttr(sess, e.n__thread));
      if (!job || !thread) return -1;
      if (job.p != Py_None && thread.p != Py_None) {
        Ref event(PyObject_GetAttr(job.p, e.n_event)), run(PyObject_GetAttr(job.p, e.n_finish)),
            queue(PyObject_GetAttr(sess, e.n__queue));
        if (!event || !run || !queue) return -1;
        Ref run_lines(PyObject_GetAttr(run.p, e.n_lines));
        if (!run_lines) return -1;
        const Py_ssize_t queued = PyObject_Length(queue.p);
        if (queued < 0) return -1;
        Ref tail(queued ? PySequence_GetItem(queue.p, queued - 1) : nullptr);
        if (queued && !tail) return -1;
        if (event.p == arrival.p && run_lines.p == lines.p && tail.p == job.p) {
          // SideRun.add: its entry, its plan (holding the template the entry points into), its size.
          std::vector<int64_t> entry = {kExpressBaseSide, seq, launch, call, first, text_address, text_records,
                                        static_cast<int64_t>(taken_rows.size())};
          entry.insert(entry.end(), taken_rows.begin(), taken_rows.end());
          Ref bytes(PyBytes_FromStringAndSize(reinterpret_cast<const char*>(entry.data()),
                                              static_cast<Py_ssize_t>(entry.size() * sizeof(int64_t))));
          Ref entries(PyObject_GetAttr(run.p, e.n_entries)), plans(PyObject_GetAttr(run.p, e.n_plans));
          if (!bytes || !entries || !plans) return -1;
          int64_t size = 0;
          if (!attr_int64(run.p, e.n_size, &size)) return -1;
          PyObject* args[2] = {entries.p, bytes.p};
          Ref added(PyObject_VectorcallMethod(e.n_frombytes, args, 2, nullptr));
          if (!added || PyList_Append(plans.p, plan) != 0 || !set_int64(run.p, e.n_size, size + text_size)) return -1;
          appended = true;
        }
      }
    }
  }
  if (!appended) {  // a new run (or a lock another thread holds): the session's own method, which waits
    Ref taken(PyTuple_New(static_cast<Py_ssize_t>(taken_rows.size())));
    if (!taken) return -1;
    for (size_t i = 0; i < taken_rows.size(); ++i) {
      PyObject* row = PyLong_FromLongLong(taken_rows[i]);
      if (!row) return -1;
      PyTuple_SET_ITEM(taken.p, static_cast<Py_ssize_t>(i), row);
    }
    Ref done;
    if (seq > 0) {
      done.reset(PyObject_CallMethod(sess, "_queue_planned", "OOOLLLLO", arrival.p, lines.p, plan,
                                     static_cast<long long>(seq), static_cast<long long>(launch),
                                     static_cast<long long>(call), static_cast<long long>(first), taken.p));
    } else {
      done.reset(PyObject_CallMethod(sess, "submit_planned", "OOOLLLO", arrival.p, lines.p, plan,
                                     static_cast<long long>(launch), static_cast<long long>(call),
                                     static_cast<long long>(first), taken.p));
    }
    if (!done) return -1;
  }
  // A producer's after rows, for the inputs of later launches that take them (_made_rows).
  Ref producer(PyObject_GetAttr(x, e.n_producer)), is_after(PyObject_GetAttr(plan, e.n_after));
  if (!producer || !is_after) return -1;
  if (producer.p == Py_True && is_after.p == Py_True && device.p != Py_None) {
    Ref made(thread_made(tls));
    if (!made) return -1;
    if (made.p == Py_None) {
      made.reset(PyDict_New());
      if (!made || PyObject_SetAttr(tls, e.n_made, made.p) != 0) return -1;
    }
    Ref site_id(PyObject_GetAttr(x, e.n_site_id)), rows(PyObject_GetAttr(plan, e.n_rows));
    if (!site_id || !rows) return -1;
    Ref row_value(PyLong_FromLongLong(first));
    if (!row_value) return -1;
    Ref kept(PyTuple_Pack(3, arrival.p, row_value.p, rows.p));
    if (!kept || PyDict_SetItem(made.p, site_id.p, kept.p) != 0) return -1;
  }
  return kExpressDone;
}

// One hook of an express launch: `after` False (its launch hook: the launch numbered, its
// before side) or True (its done hook: its after side under the launch's numbers).
int express(PyObject* x, PyObject* values, bool after) {
  const ExpressEnv& e = express_env();
  // The session it was planned in, this process's (session.current without making one).
  Ref sess(PyObject_GetAttr(x, e.n_sess)), current(PyObject_GetAttr(e.session_module, e.n__session));
  if (!sess || !current) return -1;
  if (current.p != sess.p) return left(__LINE__, kExpressDeclined);
  int64_t pid = 0;
  if (!attr_int64(sess.p, e.n_pid, &pid)) return -1;
  if (pid != express_pid) return left(__LINE__, kExpressDeclined);
  // A CUDA graph being captured: the hook's own path (hooks._capturing).
  Ref cuda(PyObject_GetAttr(e.hooks_module, e.n__cuda));
  if (!cuda) return -1;
  if (cuda.p != Py_False) {
    if (cuda.p != Py_True) return left(__LINE__, kExpressDeclined);  // not asked yet
    Ref is_capturing(PyObject_GetAttr(e.hooks_module, e.n__is_capturing));
    if (!is_capturing) return -1;
    Ref capturing(PyObject_CallNoArgs(is_capturing.p));
    if (!capturing) return -1;
    const int yes = PyObject_IsTrue(capturing.p);
    if (yes < 0) return -1;
    if (yes) return left(__LINE__, kExpressDeclined);
  }
  Ref tls(PyObject_GetAttr(x, e.n_tls));
  if (!tls) return -1;
  if (tls.p == Py_None) return left(__LINE__, kExpressDeclined);
  int64_t launch = 0, call = 0;
  if (after) {
    Ref l(PyObject_GetAttr(tls.p, e.n_launch)), c(PyObject_GetAttr(tls.p, e.n_call));
    if (!l || !c) {
      if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
      PyErr_Clear();
      return left(__LINE__, kExpressDeclined);
    }
    if (!as_int64(l.p, &launch) || !as_int64(c.p, &call)) return -1;
    Ref plan(PyObject_GetAttr(x, e.n_after));
    if (!plan) return -1;
    return express_plan(x, sess.p, tls.p, plan.p, values, launch, call);
  }
  // Session.next_launch_in: the launch's number and its kernel's call number, together.
  Ref cell(PyObject_GetAttr(x, e.n_calls));
  if (!cell) return -1;
  if (!PyList_CheckExact(cell.p) || PyList_GET_SIZE(cell.p) < 1) return left(__LINE__, kExpressDeclined);
  {
    TryLock count(PyObject_GetAttr(sess.p, e.n__count_lock));
    if (count.state < 0) return -1;
    if (count.state == 0) return left(__LINE__, kExpressDeclined);
    if (!attr_int64(sess.p, e.n_launch, &launch) || !as_int64(PyList_GET_ITEM(cell.p, 0), &call)) return -1;
    launch += 1;
    PyObject* next_call = PyLong_FromLongLong(call + 1);
    if (!next_call || !set_int64(sess.p, e.n_launch, launch)) {
      Py_XDECREF(next_call);
      return -1;
    }
    if (PyList_SetItem(cell.p, 0, next_call) != 0) return -1;  // (steals it; drops the old count)
  }
  Ref label(PyObject_GetAttr(x, e.n_label));
  if (!label || !set_int64(tls.p, e.n_launch, launch) || !set_int64(tls.p, e.n_call, call) ||
      PyObject_SetAttr(tls.p, e.n_label, label.p) != 0) {
    return -1;
  }
  Ref producer(PyObject_GetAttr(x, e.n_producer));
  if (!producer) return -1;
  if (producer.p == Py_True) {  // this call's rows of its outputs, once its after side has them
    Ref made(thread_made(tls.p));
    if (!made) return -1;
    if (PyDict_CheckExact(made.p)) {
      Ref site_id(PyObject_GetAttr(x, e.n_site_id));
      if (!site_id) return -1;
      if (PyDict_DelItem(made.p, site_id.p) != 0) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError)) return -1;
        PyErr_Clear();
      }
    }
  }
  Ref plan(PyObject_GetAttr(x, e.n_before));
  if (!plan) return -1;
  if (plan.p == Py_None) return kExpressDone;
  return express_plan(x, sess.p, tls.p, plan.p, values, launch, call);
}

// express(x, values, after) -> int (hooks.GraphHandle.launch / done).
PyObject* ring_express(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "ring express: 3 arguments");
    return nullptr;
  }
  int r = -1;
  try {
    r = express(args[0], args[1], args[2] == Py_True);
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
    return nullptr;
  }
  return r < 0 ? nullptr : PyLong_FromLong(r);
}

// express_left() -> {line: count} (where hooks left ring_express; reset=True: cleared).
PyObject* ring_express_left(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  PyObject* out = PyDict_New();
  if (!out) return nullptr;
  for (const auto& entry : express_left_lines) {
    if (entry[0] == 0) break;
    Ref line(PyLong_FromLongLong(entry[0])), count(PyLong_FromLongLong(entry[1]));
    if (!line || !count || PyDict_SetItem(out, line.p, count.p) != 0) {
      Py_DECREF(out);
      return nullptr;
    }
  }
  if (nargs == 1 && args[0] == Py_True) std::memset(express_left_lines, 0, sizeof(express_left_lines));
  return out;
}

PyMethodDef ring_express_left_def = {
    "ring_express_left", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&ring_express_left)),
    METH_FASTCALL, "Where hooks left the express function: {line of ring_express.h: count}."};

PyMethodDef ring_express_def = {
    "ring_express", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&ring_express)), METH_FASTCALL,
    "One hook of an express launch at level stats (ring_express.h)."};
#endif

// (the function, express_left), given the modules whose globals the function reads:
// (session, hooks, device_ring, fused_stats). A new reference; None where the planned
// side function is not made here (ring_side_function: call that first), or null with an
// exception set.
PyObject* ring_express_function(PyObject* modules) {
#if AOTI_DEBUG_THPVARIABLE
  if (!cpu_values_config().direct) Py_RETURN_NONE;
  if (!PyTuple_Check(modules) || PyTuple_GET_SIZE(modules) != 4) {
    PyErr_SetString(PyExc_TypeError, "ring express: (session, hooks, device_ring, fused_stats)");
    return nullptr;
  }
  ExpressEnv& e = express_env();
  if (!e.session_module) {
#define AOTI_DEBUG_EXPRESS_INTERN(name)          \
  e.n_##name = PyUnicode_InternFromString(#name); \
  if (!e.n_##name) return nullptr;
    AOTI_DEBUG_EXPRESS_NAMES(AOTI_DEBUG_EXPRESS_INTERN)
#undef AOTI_DEBUG_EXPRESS_INTERN
    express_pid = static_cast<int64_t>(getpid());
    if (pthread_atfork(nullptr, nullptr, &express_forked) != 0) Py_RETURN_NONE;  // (then every hook asks Python)
    PyObject** slots[4] = {&e.session_module, &e.hooks_module, &e.ring_module, &e.fused_module};
    for (int i = 0; i < 4; ++i) {
      PyObject* m = PyTuple_GET_ITEM(modules, i);
      Py_INCREF(m);  // kept for the process, as the interned names are
      *slots[i] = m;
    }
  }
  PyObject* fn = PyCFunction_New(&ring_express_def, nullptr);
  PyObject* where = fn ? PyCFunction_New(&ring_express_left_def, nullptr) : nullptr;
  if (!where) {
    Py_XDECREF(fn);
    return nullptr;
  }
  PyObject* both = PyTuple_Pack(2, fn, where);
  Py_DECREF(fn);
  Py_DECREF(where);
  return both;
#else
  (void)modules;
  Py_RETURN_NONE;
#endif
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_RING_EXPRESS_H
