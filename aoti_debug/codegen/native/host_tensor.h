// A tensor's metadata through the AOTI shim, and its values as contiguous row-major
// host bytes: CPU tensors in place (strided ones gathered), contiguous CUDA tensors
// with one copy into a reused pinned buffer (the wrapper's DeviceOps), anything else
// through the shim (aoti_torch_empty_strided + aoti_torch_copy_).
#ifndef AOTI_DEBUG_PART_HOST_TENSOR_H
#define AOTI_DEBUG_PART_HOST_TENSOR_H

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "constants.h"
#include "dtypes.h"
#include "interface.h"

namespace AOTI_DEBUG_NS {
namespace {

struct HostTensor {
  int32_t dtype = -1;
  int32_t device_type = 0;
  int32_t device_index = 0;
  std::vector<int64_t> shape, stride;
  int64_t numel = 0;
  const void* data = nullptr;  // contiguous row-major host bytes, or null
  uint64_t nbytes = 0;
  std::vector<unsigned char> gathered;
  AtenTensorHandle host_copy = nullptr;
  ~HostTensor() {
    if (host_copy) aoti_torch_delete_tensor_object(host_copy);
  }
};

// Metadata of `h`; "" or an error text.
std::string describe(AtenTensorHandle h, HostTensor& t) {
  int64_t ndim = 0;
  int64_t* sizes = nullptr;
  int64_t* strides = nullptr;
  if (aoti_torch_get_dim(h, &ndim) || aoti_torch_get_sizes(h, &sizes) ||
      aoti_torch_get_strides(h, &strides) || aoti_torch_get_dtype(h, &t.dtype) ||
      aoti_torch_get_device_type(h, &t.device_type) ||
      aoti_torch_get_device_index(h, &t.device_index)) {
    return "cannot read tensor metadata through the AOTI shim";
  }
  t.shape.assign(sizes, sizes + ndim);
  t.stride.assign(strides, strides + ndim);
  t.numel = 1;
  for (int64_t s : t.shape) t.numel *= s;
  return "";
}

bool is_contiguous(const int64_t* shape, const int64_t* stride, size_t nd) {
  int64_t expected = 1;
  for (size_t i = nd; i-- > 0;) {
    if (shape[i] != 1 && stride[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

bool is_contiguous(const HostTensor& t) { return is_contiguous(t.shape.data(), t.stride.data(), t.shape.size()); }

template <class E>
inline void gather_row(unsigned char* out, const unsigned char* src, int64_t n, int64_t stride) {
  E* o = reinterpret_cast<E*>(out);
  const E* s = reinterpret_cast<const E*>(src);
  for (int64_t j = 0; j < n; ++j) o[j] = s[j * stride];
}

// A transposed or permuted layout: its last dim strided, dim `k` closer together in
// memory. Gathered in kTile x kTile tiles over (k, last), reading along k: a tile reads
// kTile runs of kTile elements, where the row-by-row gather reads one cache line per
// element (a transposed 2M-element float32 tensor: ~20 ms row by row on the CI machine).
template <class E>
void gather_tiled(unsigned char* out, const unsigned char* p, const int64_t* shape, const int64_t* stride, size_t nd,
                  size_t k) {
  constexpr int64_t kTile = 32;
  const size_t l = nd - 1;
  std::vector<int64_t> ostride(nd);
  int64_t outer = 1;
  for (size_t d = nd, s = 1; d-- > 0;) {
    ostride[d] = static_cast<int64_t>(s);
    s *= static_cast<size_t>(shape[d]);
    if (d != k && d != l) outer *= shape[d];
  }
  const int64_t nk = shape[k], nl = shape[l], sk = stride[k], sl = stride[l], ok = ostride[k];
  const E* src = reinterpret_cast<const E*>(p);
  E* dst = reinterpret_cast<E*>(out);
  E tile[kTile * kTile];
  std::vector<int64_t> idx(nd, 0);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t in_at = 0, out_at = 0;
    for (size_t d = 0; d < nd; ++d) {
      in_at += idx[d] * stride[d];
      out_at += idx[d] * ostride[d];
    }
    for (int64_t i0 = 0; i0 < nk; i0 += kTile) {
      const int64_t ni = std::min(kTile, nk - i0);
      for (int64_t j0 = 0; j0 < nl; j0 += kTile) {
        const int64_t nj = std::min(kTile, nl - j0);
        // Each source run (along k) read at once into the tile, each output row written
        // at once from it: no line is needed twice, so strides that map every line of a
        // tile to one cache set (powers of two) cost nothing.
        for (int64_t j = 0; j < nj; ++j) {
          const E* s = src + in_at + i0 * sk + (j0 + j) * sl;
          for (int64_t i = 0; i < ni; ++i) tile[i * kTile + j] = s[i * sk];
        }
        for (int64_t i = 0; i < ni; ++i) {
          E* d = dst + out_at + (i0 + i) * ok + j0;
          for (int64_t j = 0; j < nj; ++j) d[j] = tile[i * kTile + j];
        }
      }
    }
    for (size_t d = nd; d-- > 0;) {  // the next index of the other dims (k and l stay 0)
      if (d == k || d == l) continue;
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// The `numel` values of a CPU tensor at `p` (elements of `esize` bytes) as contiguous
// row-major bytes: `p` itself when the layout already is, else gathered into `buf`.
const void* cpu_values(const void* p, size_t esize, const int64_t* shape, const int64_t* stride, size_t nd,
                       int64_t numel, std::vector<unsigned char>& buf) {
  if (is_contiguous(shape, stride, nd)) return p;
  buf.resize(static_cast<size_t>(numel) * esize);
  if (nd >= 2 && numel > 0 && (esize == 1 || esize == 2 || esize == 4 || esize == 8)) {
    size_t k = nd;  // the other dim nearest together in memory, if nearer than the last
    for (size_t d = 0; d + 1 < nd; ++d) {
      if (shape[d] > 1 && stride[d] > 0 && stride[d] < stride[nd - 1] && (k == nd || stride[d] < stride[k])) k = d;
    }
    if (k < nd && shape[nd - 1] > 1) {
      switch (esize) {
        case 1: gather_tiled<uint8_t>(buf.data(), static_cast<const unsigned char*>(p), shape, stride, nd, k); break;
        case 2: gather_tiled<uint16_t>(buf.data(), static_cast<const unsigned char*>(p), shape, stride, nd, k); break;
        case 4: gather_tiled<uint32_t>(buf.data(), static_cast<const unsigned char*>(p), shape, stride, nd, k); break;
        default: gather_tiled<uint64_t>(buf.data(), static_cast<const unsigned char*>(p), shape, stride, nd, k);
      }
      return buf.data();
    }
  }
  std::vector<int64_t> idx(nd, 0);
  const unsigned char* base = static_cast<const unsigned char*>(p);
  unsigned char* out = buf.data();
  int64_t inner = nd ? shape[nd - 1] : 1;
  int64_t inner_stride = nd ? stride[nd - 1] : 0;
  for (int64_t done = 0; done < numel; done += inner) {
    int64_t off = 0;
    for (size_t d = 0; d + 1 < nd; ++d) off += idx[d] * stride[d];
    const unsigned char* src = base + off * static_cast<int64_t>(esize);
    if (inner_stride == 1) {
      std::memcpy(out, src, static_cast<size_t>(inner) * esize);
    } else {
      switch (esize) {
        case 1: gather_row<uint8_t>(out, src, inner, inner_stride); break;
        case 2: gather_row<uint16_t>(out, src, inner, inner_stride); break;
        case 4: gather_row<uint32_t>(out, src, inner, inner_stride); break;
        case 8: gather_row<uint64_t>(out, src, inner, inner_stride); break;
        default:
          for (int64_t j = 0; j < inner; ++j) {
            std::memcpy(out + j * esize, src + j * inner_stride * static_cast<int64_t>(esize), esize);
          }
      }
    }
    out += inner * esize;
    for (size_t d = nd >= 1 ? nd - 1 : 0; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return buf.data();
}

// One pinned host buffer per runtime (grown to the largest tensor up to 256 MiB; larger
// ones take the shim's copy), used under shared().mu. Never freed: the CUDA runtime may
// be torn down before this runtime's statics at exit.
void* pinned_buffer(const DeviceOps& dev, uint64_t n) {
  constexpr uint64_t kMax = 256ull << 20;
  static void* buf = nullptr;
  static uint64_t cap = 0;
  static bool failed = false;
  if (n > kMax || failed || !dev.alloc_host) return nullptr;
  if (n > cap) {
    uint64_t want = 1ull << 20;
    while (want < n) want <<= 1;
    void* p = nullptr;
    if (dev.alloc_host(&p, static_cast<size_t>(want)) != 0) {
      if (dev.clear_error) dev.clear_error();
      failed = true;  // pinned memory refused: the shim's copy from now on
      return nullptr;
    }
    if (buf && dev.free_host) dev.free_host(buf);
    buf = p;
    cap = want;
  }
  return buf;
}

// Makes t.data point at contiguous host bytes; "" or an error text. `dev`: the wrapper's
// device functions (null in CPU wrappers).
std::string host_values(AtenTensorHandle h, HostTensor& t, const DeviceOps* dev) {
  const TypeInfo* ti = type_info(t.dtype);
  if (!ti) return "unsupported dtype " + std::to_string(t.dtype);
  size_t esize = static_cast<size_t>(ti->unit * ti->units);
  t.nbytes = static_cast<uint64_t>(t.numel) * esize;
  if (t.numel == 0) {
    t.data = "";
    return "";
  }
  if (t.device_type == kDeviceCpu) {
    void* p = nullptr;
    if (aoti_torch_get_data_ptr(h, &p) || !p) return "cannot read the tensor's data pointer";
    t.data = cpu_values(p, esize, t.shape.data(), t.stride.data(), t.shape.size(), t.numel, t.gathered);
    return "";
  }
  // A contiguous CUDA tensor: one copy into the reusable pinned buffer (several times the
  // speed of a copy into fresh pageable memory). The device was synchronised before the
  // side was read (record_side).
  if (dev && dev->copy_to_host && t.device_type == kDeviceCuda && is_contiguous(t)) {
    void* src = nullptr;
    void* dst = pinned_buffer(*dev, t.nbytes);
    if (dst && aoti_torch_get_data_ptr(h, &src) == 0 && src) {
      if (dev->copy_to_host(dst, src, static_cast<size_t>(t.nbytes)) == 0) {
        t.data = dst;
        return "";
      }
      if (dev->clear_error) dev->clear_error();  // the shim's copy below reports what is wrong
    }
  }
  // A device tensor: a contiguous CPU copy through the shim (synchronous copy).
  std::vector<int64_t> cstride(t.shape.size());
  int64_t st = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    cstride[i] = st;
    st *= std::max<int64_t>(t.shape[i], 1);
  }
  if (aoti_torch_empty_strided(static_cast<int64_t>(t.shape.size()), t.shape.data(), cstride.data(),
                               t.dtype, kDeviceCpu, 0, &t.host_copy)) {
    t.host_copy = nullptr;
    return "copy: cannot allocate a host buffer";
  }
  if (aoti_torch_copy_(t.host_copy, h, 0)) return "copy: device to host copy failed";
  void* p = nullptr;
  if (aoti_torch_get_data_ptr(t.host_copy, &p) || !p) return "copy: no host data pointer";
  t.data = p;
  return "";
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_HOST_TENSOR_H
