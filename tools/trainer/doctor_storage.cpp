// Where the data files live: stat() gives the block device, whose queue/rotational in sysfs says
// whether it spins (a partition asks its parent disk); statfs() names network file systems.
// Both starve an input pipeline that reads shards in parallel.
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include <fmt/format.h>

#include "tools/trainer/doctor_config.h"

namespace tandem::tools {
namespace {

struct FsKind {
  uint32_t magic;
  const char* name;
  bool network;
};

// statfs f_type magics (linux/magic.h and the file systems' own headers).
constexpr FsKind kFileSystems[] = {
    {0xEF53, "ext2/3/4", false},     {0x58465342, "xfs", false},   {0x9123683E, "btrfs", false},
    {0x01021994, "tmpfs", false},    {0x794C7630, "overlay", false}, {0x2FC12FC1, "zfs", false},
    {0x6969, "nfs", true},           {0xFF534D42, "cifs", true},   {0xFE534D42, "smb2", true},
    {0x517B, "smb", true},           {0x65735546, "fuse", true},   {0x01021997, "9p", true},
    {0x00C36400, "ceph", true},      {0x5346414F, "afs", true},    {0x0BD00BD0, "lustre", true},
    {0x47504653, "gpfs", true},      {0x013111A8, "ibrix", true},
};

// queue/rotational of a sysfs block-device folder, or nothing when it has none.
std::optional<bool> read_rotational(const std::filesystem::path& dir) {
  std::ifstream in(dir / "queue" / "rotational");
  int value = -1;
  if (!(in >> value) || (value != 0 && value != 1)) return std::nullopt;
  return value == 1;
}

}  // namespace

StorageInfo probe_storage(const std::string& path) {
  StorageInfo info;
  struct statfs fs {};
  if (statfs(path.c_str(), &fs) != 0) {
    info.detail = fmt::format("statfs({}) failed: {}", path, std::strerror(errno));
    return info;
  }
  auto magic = static_cast<uint32_t>(fs.f_type);  // CIFS's magic is negative as a signed long
  info.filesystem = fmt::format("0x{:x}", magic);
  for (const FsKind& kind : kFileSystems) {
    if (kind.magic == magic) {
      info.filesystem = kind.name;
      info.network = kind.network;
    }
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    info.detail = fmt::format("stat({}) failed: {}", path, std::strerror(errno));
    return info;
  }
  auto dev = fmt::format("/sys/dev/block/{}:{}", major(st.st_dev), minor(st.st_dev));
  std::error_code ec;
  std::filesystem::path real = std::filesystem::canonical(dev, ec);
  if (ec) {
    info.detail = fmt::format("{} file system on device {}:{}, which is no block device (no {})", info.filesystem,
                              major(st.st_dev), minor(st.st_dev), dev);
    return info;
  }
  // A partition (sda1) has no queue/ of its own: its folder sits inside the whole disk's (sda).
  for (const std::filesystem::path& dir : {real, real.parent_path()}) {
    if (auto rotational = read_rotational(dir)) {
      info.rotational = rotational;
      info.detail = fmt::format("{} on {} ({}/queue/rotational = {})", info.filesystem, real.filename().string(),
                                dir.string(), *rotational ? 1 : 0);
      return info;
    }
  }
  info.detail = fmt::format("no queue/rotational under {} or its parent", real.string());
  return info;
}

std::vector<backend::Cause> check_storage(const StorageInfo& s, const std::string& path) {
  std::vector<backend::Cause> causes;
  constexpr const char* kFix =
      "copy the TFRecords to a local SSD (NVMe) and point data.files there, or set data.cache: true "
      "so only the first epoch reads them";
  if (s.network) {
    causes.push_back({backend::Severity::kWarning,
                      fmt::format("data files under {} are on a network file system ({}): reads are slow and "
                                  "latency-bound, so the GPU waits for input",
                                  path, s.filesystem),
                      kFix});
  }
  if (s.rotational.value_or(false)) {
    causes.push_back({backend::Severity::kWarning,
                      fmt::format("data files under {} are on a rotational disk ({}): parallel shard reads seek "
                                  "and the GPU waits for input",
                                  path, s.detail),
                      kFix});
  }
  return causes;
}

}  // namespace tandem::tools
