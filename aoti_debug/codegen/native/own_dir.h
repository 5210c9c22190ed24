// Directories and files below the dump root, opened and written through descriptors and
// never through a link: the C++ side of format.writer.refusal_at, open_own_dir and
// write_atomic_at (run_dir.h claims the run directory with them, run_json.h rewrites
// run.json, sources.h makes the folders and files of its source copies).
#ifndef AOTI_DEBUG_PART_OWN_DIR_H
#define AOTI_DEBUG_PART_OWN_DIR_H

#include <cerrno>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "text.h"

namespace AOTI_DEBUG_NS {
namespace {

// format.writer.refusal_at: why the entry `name` of the directory `parent` is no
// directory of this user's, or "" (it is one, or it does not exist). Links are looked
// at, never followed. The Python runtime words them alike.
std::string refusal_at(int parent, const char* name) {
  struct stat st;
  if (::fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return "";
  if (S_ISLNK(st.st_mode)) return "a symbolic link (links below AOTI_DEBUG_DIR are never followed)";
  if (!S_ISDIR(st.st_mode)) return "a file that is not a directory";
  if (st.st_uid != ::geteuid()) return "a directory of uid " + std::to_string(st.st_uid) + " (not this user's)";
  return "";
}

// format.writer.open_own_dir: the directory `name` in `parent`, opened with
// O_DIRECTORY|O_NOFOLLOW and checked to be that entry (device and inode as lstat sees
// them) and this user's. -1 with `why` set where it is refused (a link, not a directory,
// another user's, swapped meanwhile); -1 with `why` empty and errno kept where it could
// not be opened otherwise.
int open_own_dir(int parent, const char* name, std::string& why) {
  why.clear();
  int fd = ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ELOOP || e == ENOTDIR) why = refusal_at(parent, name);
    errno = e;
    return -1;
  }
  struct stat st, entry;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  if (::fstatat(parent, name, &entry, AT_SYMLINK_NOFOLLOW) != 0 || entry.st_dev != st.st_dev ||
      entry.st_ino != st.st_ino) {
    why = "a directory that was replaced while it was opened";
  } else if (st.st_uid != ::geteuid()) {
    why = "a directory of uid " + std::to_string(st.st_uid) + " (not this user's)";
  }
  if (!why.empty()) {
    ::close(fd);
    errno = EPERM;
    return -1;
  }
  return fd;
}

// The file `name` of the directory `dir_fd` (`shown` in messages), replaced atomically:
// a new temporary file (O_EXCL|O_NOFOLLOW) renamed over it, never a write through a link.
bool write_file_atomic_at(int dir_fd, const char* name, const std::string& shown, const std::string& text,
                          std::string& err) {
  std::string tmp = std::string(name) + ".cpp." + std::to_string(static_cast<long>(::getpid())) + ".tmp";
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::openat(dir_fd, tmp.c_str(), flags, 0644);
  if (fd < 0 && errno == EEXIST) {  // left by a write that was cut short
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    fd = ::openat(dir_fd, tmp.c_str(), flags, 0644);
  }
  if (fd < 0) {
    err = "cannot write " + shown + ".cpp.tmp: " + errno_text(errno);
    return false;
  }
  const char* p = text.data();
  size_t n = text.size();
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = "cannot write " + shown + ": " + errno_text(errno);
      ::close(fd);
      ::unlinkat(dir_fd, tmp.c_str(), 0);
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  ::close(fd);
  if (::renameat(dir_fd, tmp.c_str(), dir_fd, name) != 0) {
    err = "cannot write " + shown + ": " + errno_text(errno);
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return false;
  }
  return true;
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_OWN_DIR_H
