// A GPU wrapper without a GPU (tests/test_device_stats.py): tensors that the AOTI shim
// below reports as CUDA tensors (their memory is host memory, as the fake libcuda.so.1's),
// one launch site called twice, and the C++ runtime (runtime.h: every part, inlined)
// recording them with the DeviceOps a GPU wrapper lends.
//   harness PACK file|linked|nostream stats|print|save [finite-inputs]
//                                      -> the records; "copied=<bytes> unsynced=<copies>"
//   (finite-inputs: the launch reads only integer tensors, so that its NaN/Inf outputs are
//   a birth for AOTI_DEBUG_TRIGGER=nonfinite; mixed: each call also launches a CPU kernel
//   after it, whose records must not overtake the device launch's; strided: tensors 0-3,
//   10 and 15 are strided ones instead (read in place by the strided kernel, but the
//   int64 one); steady: no tensor needs a device copy (the misaligned int64 one is
//   aligned), so that each side's table is the same at both calls; moved: steady, and the
//   second call reads the 3,000,000 floats at another address (the same values);
//   unsynced: copies of device values made before any DeviceOps::synchronize)
//   harness PACK file|linked stats|print chain|chain-unlinked
//                                      -> a graph call of kChain launches, each reading the
//   previous one's output (linked to it: Arg::reuse_site; or not) and a weight, three calls
//   with new values each; the records; "copied=<bytes> unsynced=<copies>"
//   (chain-inputs, chain-waits-inputs[-strided]: a graph_inputs site reads the weight once a
//   call, before the first launch, and every launch's weight links to it, as codegen's
//   Inputs; -strided: the weight is a transposed view, read by the strided kernel)
//   harness PACK parse                                    -> parse_pack's verdict
//   harness PACK bench [CALLS] [waits]                    -> "us_per_side=" (benchmarks/cpp_side_cost.py)
#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

struct AtenTensorOpaque {
  int32_t dtype, device_type, device_index;
  std::vector<int64_t> sizes, strides;
  unsigned char* data;  // first element
  size_t esize;
};

namespace {
size_t element_size(int32_t dtype) {
  switch (dtype) {
    case 0: case 1: case 11: case 23: case 24: return 1;
    case 2: case 5: case 15: case 27: return 2;
    case 3: case 6: case 28: return 4;
    case 8: return 4;  // complex32
    case 9: return 8;  // complex64
    case 10: return 16;  // complex128
    default: return 8;
  }
}

AtenTensorHandle make(int32_t dtype, int32_t device_type, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                      size_t byte_offset = 0) {
  auto* t = new AtenTensorOpaque{dtype, device_type, 0, sizes, strides, nullptr, element_size(dtype)};
  int64_t span = 1;
  for (size_t i = 0; i < sizes.size(); ++i) span += (sizes[i] - 1) * strides[i];
  size_t bytes = static_cast<size_t>(std::max<int64_t>(span, 1)) * t->esize + byte_offset;
  unsigned char* p = static_cast<unsigned char*>(std::aligned_alloc(256, (bytes + 255) / 256 * 256));
  t->data = p + byte_offset;
  return t;
}

int64_t numel_of(const AtenTensorOpaque* t) {
  int64_t n = 1;
  for (int64_t s : t->sizes) n *= s;
  return n;
}

// Deterministic contents: floats with a NaN and an Inf, everything else raw bits.
void fill(AtenTensorHandle t, uint64_t seed) {
  int64_t span = 1;
  for (size_t i = 0; i < t->sizes.size(); ++i) span += (t->sizes[i] - 1) * t->strides[i];
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < span; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    unsigned char* e = t->data + i * t->esize;
    if (t->dtype == 6 || t->dtype == 9) {  // float32, complex64 (two floats)
      for (size_t part = 0; part < t->esize / 4; ++part) {
        float f = static_cast<float>(static_cast<int64_t>((x >> (20 + part)) % 20001) - 10000) / 7.0f;
        if (i == 3) f = NAN;
        if (i == 5) f = INFINITY;
        std::memcpy(e + 4 * part, &f, 4);
      }
    } else if (t->dtype == 4) {  // int64
      int64_t v = static_cast<int64_t>(x >> 11) - (int64_t{1} << 52);
      std::memcpy(e, &v, 8);
    } else if (t->dtype == 11) {  // bool
      *e = (x >> 33) & 1;
    } else {
      for (size_t b = 0; b < t->esize; ++b) e[b] = static_cast<unsigned char>(x >> (8 * b + 13));
    }
  }
}
uint64_t g_synced = 0, g_unsynced = 0;
}  // namespace

