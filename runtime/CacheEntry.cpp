#include "runtime/CacheEntry.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstring>
#include <map>
#include <random>

#include "compiler/Sha256.h"
#include "runtime/Nvrtc.h"
#include "runtime/Version.h"

namespace tilejit {

namespace {

constexpr std::string_view kMagic = "TJKCACHE";
constexpr size_t kDigestBytes = 32;

template <typename T>
void put_int(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

// Reads a little-endian integer at `pos`, advancing it; false when the bytes run out.
template <typename T>
bool get_int(std::string_view in, size_t& pos, T& value) {
  if (in.size() - pos < sizeof(T)) return false;
  value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    value |= static_cast<T>(static_cast<uint8_t>(in[pos + i])) << (8 * i);
  }
  pos += sizeof(T);
  return true;
}

std::string digest_bytes(std::string_view data) {
  auto d = Sha256().update(data).digest();
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

// Metadata values are single-line by construction; names from callers are flattened to be sure.
std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

std::map<std::string, std::string> parse_header(std::string_view text) {
  std::map<std::string, std::string> fields;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    size_t eq = line.find('=');
    if (eq != std::string_view::npos) {
      fields.emplace(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
    }
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return fields;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= s.size() && !s.empty()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    parts.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return parts;
}

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

std::string encode_cache_entry(const CompiledKernel& kernel) {
  std::string_view payload(kernel.cubin.data(), kernel.cubin.size());
  std::string header = fmt::format(
      "key={}\narch={}\nprogram={}\nvariant={}\nentry_points={}\nnvrtc={}\ntilejit={}\n"
      "compile_seconds={:.6f}\npayload_bytes={}\npayload_sha256={}\n",
      kernel.key, kernel.arch, one_line(kernel.program_name), one_line(kernel.variant),
      fmt::join(kernel.entry_points, ","), nvrtc_version(), version(), kernel.compile_seconds,
      payload.size(), sha256_hex(payload));
  std::string out(kMagic);
  put_int<uint32_t>(out, kCacheFormatVersion);
  put_int<uint32_t>(out, static_cast<uint32_t>(header.size()));
  out += header;
  put_int<uint64_t>(out, payload.size());
  out += payload;
  out += digest_bytes(out);
  return out;
}

std::string decode_cache_entry(std::string_view bytes, const std::string& key,
                               const std::string& arch, CompiledKernel& out) {
  if (bytes.size() < kMagic.size() + 8 + kDigestBytes) return "truncated (too short)";
  if (bytes.substr(0, kMagic.size()) != kMagic) return "not a tilejit cache entry (bad magic)";
  std::string_view body = bytes.substr(0, bytes.size() - kDigestBytes);
  if (digest_bytes(body) != bytes.substr(body.size())) return "checksum mismatch (corrupt)";

  size_t pos = kMagic.size();
  uint32_t format = 0, header_len = 0;
  get_int(body, pos, format);
  if (format != static_cast<uint32_t>(kCacheFormatVersion)) {
    return fmt::format("format version {} (this tilejit writes {})", format, kCacheFormatVersion);
  }
  if (!get_int(body, pos, header_len) || body.size() - pos < header_len) return "truncated header";
  auto fields = parse_header(body.substr(pos, header_len));
  pos += header_len;
  uint64_t payload_len = 0;
  if (!get_int(body, pos, payload_len) || body.size() - pos != payload_len) {
    return "truncated or oversized payload";
  }
  std::string_view payload = body.substr(pos);

  auto field = [&](const char* name) -> const std::string& {
    static const std::string empty;
    auto it = fields.find(name);
    return it == fields.end() ? empty : it->second;
  };
  if (field("key") != key) return fmt::format("entry is for key '{}'", field("key"));
  if (field("arch") != arch) return fmt::format("entry is for arch '{}'", field("arch"));
  if (field("nvrtc") != nvrtc_version()) return fmt::format("made by NVRTC {}", field("nvrtc"));
  if (field("tilejit") != version()) return fmt::format("made by tilejit {}", field("tilejit"));
  if (field("payload_bytes") != std::to_string(payload.size())) return "payload size mismatch";
  if (field("payload_sha256") != sha256_hex(payload)) return "payload checksum mismatch";
  if (payload.empty()) return "empty cubin";

  out.key = key;
  out.arch = arch;
  out.cubin.assign(payload.begin(), payload.end());
  out.entry_points = split_commas(field("entry_points"));
  out.program_name = field("program");
  out.variant = field("variant");
  const std::string& seconds = field("compile_seconds");
  out.compile_seconds = 0;
  std::from_chars(seconds.data(), seconds.data() + seconds.size(), out.compile_seconds);
  out.source = CompiledKernel::DiskHit;
  return {};
}

CacheEntryInfo inspect_cache_entry(std::string_view bytes) {
  CacheEntryInfo info;
  if (bytes.size() < kMagic.size() + 8 + kDigestBytes) {
    info.problem = "truncated (too short)";
    return info;
  }
  if (bytes.substr(0, kMagic.size()) != kMagic) {
    info.problem = "not a tilejit cache entry (bad magic)";
    return info;
  }
  std::string_view body = bytes.substr(0, bytes.size() - kDigestBytes);
  size_t pos = kMagic.size();
  uint32_t format = 0, header_len = 0;
  get_int(body, pos, format);
  if (!get_int(body, pos, header_len) || body.size() - pos < header_len) {
    info.problem = "truncated header";
    return info;
  }
  info.fields = parse_header(body.substr(pos, header_len));
  pos += header_len;
  uint64_t payload_len = 0;
  bool whole = get_int(body, pos, payload_len) && body.size() - pos == payload_len;
  info.payload_bytes = whole ? payload_len : 0;
  if (digest_bytes(body) != bytes.substr(body.size())) {
    info.problem = "checksum mismatch (corrupt or truncated)";
  } else if (format != static_cast<uint32_t>(kCacheFormatVersion)) {
    info.problem = fmt::format("format version {} (this tilejit writes {})", format,
                               kCacheFormatVersion);
  } else if (!whole) {
    info.problem = "truncated or oversized payload";
  } else if (info.fields["payload_sha256"] != sha256_hex(body.substr(pos))) {
    info.problem = "payload checksum mismatch";
  }
  return info;
}

CacheEntryRead read_cache_entry(const std::filesystem::path& file, const std::string& key,
                                const std::string& arch) {
  CacheEntryRead result;
  int fd = ::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return result;  // Missing
    result.status = err == ELOOP ? CacheEntryRead::Unsafe : CacheEntryRead::Unreadable;
    result.problem = err == ELOOP ? "is a symbolic link" : errno_text(err);
    return result;
  }
  // Checks on the opened descriptor, not the path, so the file cannot be swapped in between.
  struct stat st {};
  std::string data;
  if (::fstat(fd, &st) != 0) {
    result.status = CacheEntryRead::Unreadable;
    result.problem = errno_text(errno);
  } else if (!S_ISREG(st.st_mode)) {
    result.status = CacheEntryRead::Unsafe;
    result.problem = "is not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    result.status = CacheEntryRead::Unsafe;
    result.problem =
        fmt::format("is owned by uid {}, not by this user (uid {})", st.st_uid, ::geteuid());
  } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    result.status = CacheEntryRead::Unsafe;
    result.problem = fmt::format("is writable by group or others (mode {:o})", st.st_mode & 0777);
  } else {
    data.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < data.size()) {
      ssize_t n = ::read(fd, data.data() + got, data.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    data.resize(got);
    std::string problem = decode_cache_entry(data, key, arch, result.kernel);
    result.status = problem.empty() ? CacheEntryRead::Loaded : CacheEntryRead::Corrupt;
    result.problem = problem;
  }
  ::close(fd);
  return result;
}

std::string write_cache_entry(const std::filesystem::path& file, const CompiledKernel& kernel) {
  std::string bytes = encode_cache_entry(kernel);
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path temp = file;
  temp += fmt::format(".tmp.{}.{}.{}", ::getpid(), counter++, std::random_device{}());

  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fmt::format("cannot create {}: {}", temp.string(), errno_text(errno));
  auto fail = [&](const char* what) {
    std::string error = fmt::format("{} {}: {}", what, temp.string(), errno_text(errno));
    ::close(fd);
    ::unlink(temp.c_str());
    return error;
  };
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("cannot write");
    done += static_cast<size_t>(n);
  }
  // The data must be on disk before the rename makes it visible, or a crash could leave a
  // complete-looking name over incomplete contents.
  if (::fsync(fd) != 0) return fail("cannot fsync");
  ::close(fd);
  if (::rename(temp.c_str(), file.c_str()) != 0) {
    std::string error = fmt::format("cannot rename to {}: {}", file.string(), errno_text(errno));
    ::unlink(temp.c_str());
    return error;
  }
  // Persist the rename itself; failing here loses durability only, not correctness.
  int dir_fd = ::open(file.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return {};
}

std::string make_private_directories(const std::filesystem::path& dir) {
  std::filesystem::path partial;
  for (const auto& part : dir) {
    partial /= part;
    if (::mkdir(partial.c_str(), 0700) == 0 || errno == EEXIST) {
      struct stat st {};
      if (::stat(partial.c_str(), &st) != 0) {
        return fmt::format("cannot stat {}: {}", partial.string(), errno_text(errno));
      }
      if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a directory", partial.string());
      continue;
    }
    return fmt::format("cannot create {}: {}", partial.string(), errno_text(errno));
  }
  return {};
}

CacheFileLock::CacheFileLock(const std::filesystem::path& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd_ < 0) return;
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
  }
}

CacheFileLock::~CacheFileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace tilejit
