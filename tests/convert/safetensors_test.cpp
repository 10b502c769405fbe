// The safetensors reader: a well-formed file is read exactly (names sorted, dtype, shape,
// the bytes of each tensor), and every malformed header is an error that names the
// problem — never an out-of-bounds view.
#include "convert/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace minfer::convert {
namespace {

namespace fs = std::filesystem;

// Writes header length + header + data to a fresh file and returns its path.
std::string write_st(const std::string& name, const std::string& header, const std::string& data,
                     uint64_t header_len_override = 0) {
  const fs::path p =
      fs::temp_directory_path() / ("minfer_st_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream out(p, std::ios::binary);
  uint64_t n = header_len_override ? header_len_override : header.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.write(len, 8);
  out << header << data;
  return p.string();
}

std::string open_error(const std::string& path) {
  auto f = SafetensorsFile::open(path);
  fs::remove(path);
  return f.ok() ? std::string("(opened)") : f.error().message;
}

TEST(Safetensors, ReadsTensorsSortedByNameWithTheirBytes) {
  std::string data(8 + 6, '\0');
  const float a[2] = {1.5f, -2.0f};
  std::memcpy(data.data(), a, 8);
  data.replace(8, 6, "abcdef");
  const std::string header = R"({"z.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("a.bias":{"dtype":"BF16","shape":[1,3],"data_offsets":[8,14]},)"
                             R"("__metadata__":{"format":"pt"}})";
  const std::string path = write_st("ok", header, data);
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  const auto& t = (*f)->tensors();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name, "a.bias");
  EXPECT_EQ(t[0].dtype, StDType::kBF16);
  EXPECT_EQ(t[0].shape, (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(t[0].n_elements, 3u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(t[0].data.data()), t[0].data.size()),
            "abcdef");
  EXPECT_EQ(t[1].name, "z.weight");
  float got[2];
  ASSERT_EQ(t[1].data.size(), 8u);
  std::memcpy(got, t[1].data.data(), 8);
  EXPECT_EQ(got[0], 1.5f);
  EXPECT_EQ(got[1], -2.0f);
  fs::remove(path);
}

TEST(Safetensors, OtherDtypesAreReadAndNamed) {
  const std::string path = write_st(
      "i64", R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", std::string(16, '\1'));
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ((*f)->tensors()[0].dtype, StDType::kOther);
  EXPECT_EQ((*f)->tensors()[0].dtype_name, "I64");
  fs::remove(path);
}

TEST(Safetensors, MalformedFilesAreErrorsThatNameTheProblem) {
  const std::string d16(16, '\0');
  struct Case {
    const char* name;
    std::string header;
    std::string data;
    uint64_t len_override;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"hdr_past_end", "{}", "", 1000, "runs past the end of the file"},
      {"huge_len", "{}", "", ~0ull, "runs past the end of the file"},
      {"not_json", "{oops", d16, 0, "header is not JSON"},
      {"not_object", "[1,2]", d16, 0, "header is not a JSON object"},
      {"entry_not_object", R"({"t":5})", d16, 0, "header entry is not an object"},
      {"no_dtype", R"({"t":{"shape":[1],"data_offsets":[0,4]}})", d16, 0, "no \"dtype\""},
      {"bad_dtype", R"({"t":{"dtype":"F4","shape":[1],"data_offsets":[0,4]}})", d16, 0,
       "unknown dtype \"F4\""},
      {"neg_dim", R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", d16, 0,
       "not an integer >= 0"},
      {"float_dim", R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", d16, 0,
       "not an integer >= 0"},
      {"one_offset", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", d16, 0,
       "is not [begin, end]"},
      {"reversed", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", d16, 0,
       "outside the data section"},
      {"past_data", R"({"t":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", d16, 0,
       "outside the data section (16 bytes)"},
      {"huge_offset",
       R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]}})",
       d16, 0, "outside the data section"},
      {"size_mismatch", R"({"t":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}})", d16, 0,
       "needs 6 bytes but data_offsets span 8"},
      {"count_overflow",
       R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})",
       d16, 0, "element count overflows"},
      {"bytes_overflow",
       R"({"t":{"dtype":"F32","shape":[4611686018427387904,2],"data_offsets":[0,4]}})", d16, 0,
       "byte size overflows"},
  };
  for (const Case& c : cases) {
    const std::string msg = open_error(write_st(c.name, c.header, c.data, c.len_override));
    EXPECT_NE(msg.find(c.needle), std::string::npos) << c.name << ": " << msg;
  }
  // Shorter than the 8-byte length.
  const fs::path p =
      fs::temp_directory_path() / ("minfer_st_" + std::to_string(::getpid()) + "_short");
  std::ofstream(p, std::ios::binary) << "abc";
  EXPECT_NE(open_error(p.string()).find("truncated: 3 bytes"), std::string::npos);
}

}  // namespace
}  // namespace minfer::convert