extern "C" {
AOTITorchError aoti_torch_get_dim(AtenTensorHandle t, int64_t* r) {
  *r = static_cast<int64_t>(t->sizes.size());
  return 0;
}
AOTITorchError aoti_torch_get_sizes(AtenTensorHandle t, int64_t** r) { *r = t->sizes.data(); return 0; }
AOTITorchError aoti_torch_get_strides(AtenTensorHandle t, int64_t** r) { *r = t->strides.data(); return 0; }
AOTITorchError aoti_torch_get_dtype(AtenTensorHandle t, int32_t* r) { *r = t->dtype; return 0; }
AOTITorchError aoti_torch_get_device_type(AtenTensorHandle t, int32_t* r) { *r = t->device_type; return 0; }
AOTITorchError aoti_torch_get_device_index(AtenTensorHandle t, int32_t* r) { *r = t->device_index; return 0; }
AOTITorchError aoti_torch_get_data_ptr(AtenTensorHandle t, void** r) { *r = t->data; return 0; }
AOTITorchError aoti_torch_get_storage_offset(AtenTensorHandle, int64_t* r) { *r = 0; return 0; }
AOTITorchError aoti_torch_get_storage_size(AtenTensorHandle t, int64_t* r) { *r = numel_of(t) * t->esize; return 0; }
AOTITorchError aoti_torch_delete_tensor_object(AtenTensorHandle t) { delete t; return 0; }
AOTITorchError aoti_torch_new_tensor_handle(AtenTensorHandle t, AtenTensorHandle* r) {
  *r = new AtenTensorOpaque(*t);  // the same memory (never freed by a handle)
  return 0;
}
AOTITorchError aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes, const int64_t* strides, int32_t dtype,
                                        int32_t device_type, int32_t device_index, AtenTensorHandle* r) {
  *r = make(dtype, device_type, std::vector<int64_t>(sizes, sizes + ndim),
            std::vector<int64_t>(strides, strides + ndim));
  (*r)->device_index = device_index;
  return 0;
}
AOTITorchError aoti_torch_copy_(AtenTensorHandle dst, AtenTensorHandle src, int32_t) {
  if (src->device_type != 0 && dst->device_type == 0 && !g_synced) g_unsynced += 1;
  int64_t n = numel_of(src);
  size_t nd = src->sizes.size();
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t so = 0, d = 0;
    for (size_t k = 0; k < nd; ++k) {
      so += idx[k] * src->strides[k];
      d += idx[k] * dst->strides[k];
    }
    std::memcpy(dst->data + d * dst->esize, src->data + so * src->esize, src->esize);
    for (size_t k = nd; k-- > 0;) {
      if (++idx[k] < src->sizes[k]) break;
      idx[k] = 0;
    }
  }
  return 0;
}
AOTITorchError aoti_torch__reinterpret_tensor(AtenTensorHandle, int64_t, const int64_t*, const int64_t*, int64_t,
                                              AtenTensorHandle*) {
  return 1;
}
}

#include "runtime.h"

using namespace aoti_debug_rt_1;

namespace {
uint64_t g_copied = 0;
std::string g_pack_file;

const DeviceOps* ops(const std::string& mode, const unsigned char* pack) {
  static DeviceOps o = {
      [] {
        g_synced += 1;
        return 0;
      },
      [](int) { return "fake error"; },
      [](void* dst, const void* src, size_t n) {
        std::memcpy(dst, src, n);
        g_copied += n;
        if (!g_synced) g_unsynced += 1;
        return 0;
      },
      [](void** p, size_t n) {
        *p = std::malloc(n);
        return *p ? 0 : 2;
      },
      [](void* p) { std::free(p); },
      [] {},
      [](char* buf, size_t cap) {
        std::snprintf(buf, cap, "Fake GPU");
        return 0;
      },
      [](int32_t, void** stream) {
        *stream = reinterpret_cast<void*>(0x5151);
        return 0;
      },
      nullptr,
      "",
  };
  if (mode == "nostream") o.current_stream = nullptr;
  if (mode == "linked") o.stats_pack = pack;
  else o.stats_pack_file = g_pack_file.c_str();
  return &o;
}
}  // namespace

