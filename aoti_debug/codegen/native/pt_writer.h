// Tensor files in the torch zip format (archive/data.pkl, archive/byteorder,
// archive/version, archive/data/0): stored, data 64-byte aligned, zip64 above 4 GiB,
// loadable with torch.load(weights_only=True), also with mmap=True.
#ifndef AOTI_DEBUG_PART_PT_WRITER_H
#define AOTI_DEBUG_PART_PT_WRITER_H

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "constants.h"
#include "crc.h"
#include "dtypes.h"
#include "text.h"

namespace AOTI_DEBUG_NS {
namespace {

void put16(std::string& o, uint32_t v) {
  o.push_back(static_cast<char>(v & 0xff));
  o.push_back(static_cast<char>((v >> 8) & 0xff));
}
void put32(std::string& o, uint32_t v) {
  put16(o, v & 0xffff);
  put16(o, v >> 16);
}
void put64(std::string& o, uint64_t v) {
  put32(o, static_cast<uint32_t>(v));
  put32(o, static_cast<uint32_t>(v >> 32));
}

// Pickle protocol 2 of torch._utils._rebuild_tensor_v2 over a persistent-id storage.
void pickle_int(std::string& o, int64_t v) {
  if (v >= 0 && v < 256) {
    o.push_back('K');
    o.push_back(static_cast<char>(v));
  } else if (v >= 0 && v < 65536) {
    o.push_back('M');
    put16(o, static_cast<uint32_t>(v));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    o.push_back('J');
    put32(o, static_cast<uint32_t>(static_cast<int32_t>(v)));
  } else {
    o.push_back('\x8a');
    o.push_back(8);
    put64(o, static_cast<uint64_t>(v));
  }
}

void pickle_str(std::string& o, const std::string& s) {
  o.push_back('X');
  put32(o, static_cast<uint32_t>(s.size()));
  o += s;
}

void pickle_tuple(std::string& o, const std::vector<int64_t>& v) {
  if (v.empty()) {
    o.push_back(')');
    return;
  }
  if (v.size() > 3) o.push_back('(');
  for (int64_t x : v) pickle_int(o, x);
  if (v.size() == 1) o.push_back('\x85');
  else if (v.size() == 2) o.push_back('\x86');
  else if (v.size() == 3) o.push_back('\x87');
  else o.push_back('t');
}

std::string tensor_pickle(const TypeInfo& ti, const std::vector<int64_t>& shape, int64_t numel) {
  std::vector<int64_t> stride(shape.size());
  int64_t st = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    stride[i] = st;
    st *= std::max<int64_t>(shape[i], 1);
  }
  // dtypes without a typed storage class (uint16/32/64, complex32, float8: type_info names
  // the dtype itself) are pickled as torch.save pickles them: _rebuild_tensor_v3 over an
  // UntypedStorage counted in bytes, the dtype last (torch.load reads a dtype in v2's
  // storage slot as a storage class and fails).
  bool untyped = std::strcmp(ti.storage, ti.name) == 0;
  std::string o = "\x80\x02";
  o += untyped ? "ctorch._utils\n_rebuild_tensor_v3\n" : "ctorch._utils\n_rebuild_tensor_v2\n";
  o += "((";
  pickle_str(o, "storage");
  o += untyped ? "ctorch.storage\nUntypedStorage\n" : "ctorch\n" + std::string(ti.storage) + "\n";
  pickle_str(o, "0");
  pickle_str(o, "cpu");
  pickle_int(o, untyped ? numel * ti.unit * ti.units : numel);
  o += "tQ";
  pickle_int(o, 0);
  pickle_tuple(o, shape);
  pickle_tuple(o, stride);
  o += "\x89";
  o += "ccollections\nOrderedDict\n)R";
  if (untyped) o += "ctorch\n" + std::string(ti.name) + "\n";
  o += "tR.";
  return o;
}

struct ZipEntry {
  std::string name;
  uint32_t crc;
  uint64_t size;
  uint64_t offset;
};

// Local header for `name` at `offset`, padded so that its data starts 64-aligned.
void local_header(std::string& o, ZipEntry& e, bool zip64) {
  e.offset = o.size();
  size_t fixed = 30 + e.name.size() + (zip64 ? 20 : 0);
  size_t pad = (64 - (e.offset + fixed + 4) % 64) % 64;
  put32(o, 0x04034b50u);
  put16(o, zip64 ? 45 : 20);
  put16(o, 0);  // flags
  put16(o, 0);  // stored
  put16(o, 0);  // time
  put16(o, 0x21);  // date 1980-01-01
  put32(o, e.crc);
  put32(o, zip64 ? 0xffffffffu : static_cast<uint32_t>(e.size));
  put32(o, zip64 ? 0xffffffffu : static_cast<uint32_t>(e.size));
  put16(o, static_cast<uint32_t>(e.name.size()));
  put16(o, static_cast<uint32_t>((zip64 ? 20 : 0) + 4 + pad));
  o += e.name;
  if (zip64) {
    put16(o, 0x0001);
    put16(o, 16);
    put64(o, e.size);
    put64(o, e.size);
  }
  put16(o, 0x4246);  // "FB": torch's padding field
  put16(o, static_cast<uint32_t>(pad));
  o.append(pad, 'Z');
}

void central_entry(std::string& o, const ZipEntry& e, bool zip64) {
  put32(o, 0x02014b50u);
  put16(o, zip64 ? 45 : 20);
  put16(o, zip64 ? 45 : 20);
  put16(o, 0);
  put16(o, 0);
  put16(o, 0);
  put16(o, 0x21);
  put32(o, e.crc);
  put32(o, zip64 ? 0xffffffffu : static_cast<uint32_t>(e.size));
  put32(o, zip64 ? 0xffffffffu : static_cast<uint32_t>(e.size));
  put16(o, static_cast<uint32_t>(e.name.size()));
  put16(o, zip64 ? 28 : 0);
  put16(o, 0);  // comment
  put16(o, 0);  // disk
  put16(o, 0);  // internal attributes
  put32(o, 0);  // external attributes
  put32(o, zip64 ? 0xffffffffu : static_cast<uint32_t>(e.offset));
  o += e.name;
  if (zip64) {
    put16(o, 0x0001);
    put16(o, 24);
    put64(o, e.size);
    put64(o, e.size);
    put64(o, e.offset);
  }
}

// Writes the new file `name` in the directory `dir_fd` (AT_FDCWD: `name` is a path),
// created with O_EXCL|O_NOFOLLOW: never a file that was there, never through a link.
// Returns "" or an error text naming `shown`. `data` is `nbytes` contiguous bytes.
std::string write_pt_at(int dir_fd, const char* name, const std::string& shown, const TypeInfo& ti,
                        const std::vector<int64_t>& shape, int64_t numel, const void* data, uint64_t nbytes,
                        bool force_zip64) {
  auto crc = [](const void* p, size_t n) { return crc32_of(p, n); };
  std::string pkl = tensor_pickle(ti, shape, numel);
  static const std::string kByteorder = "little";
  static const std::string kVersion = "3\n";
  const std::string archive = "archive/";
  std::vector<ZipEntry> entries = {
      {archive + "data.pkl", crc(pkl.data(), pkl.size()), pkl.size(), 0},
      {archive + "byteorder", crc(kByteorder.data(), kByteorder.size()), kByteorder.size(), 0},
      {archive + "version", crc(kVersion.data(), kVersion.size()), kVersion.size(), 0},
      {archive + "data/0", crc32_parallel(data, nbytes), nbytes, 0},
  };
  const std::string* small[3] = {&pkl, &kByteorder, &kVersion};
  std::string head;
  for (int i = 0; i < 3; ++i) {
    local_header(head, entries[i], false);
    head += *small[i];
  }
  bool big = force_zip64 || nbytes >= 0xffffffffull;
  local_header(head, entries[3], big);
  uint64_t cd_offset = head.size() + nbytes;
  std::string tail;
  for (int i = 0; i < 4; ++i) central_entry(tail, entries[i], i == 3 && big);
  uint64_t cd_size = tail.size();
  bool big_cd = big || cd_offset >= 0xffffffffull;
  if (big_cd) {
    uint64_t z64_offset = cd_offset + cd_size;
    put32(tail, 0x06064b50u);  // zip64 end of central directory record
    put64(tail, 44);
    put16(tail, 45);
    put16(tail, 45);
    put32(tail, 0);
    put32(tail, 0);
    put64(tail, 4);
    put64(tail, 4);
    put64(tail, cd_size);
    put64(tail, cd_offset);
    put32(tail, 0x07064b50u);  // locator
    put32(tail, 0);
    put64(tail, z64_offset);
    put32(tail, 1);
  }
  put32(tail, 0x06054b50u);
  put16(tail, 0);
  put16(tail, 0);
  put16(tail, 4);
  put16(tail, 4);
  put32(tail, big_cd ? 0xffffffffu : static_cast<uint32_t>(cd_size));
  put32(tail, big_cd ? 0xffffffffu : static_cast<uint32_t>(cd_offset));
  put16(tail, 0);

  int fd = ::openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return "save: cannot open " + shown + ": " + errno_text(errno);
  struct iovec iov[3] = {
      {const_cast<char*>(head.data()), head.size()},
      {const_cast<void*>(data), static_cast<size_t>(nbytes)},
      {const_cast<char*>(tail.data()), tail.size()},
  };
  int first = 0;
  std::string err;
  while (first < 3) {
    ssize_t w = ::writev(fd, iov + first, 3 - first);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = "save: cannot write " + shown + ": " + errno_text(w < 0 ? errno : ENOSPC);
      break;
    }
    size_t left = static_cast<size_t>(w);
    while (first < 3 && left >= iov[first].iov_len) {
      left -= iov[first].iov_len;
      ++first;
    }
    if (first < 3) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  if (::close(fd) != 0 && err.empty()) err = "save: cannot close " + shown + ": " + errno_text(errno);
  if (!err.empty()) ::unlinkat(dir_fd, name, 0);
  return err;
}

// write_pt_at for a path (a new file there, not through a link at its last component).
inline std::string write_pt(const std::string& path, const TypeInfo& ti, const std::vector<int64_t>& shape,
                            int64_t numel, const void* data, uint64_t nbytes, bool force_zip64) {
  return write_pt_at(AT_FDCWD, path.c_str(), path, ti, shape, numel, data, nbytes, force_zip64);
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_PT_WRITER_H
