// safetensors: round trips for every dtype and channels_last, byte-exact output against buffers
// built by hand from the format's description, files laid out as PyTorch's writer lays them out,
// and one corrupt file per validation rule, each giving its own DataLoss message.
#include <gtest/gtest.h>

#include <array>

#include <cstring>

#include "engine/core/checksum.h"
#include "engine/train/checkpoint/safetensors.h"
#include "tests/train/checkpoint_util.h"

namespace tandem::train {
namespace {

using testing::append;
using testing::append_u64;
using testing::TempDir;

// A tensor of the given dtype whose bytes count up from seed, so every byte is checked.
Tensor patterned(const Shape& shape, DType dtype, uint8_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = static_cast<uint8_t*>(t.nbytes() > 0 ? t.raw_data() : nullptr);
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
  return t;
}

// 8-byte length, header text (padded here with spaces to 8 bytes), then data.
std::vector<uint8_t> file_bytes(std::string header, const std::vector<uint8_t>& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> out;
  append_u64(out, header.size());
  append(out, header);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void append_f32(std::vector<uint8_t>& out, float v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}

TEST(Safetensors, RoundTripsEveryDTypeScalarAndEmptyTensors) {
  TempDir dir;
  TensorMap in{{"f32", patterned({2, 3}, DType::kF32, 1)},   {"bf16", patterned({4}, DType::kBF16, 2)},
               {"f16", patterned({2, 2}, DType::kF16, 3)},   {"i32", patterned({3}, DType::kI32, 4)},
               {"i64", patterned({}, DType::kI64, 5)},       {"u8", patterned({5}, DType::kU8, 6)},
               {"empty", patterned({0, 3}, DType::kF32, 7)}, {"rank6", patterned({1, 2, 1, 2, 1, 2}, DType::kF32, 8)}};
  write_safetensors(dir / "a.safetensors", in, {{"format", "pt"}, {"note", "h\u00e9llo \"quoted\""}});
  SafetensorsFile out = read_safetensors(dir / "a.safetensors");
  std::string difference;
  EXPECT_TRUE(testing::bitwise_equal(in, out.tensors, &difference)) << difference;
  EXPECT_EQ(out.metadata.at("note"), "h\u00e9llo \"quoted\"");
  EXPECT_EQ(out.tensors.at("i64").rank(), 0);
  EXPECT_EQ(out.tensors.at("empty").shape(), (Shape{0, 3}));
}

TEST(Safetensors, EveryTensorIsAlignedToItsElementSize) {
  TempDir dir;
  TensorMap in{{"a", patterned({3}, DType::kU8, 1)}, {"b", patterned({1}, DType::kF16, 2)},
               {"c", patterned({3}, DType::kI64, 3)}, {"d", patterned({1}, DType::kF32, 4)}};
  write_safetensors(dir / "a.safetensors", in);
  SafetensorsHeader h = read_safetensors_header(dir / "a.safetensors");
  EXPECT_EQ(h.data_start % 8, 0u);
  for (const auto& e : h.entries) EXPECT_EQ(e.begin % dtype_size(e.dtype), 0u) << e.name;
}

TEST(Safetensors, ChannelsLastIsWrittenInLogicalOrder) {
  TempDir dir;
  std::vector<float> values(2 * 3 * 2 * 2);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  Tensor nchw = Tensor::from_vector(values, {2, 3, 2, 2});
  Tensor nhwc = nchw.to_format(MemoryFormat::kChannelsLast);
  write_safetensors(dir / "nchw.safetensors", {{"w", nchw}});
  write_safetensors(dir / "nhwc.safetensors", {{"w", nhwc}});
  EXPECT_EQ(testing::read_bytes(dir / "nchw.safetensors"), testing::read_bytes(dir / "nhwc.safetensors"));
  Tensor back = read_safetensors(dir / "nhwc.safetensors").tensors.at("w");
  EXPECT_EQ(back.format(), MemoryFormat::kContiguous);
  EXPECT_EQ(back.to_vector(), values);
}

// "tandem.crc32c.NAME":"8 hex digits" for each tensor, as write_safetensors adds them to __metadata__.
std::string crc_entry(const std::string& name, const Tensor& t) {
  return fmt::format(R"("tandem.crc32c.{}":"{:08x}")", name, checksum_crc32c(t.raw_data(), t.nbytes()));
}

TEST(Safetensors, OutputMatchesHandBuiltBytes) {
  TempDir dir;
  std::vector<float> six = {0, 1, 2, 3, 4, 5};
  Tensor a = Tensor::from_vector(six, {1, 2, 3});
  write_safetensors(dir / "a.safetensors", {{"attn.0", a}});
  std::vector<uint8_t> data;
  for (float v : six) append_f32(data, v);
  std::string header = R"({"__metadata__":{)" + crc_entry("attn.0", a) +
                       R"(},"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  std::vector<uint8_t> expected = file_bytes(header, data);
  EXPECT_EQ(testing::read_bytes(dir / "a.safetensors"), expected);
  EXPECT_EQ(expected.size() % 8, 0u);  // the header is padded with spaces to 8 bytes
}

TEST(Safetensors, MetadataFirstThenTensorsByAlignmentThenName) {
  TempDir dir;
  Tensor u8 = patterned({3}, DType::kU8, 10), i64 = patterned({1}, DType::kI64, 20);
  Tensor f32 = patterned({1}, DType::kF32, 30), bf16 = patterned({1}, DType::kBF16, 40);
  write_safetensors(dir / "a.safetensors", {{"a", u8}, {"b", i64}, {"d", bf16}, {"c", f32}}, {{"format", "pt"}});
  std::string header = R"({"__metadata__":{"format":"pt",)" + crc_entry("a", u8) + "," + crc_entry("b", i64) + "," +
                       crc_entry("c", f32) + "," + crc_entry("d", bf16) + "}," +
                       R"("b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                       R"("c":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                       R"("d":{"dtype":"BF16","shape":[1],"data_offsets":[12,14]},)"
                       R"("a":{"dtype":"U8","shape":[3],"data_offsets":[14,17]}})";
  std::vector<uint8_t> data;
  for (const Tensor* t : {&i64, &f32, &bf16, &u8}) {
    auto* p = static_cast<const uint8_t*>(t->raw_data());
    data.insert(data.end(), p, p + t->nbytes());
  }
  EXPECT_EQ(testing::read_bytes(dir / "a.safetensors"), file_bytes(header, data));
  // The checksums are for our reader: the metadata read back is what was written.
  EXPECT_EQ(read_safetensors(dir / "a.safetensors").metadata, (SafetensorsMetadata{{"format", "pt"}}));
}

// One flipped bit in a tensor's data: the header is still valid, so only the checksum sees it.
TEST(Safetensors, AFlippedBitInTensorDataIsCaughtAndNamed) {
  TempDir dir;
  Tensor w = patterned({64}, DType::kF32, 1), b = patterned({4}, DType::kF32, 2);
  write_safetensors(dir / "m.safetensors", {{"conv1.weight", w}, {"fc.bias", b}});
  std::vector<uint8_t> bytes = testing::read_bytes(dir / "m.safetensors");
  bytes[bytes.size() - 3] ^= 0x10;  // inside the last tensor written: fc.bias (names sort "c" < "f")
  testing::write_bytes(dir / "m.safetensors", bytes);
  try {
    read_safetensors(dir / "m.safetensors");
    FAIL() << "a damaged tensor loaded silently";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    const std::string what = e.what();
    EXPECT_NE(what.find("tensor 'fc.bias'"), std::string::npos) << what;
    EXPECT_NE(what.find("fails its checksum"), std::string::npos) << what;
  }
}

TEST(Safetensors, ChecksumOfTheStandardCheckString) {
  EXPECT_EQ(checksum_crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(checksum_crc32c("", 0), 0u);
  // RFC 3720's test vectors (32 bytes: four 8-byte words on the hardware path).
  std::array<uint8_t, 32> bytes{};
  EXPECT_EQ(checksum_crc32c(bytes.data(), bytes.size()), 0x8A9136AAu);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(checksum_crc32c(bytes.data(), bytes.size()), 0x46DD794Eu);
}

TEST(Safetensors, ReadsAFileLaidOutAsPyTorchWritesIt) {
  // torch's safetensors.torch.save_file: compact JSON, "__metadata__" {"format": "pt"}, a 0-d
  // num_batches_tracked, half-precision values; here with keys out of data order as older writers did.
  TempDir dir;
  std::string header = R"({"__metadata__":{"format":"pt"},)"
                       R"("conv.weight":{"dtype":"F32","shape":[2,1,1,2],"data_offsets":[8,24]},)"
                       R"("bn.num_batches_tracked":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                       R"("half":{"dtype":"F16","shape":[2],"data_offsets":[24,28]},)"
                       R"("bf":{"dtype":"BF16","shape":[1],"data_offsets":[28,30]},)"
                       R"("mask":{"dtype":"U8","shape":[2],"data_offsets":[30,32]}})";
  std::vector<uint8_t> data = {7, 0, 0, 0, 0, 0, 0, 0};
  for (float v : {1.5f, -2.0f, 0.25f, 8.0f}) append_f32(data, v);
  data.insert(data.end(), {0x00, 0x3C, 0x00, 0xC0});  // f16 1.0, -2.0
  data.insert(data.end(), {0x80, 0x3F});              // bf16 1.0
  data.insert(data.end(), {1, 0});
  testing::write_bytes(dir / "torch.safetensors", file_bytes(header, data));

  SafetensorsFile f = read_safetensors(dir / "torch.safetensors");
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.tensors.at("bn.num_batches_tracked").data<int64_t>()[0], 7);
  EXPECT_EQ(f.tensors.at("conv.weight").shape(), (Shape{2, 1, 1, 2}));
  EXPECT_EQ(f.tensors.at("conv.weight").to_vector(), (std::vector<float>{1.5f, -2.0f, 0.25f, 8.0f}));
  EXPECT_EQ(half_to_float(f.tensors.at("half").data<Half>()[0]), 1.0f);
  EXPECT_EQ(half_to_float(f.tensors.at("half").data<Half>()[1]), -2.0f);
  EXPECT_EQ(bf16_to_float(f.tensors.at("bf").data<BFloat16>()[0]), 1.0f);
  EXPECT_EQ(f.tensors.at("mask").data<uint8_t>()[0], 1);
}

TEST(Safetensors, MissingFileAndUnwritableDirectoryNameThePath) {
  TempDir dir;
  try {
    read_safetensors(dir / "absent.safetensors");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("absent.safetensors"), std::string::npos) << e.what();
  }
  try {
    write_safetensors(dir / "no" / "such" / "dir.safetensors", {{"x", Tensor::zeros({1})}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::train