// benchmarks/cpp_side_cost.py: the runtime's host time per launch side at level stats,
// a graph call of 40 launches of a small float32 kernel (an input its previous launch
// wrote, a weight, transposed at every fourth; one output), `calls` times. `waits`: the
// sites defer (Site::defers, as codegen writes them at stats) and each call ends with
// entry_call_end, where what waits is launched.
int bench(int calls, bool waits) {
  constexpr int kSites = 40;
  std::vector<AtenTensorHandle> bufs;
  for (int i = 0; i <= kSites; ++i) bufs.push_back(make(kF32, kDeviceCuda, {8, 128}, {128, 1}));
  AtenTensorHandle wt = make(kF32, kDeviceCuda, {128, 8}, {1, 128}), w = make(kF32, kDeviceCuda, {8, 128}, {128, 1});
  for (AtenTensorHandle t : bufs) fill(t, 1);
  fill(wt, 2);
  fill(w, 3);
  static Arg in[] = {{"buf0", "input", "tensor", "buf0", 0, 0, ""}, {"w", "input", "tensor", "w", 1, 0, ""}};
  static Arg out[] = {{"buf1", "output", "tensor", "buf1", 0, 0, ""}};
  std::vector<std::string> names;
  for (int s = 0; s < kSites; ++s) names.push_back("triton_poi_fused_" + std::to_string(s));
  std::vector<Site> before(kSites), after(kSites);
  for (int s = 0; s < kSites; ++s) {
    before[s] = {"", names[s].c_str(), names[s].c_str(), schema::kStats, 0, 2, 2, in, "", "before,after", __FILE__,
                 __LINE__, "", "inference", "", s, "", waits ? 1 : 0};
    after[s] = before[s];
    after[s].n = 1;
    after[s].args = out;
  }
  Graph graph = {nullptr, ops("file", nullptr)};
  Token token = {0, 0};
  auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < calls; ++c) {
    for (int s = 0; s < kSites; ++s) {
      Value bv[2] = {Value(bufs[s]), Value(s % 4 == 0 ? wt : w)};
      entry_launch(&graph, &token, &before[s], bv, 2);
      Value av[1] = {Value(bufs[s + 1])};
      entry_done(&graph, &token, &after[s], av, 1);
    }
    if (waits) entry_call_end(&graph);
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  std::printf("sides=%d us_per_side=%.3f\n", 2 * kSites * calls, us / (2.0 * kSites * calls));
  return 0;
}

// A chain of launches whose inputs are their predecessors' outputs (records.h's links):
// launch s reads buf[s] (from launch s-1, unchanged: linked where `links`) and a weight,
// and writes buf[s+1] (filled between its two sides, as a kernel would). Three graph
// calls, each with new values, each ended by entry_call_end.
//   waits (Site::defers): the sides' stats launches wait for entry_pending / entry_call_end;
//   overwrite: launch 3 rewrites the weight after its before side read it (in place, as an
//   inout arg), with entry_pending before it where `pending` (what codegen writes there).
//   inputs: site kChain (graph_inputs, after args only) reads the weight first in each call
//   and the launches' weight args link to it; strided: the weight is a transposed view.
int chain(const DeviceOps* device, schema::Level level, bool links, bool waits = false, bool overwrite = false,
          bool pending = true, bool inputs = false, bool strided = false) {
  constexpr int kChain = 6;
  std::vector<AtenTensorHandle> bufs;
  for (int i = 0; i <= kChain; ++i) bufs.push_back(make(kF32, kDeviceCuda, {4, 100}, {100, 1}));
  AtenTensorHandle w = strided ? make(kF32, kDeviceCuda, {4, 100}, {1, 4}) : make(kF32, kDeviceCuda, {4, 100}, {100, 1});
  fill(w, 99);
  std::vector<std::string> names;
  std::vector<std::vector<Arg>> in(kChain), out(kChain);
  std::vector<Site> before(kChain), after(kChain);
  Arg read_once[1] = {{"w", "output", "tensor", "w", 0, 0, ""}};
  Site inputs_site = {"", "graph_inputs", "graph_inputs", level, 0, 1, 1, read_once, "", "before,after", __FILE__,
                      __LINE__, "", "inference", "", kChain, "", waits ? 1 : 0};
  for (int s = 0; s < kChain; ++s) names.push_back("triton_poi_fused_chain_" + std::to_string(s));
  for (int s = 0; s < kChain; ++s) {
    const int producer = links && s > 0 ? s - 1 : -1;
    in[s] = {{"x", "input", "tensor", "x", 0, 0, "", producer, producer >= 0 ? 0 : -1},
             {"w", "input", "tensor", "w", 1, 0, "", inputs ? kChain : -1, inputs ? 0 : -1}};
    out[s] = {{"y", "output", "tensor", "y", 2, 0, ""}};
    before[s] = {"", names[s].c_str(), names[s].c_str(), level, 0, 2, 2, in[s].data(), "", "before,after", __FILE__,
                 __LINE__, "", "inference", "", s, "", waits ? 1 : 0};
    after[s] = before[s];
    after[s].n = 1;
    after[s].args = out[s].data();
  }
  Graph graph = {nullptr, device};
  Token token = {0, 0};
  for (int call = 0; call < 3; ++call) {
    fill(bufs[0], 1000 + call);
    fill(w, 99);
    if (inputs) {
      Value wv[1] = {Value(w)};
      entry_launch(&graph, &token, &inputs_site, nullptr, 0);
      entry_done(&graph, &token, &inputs_site, wv, 1);
    }
    for (int s = 0; s < kChain; ++s) {
      Value bv[2] = {Value(bufs[s]), Value(w)};
      entry_launch(&graph, &token, &before[s], bv, 2);
      if (overwrite && s == 3) {
        if (pending) entry_pending(&graph);
        fill(w, 500 + call);  // the launch writes the weight it read
      }
      fill(bufs[s + 1], 100 * call + s);  // what the kernel writes
      Value av[1] = {Value(bufs[s + 1])};
      entry_done(&graph, &token, &after[s], av, 1);
    }
    entry_call_end(&graph);
  }
  std::printf("copied=%llu unsynced=%llu\n", static_cast<unsigned long long>(g_copied),
              static_cast<unsigned long long>(g_unsynced));
  return 0;
}

