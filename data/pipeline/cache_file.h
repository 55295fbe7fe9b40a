// The file behind Dataset::cache(filename): our own small versioned format, described in
// docs/PIPELINE.md ("Cache files"). A header records the element count and the body's size, so
// a truncated file is caught when it is opened; every element carries its length and CRC32C,
// so damage found while reading is an error naming the file and the offset.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "data/pipeline/element.h"

namespace tandem::data {

inline constexpr uint32_t kCacheFormatVersion = 1;
inline constexpr size_t kCacheHeaderBytes = 40;

// Writes elements to a temporary file next to `path` (unique per process and writer);
// commit() completes the header and renames it to `path` atomically. A writer destroyed
// before commit() removes its temporary file, so an unfinished pass never leaves a file
// that looks complete.
class CacheFileWriter {
 public:
  explicit CacheFileWriter(std::string path);
  ~CacheFileWriter();
  CacheFileWriter(const CacheFileWriter&) = delete;
  CacheFileWriter& operator=(const CacheFileWriter&) = delete;

  void append(const Element& element);
  void commit();
  uint64_t elements() const { return count_; }
  uint64_t bytes() const { return kCacheHeaderBytes + body_bytes_; }

 private:
  void write(const void* data, size_t size);
  void write_header();

  std::string path_;
  std::string temp_;
  std::FILE* file_ = nullptr;
  uint64_t count_ = 0;
  uint64_t body_bytes_ = 0;
  std::string payload_;  // reused between elements
};

// Reads a committed cache file from the start.
class CacheFileReader {
 public:
  // nullptr when `path` does not exist (*why empty) or fails the checks at open: wrong magic,
  // another format version, a damaged header, a size other than the header's (*why says which).
  static std::unique_ptr<CacheFileReader> open(const std::string& path, std::string* why);
  ~CacheFileReader();
  CacheFileReader(const CacheFileReader&) = delete;
  CacheFileReader& operator=(const CacheFileReader&) = delete;

  // False after the last element; a short read or a CRC mismatch throws kDataLoss naming the
  // file, the element and its offset.
  bool next(Element* out);
  uint64_t elements() const { return count_; }

 private:
  CacheFileReader(std::string path, std::FILE* file, uint64_t count, uint64_t end);
  void read(void* data, size_t size, const char* what);
  [[noreturn]] void corrupt(const std::string& what) const;

  std::string path_;
  std::FILE* file_;
  uint64_t count_;
  uint64_t end_;  // header + body bytes, which open() matched against the file's size
  uint64_t index_ = 0;
  uint64_t offset_ = kCacheHeaderBytes;
  uint64_t element_offset_ = kCacheHeaderBytes;
  std::string payload_;
};

}  // namespace tandem::data
