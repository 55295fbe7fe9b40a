// CSV source: the whole file is parsed up front (types must be known before the first record
// is written); column types are inferred as int64, then float, then bytes, unless stated.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "data/convert/source.h"
#include "engine/core/error.h"

namespace tandem::data {

namespace {

// Splits RFC 4180 CSV text into rows; quoted fields may hold delimiters, quotes ("") and newlines.
std::vector<std::vector<std::string>> parse_csv(const std::string& text, char delimiter, const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string cell;
  bool quoted = false, any = false;
  size_t line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        cell += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        line += c == '\n';
        cell += c;
      }
      continue;
    }
    if (c == '"') {
      quoted = true;
      any = true;
    } else if (c == delimiter) {
      row.push_back(std::move(cell));
      cell.clear();
      any = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (any || !cell.empty()) row.push_back(std::move(cell));
      if (!row.empty()) rows.push_back(std::move(row));
      row.clear();
      cell.clear();
      any = false;
      ++line;
    } else {
      cell += c;
      any = true;
    }
  }
  TANDEM_CHECK(!quoted, ErrorCode::kDataLoss, "{}: a quoted field opened before line {} never closes", path, line);
  if (any || !cell.empty()) row.push_back(std::move(cell));
  if (!row.empty()) rows.push_back(std::move(row));
  return rows;
}

bool parse_int(const std::string& s, int64_t* v) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool parse_float(const std::string& s, float* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *v = std::strtof(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

class CsvSource : public ConvertSource {
 public:
  CsvSource(const std::string& path, const CsvOptions& options) {
    std::ifstream in(path, std::ios::binary);
    TANDEM_CHECK(in.good(), ErrorCode::kNotFound, "cannot open CSV file {}", path);
    std::stringstream ss;
    ss << in.rdbuf();
    rows_ = parse_csv(ss.str(), options.delimiter, path);
    TANDEM_CHECK(!rows_.empty(), ErrorCode::kInvalidArgument, "{} is empty: a CSV source needs a header line", path);
    header_ = std::move(rows_.front());
    for (size_t c = 0; c < header_.size(); ++c) {
      // Each column becomes the feature of its name: a repeated name would silently keep one.
      auto first = std::find(header_.begin(), header_.begin() + static_cast<ptrdiff_t>(c), header_[c]);
      TANDEM_CHECK(first == header_.begin() + static_cast<ptrdiff_t>(c), ErrorCode::kInvalidArgument,
                   "{}: the header names column '{}' twice (columns {} and {}); each column becomes the feature of "
                   "its name, so the names must differ: rename one",
                   path, header_[c], (first - header_.begin()) + 1, c + 1);
    }
    rows_.erase(rows_.begin());
    for (size_t r = 0; r < rows_.size(); ++r) {
      TANDEM_CHECK(rows_[r].size() == header_.size(), ErrorCode::kDataLoss, "{} data row {} has {} fields; the header has {}",
                   path, r + 1, rows_[r].size(), header_.size());
    }
    auto label_it = std::find(header_.begin(), header_.end(), options.label_column);
    TANDEM_CHECK(label_it != header_.end(), ErrorCode::kInvalidArgument, "{}: no label column '{}' in the header ({})",
                 path, options.label_column, fmt::join(header_, ", "));
    label_column_ = static_cast<size_t>(label_it - header_.begin());
    for (const auto& [name, type] : options.types) {
      TANDEM_CHECK(std::find(header_.begin(), header_.end(), name) != header_.end(), ErrorCode::kInvalidArgument,
                   "{}: a type is stated for column '{}', which the header does not have", path, name);
    }
    for (size_t c = 0; c < header_.size(); ++c) {
      auto stated = options.types.find(header_[c]);
      types_.push_back(stated != options.types.end() ? stated->second : infer(c));
      if (types_.back() != FeatureType::kBytes) check_column(c, path);
    }
    assign_labels();
  }

  size_t size() const override { return rows_.size(); }
  int64_t label(size_t i) const override { return labels_[i]; }
  std::string class_name(int64_t label) const override {
    return class_names_.empty() ? std::to_string(label) : class_names_[static_cast<size_t>(label)];
  }
  uint64_t estimated_bytes() const override {
    uint64_t total = 0;
    for (const auto& row : rows_) {
      for (const std::string& cell : row) total += cell.size() + 16;
    }
    return total;
  }

  std::string record(size_t i) const override {
    FeatureMap f;
    for (size_t c = 0; c < header_.size(); ++c) {
      const std::string& cell = rows_[i][c];
      Feature& feature = f[header_[c]];
      if (cell.empty()) continue;  // no kind: an empty list
      if (types_[c] == FeatureType::kInt64) {
        int64_t v = 0;
        parse_int(cell, &v);
        feature = Feature::of_ints({v});
      } else if (types_[c] == FeatureType::kFloat) {
        float v = 0;
        parse_float(cell, &v);
        feature = Feature::of_floats({v});
      } else {
        feature = Feature::of_bytes({cell});
      }
    }
    return serialize_example(f);
  }

 private:
  FeatureType infer(size_t c) const {
    bool ints = true, floats = true;
    for (const auto& row : rows_) {
      if (row[c].empty()) continue;
      int64_t i;
      float f;
      ints = ints && parse_int(row[c], &i);
      floats = floats && parse_float(row[c], &f);
    }
    return ints ? FeatureType::kInt64 : floats ? FeatureType::kFloat : FeatureType::kBytes;
  }

  void check_column(size_t c, const std::string& path) const {
    for (size_t r = 0; r < rows_.size(); ++r) {
      const std::string& cell = rows_[r][c];
      int64_t i;
      float f;
      bool ok = cell.empty() || (types_[c] == FeatureType::kInt64 ? parse_int(cell, &i) : parse_float(cell, &f));
      TANDEM_CHECK(ok, ErrorCode::kInvalidArgument, "{} data row {} column '{}': '{}' is not {}", path, r + 1, header_[c],
                   cell, feature_type_name(types_[c]));
    }
  }

  // An int64 label column is its own class index; any other gets indices in sorted order of its values.
  void assign_labels() {
    const size_t c = label_column_;
    if (types_[c] == FeatureType::kInt64) {
      for (const auto& row : rows_) {
        int64_t v = -1;
        if (!parse_int(row[c], &v)) v = -1;
        labels_.push_back(v);
      }
      return;
    }
    std::vector<std::string> names;
    for (const auto& row : rows_) names.push_back(row[c]);
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    for (const auto& row : rows_) {
      labels_.push_back(std::lower_bound(names.begin(), names.end(), row[c]) - names.begin());
    }
    class_names_ = std::move(names);
  }

  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<FeatureType> types_;
  size_t label_column_ = 0;
  std::vector<int64_t> labels_;
  std::vector<std::string> class_names_;
};

}  // namespace

std::unique_ptr<ConvertSource> open_csv_source(const std::string& path, const CsvOptions& options) {
  return std::make_unique<CsvSource>(path, options);
}

}  // namespace tandem::data