int main(int argc, char** argv) {
  g_pack_file = argv[1];
  std::string mode = argv[2];
  std::ifstream f(argv[1], std::ios::binary);
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  unsigned char* pack = static_cast<unsigned char*>(std::aligned_alloc(256, (bytes.size() + 256) / 256 * 256));
  if (!bytes.empty()) std::memcpy(pack, bytes.data(), bytes.size());
  if (mode == "parse") {
    Pack p;
    std::string err = parse_pack(pack, bytes.size(), p);
    std::printf("%s|%zu|%zu\n", err.empty() ? "ok" : err.c_str(), p.kernels.size(), p.dtypes.size());
    for (const PackKernel& k : p.kernels) {
      std::printf("%u %u %u %u %u %u %s\n", k.kind, k.vec, k.num_warps, k.shared, k.width, k.cols, k.name);
    }
    return 0;
  }
  if (mode == "bench") return bench(argc > 3 ? std::atoi(argv[3]) : 200, argc > 4 && std::string(argv[4]) == "waits");
  std::string level = argc > 3 ? argv[3] : "stats";
  const std::string variant = argc > 4 ? argv[4] : "";
  bool finite_inputs = variant == "finite-inputs";
  bool mixed = variant == "mixed";
  bool strided = variant == "strided";
  bool moved = variant == "moved";
  bool steady = moved || variant == "steady";
  schema::Level lv = level == "print" ? schema::kPrint : level == "save" ? schema::kSave : schema::kStats;
  if (variant == "chain" || variant == "chain-unlinked") return chain(ops(mode, pack), lv, variant == "chain");
  if (variant == "chain-waits") return chain(ops(mode, pack), lv, true, true);
  if (variant == "chain-overwrite") return chain(ops(mode, pack), lv, true, false, true);
  if (variant == "chain-waits-overwrite") return chain(ops(mode, pack), lv, true, true, true);
  if (variant == "chain-waits-overwrite-unguarded") return chain(ops(mode, pack), lv, true, true, true, false);
  if (variant == "chain-inputs") return chain(ops(mode, pack), lv, true, false, false, true, true);
  if (variant == "chain-waits-inputs") return chain(ops(mode, pack), lv, true, true, false, true, true);
  if (variant == "chain-waits-inputs-strided") return chain(ops(mode, pack), lv, true, true, false, true, true, true);
  const int cuda = kDeviceCuda, cpu = kDeviceCpu;
  std::vector<AtenTensorHandle> ts = {
      make(kF32, cuda, {3, 1000}, {1000, 1}),     // 0
      make(kBF16, cuda, {257}, {1}),              // 1
      make(kF16, cuda, {64, 33}, {33, 1}),        // 2
      make(kI64, cuda, {5000}, {1}),              // 3
      make(kBool, cuda, {100}, {1}),              // 4
      make(kC64, cuda, {10}, {1}),                // 5
      make(kF32, cuda, {40, 50}, {1, 40}),        // 6: non-contiguous
      make(kI64, cuda, {77}, {1}, 4),             // 7: misaligned for its width
      make(kF32, cuda, {0, 5}, {5, 1}),           // 8: empty
      make(kU16, cuda, {300}, {1}),               // 9: no kernel in the test's pack
      make(kF8E4M3FN, cuda, {999}, {1}),          // 10
      make(kF32, cuda, {3000000}, {1}),           // 11: many programs
      make(kF32, cpu, {10}, {1}),                 // 12: a CPU tensor
      make(kF32, cuda, {8}, {1}),                 // 13: uninitialised before the launch
      make(kF32, cuda, {100}, {1}, 4),            // 14: (after) 4 bytes off 16: the float32 group unvectorised
      make(kF64, cuda, {50}, {1}),                // 15
  };
  if (strided) {
    ts[0] = make(kF32, cuda, {2, 4, 8, 16}, {1536, 16, 192, 1}, 256);  // k of a fused QKV [2, 8, 3*4*16]: gaps
    ts[1] = make(kBF16, cuda, {2, 3, 5, 7}, {105, 1, 21, 3});          // channels_last, 3 channels
    ts[2] = make(kF16, cuda, {2, 3, 4, 8}, {32, 0, 8, 1});             // expanded: a stride-0 dim
    ts[3] = make(kI64, cuda, {6, 7}, {1, 6});                          // no strided kernel for int64: copied
    ts[10] = make(kF32, cuda, {512, 1024}, {1, 512});                  // transposed, many programs
    ts[15] = make(kF32, cuda, {33, 20}, {1, 33}, 4);                   // 4 bytes off 16: with 6, unvectorised
  }
  if (steady) ts[7] = make(kI64, cuda, {77}, {1});  // aligned: no tensor is copied on the device
  for (size_t i = 0; i < ts.size(); ++i) fill(ts[i], i + 1);
  static const char* names[] = {"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10", "a11", "a12",
                                "a13", "a14", "a15"};
  std::vector<Arg> before_args, after_args;
  std::vector<Value> before_vals, after_vals;
  for (int i = 0; i < 16; ++i) {
    if (i != 14 && (!finite_inputs || i == 3 || i == 4 || i == 7)) {
      before_args.push_back({names[i], "input", "tensor", names[i], static_cast<int>(before_args.size()), i == 13, ""});
      before_vals.push_back(Value(ts[i]));
    }
    if (i != 13) {
      after_args.push_back({names[i], "output", "tensor", names[i], static_cast<int>(after_args.size()), 0, ""});
      after_vals.push_back(Value(ts[i]));
    }
  }
  Site before = {"", "triton_fake_kernel_0", "triton_fake_kernel_0", lv, 0, static_cast<int>(before_args.size()),
                 static_cast<int>(before_args.size()), before_args.data(), "", "before,after", __FILE__, __LINE__,
                 "", "inference", "", 0, ""};
  Site after = before;
  after.n = static_cast<int>(after_args.size());
  after.args = after_args.data();
  Graph graph = {nullptr, ops(mode, pack)};
  Token token = {0, 0};
  Arg cpu_args[] = {{"c0", "input", "tensor", "c0", 0, 0, ""}, {"c1", "output", "tensor", "c1", 1, 0, ""}};
  Value cpu_vals[] = {Value(ts[12]), Value(ts[12])};
  Site cpu_before = before;
  cpu_before.kernel = cpu_before.op = "cpp_fake_cpu_1";
  cpu_before.index_base = 1;
  cpu_before.n = 1;
  cpu_before.args = cpu_args;
  cpu_before.id = 1;
  Site cpu_after = cpu_before;
  cpu_after.args = cpu_args + 1;
  cpu_after.index_base = 1;
  for (int call = 0; call < 2; ++call) {
    if (moved && call == 1) {  // the 3,000,000 floats at another address, the same values
      AtenTensorHandle m = make(kF32, cuda, {3000000}, {1});
      fill(m, 12);
      for (Value& v : before_vals) v = v.handle() == ts[11] ? Value(m) : v;
      for (Value& v : after_vals) v = v.handle() == ts[11] ? Value(m) : v;
    }
    entry_launch(&graph, &token, &before, before_vals.data(), before_vals.size());
    entry_done(&graph, &token, &after, after_vals.data(), after_vals.size());
    if (mixed) {
      entry_launch(&graph, &token, &cpu_before, cpu_vals, 1);
      entry_done(&graph, &token, &cpu_after, cpu_vals + 1, 1);
    }
  }
  std::printf("copied=%llu unsynced=%llu\n", static_cast<unsigned long long>(g_copied),
              static_cast<unsigned long long>(g_unsynced));
  return 0;
}
