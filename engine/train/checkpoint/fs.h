// std::filesystem calls for checkpoints with their errors turned into tandem::Error (call, path,
// reason), so callers see one error type; plus the few small file helpers checkpoints need.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tandem::train::fs {

void create_directories(const std::filesystem::path& dir);
void create_directory(const std::filesystem::path& dir);  // fails if it exists
void remove_all(const std::filesystem::path& path);
// For cleanup on error paths: never throws; true when something was removed.
bool remove_all_noexcept(const std::filesystem::path& path) noexcept;
bool exists(const std::filesystem::path& path);
bool is_directory(const std::filesystem::path& path);
uint64_t file_size(const std::filesystem::path& path);
// The entries of dir (not recursive), in no particular order.
std::vector<std::filesystem::path> list_directory(const std::filesystem::path& dir);
// Total bytes of the regular files directly in dir.
uint64_t directory_bytes(const std::filesystem::path& dir);
// The whole file; DataLoss when it is over max_bytes (a damaged or wrong file).
std::string read_file(const std::filesystem::path& path, uint64_t max_bytes);

}  // namespace tandem::train::fs
