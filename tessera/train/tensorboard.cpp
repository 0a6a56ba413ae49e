#include "tessera/train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "tessera/core/error.h"

namespace tessera::train {

namespace {

static_assert(std::endian::native == std::endian::little,
              "the TFRecord and protobuf encoders below write host-order fixed-width fields");

// The byte-at-a-time table of the reflected Castagnoli polynomial. A record is written once
// per logged step (a few hundred bytes), so a table lookup per byte is far below any cost that
// matters; the SSE4.2 crc32 instruction would only tie the build to x86.
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Protobuf wire format: a key is (field << 3) | wire type.
enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

void put_key(std::string& out, uint32_t field, Wire wire) { put_varint(out, (field << 3) | wire); }

template <typename T>
void put_fixed(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event's two leading fields; the caller appends its oneof.
std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_key(e, 1, kFixed64);
  put_fixed(e, wall_time);
  if (step != 0) {  // proto3 leaves a zero scalar out
    put_key(e, 2, kVarint);
    put_varint(e, uint64_t(step));
  }
  return e;
}

}  // namespace

uint32_t crc32c(std::span<const char> bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (char b : bytes) c = kCrc32cTable[(c ^ uint8_t(b)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::span<const char> bytes) {
  const uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& data) {
  std::string r;
  put_fixed(r, uint64_t(data.size()));
  put_fixed(r, masked_crc32c(std::span<const char>(r.data(), 8)));
  r += data;
  put_fixed(r, masked_crc32c(data));
  return r;
}

std::string file_version_event(double wall_time) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string scalars_event(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    put_key(v, 2, kFixed32);
    put_fixed(v, float(value));  // Summary.Value.simple_value is a float
    put_bytes(summary, 1, v);
  }
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string log;
  put_key(log, 1, kVarint);
  put_varint(log, 1);  // SessionLog.START
  std::string e = event_header(wall_time, step);
  put_bytes(e, 7, log);
  return e;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t resume_step) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TESSERA_CHECK(!ec, "--tensorboard: cannot create the directory ", dir, ": ", ec.message());
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  // The writer's number in this process keeps two runs of one program within a second apart.
  static std::atomic<int> writers{0};
  const double now = unix_seconds();
  path_ = dir + "/events.out.tfevents." + std::to_string(int64_t(now)) + "." + host + "." +
          std::to_string(getpid()) + "." + std::to_string(writers++) + ".tessera";
  TESSERA_CHECK(!std::filesystem::exists(path_), "--tensorboard: the event file ", path_,
                " exists already");
  out_.open(path_, std::ios::binary | std::ios::trunc);
  TESSERA_CHECK(out_.good(), "--tensorboard: cannot create the event file ", path_, ": ",
                std::strerror(errno));
  write_record(file_version_event(now));
  // TensorBoard drops the points of earlier files at and after a START's step: the first step
  // this run will write.
  if (resume_step > 0) write_record(session_start_event(now, resume_step + 1));
}

void TensorBoardWriter::add_scalars(int64_t step,
                                    const std::vector<std::pair<std::string, double>>& scalars) {
  write_record(scalars_event(unix_seconds(), step, scalars));
}

void TensorBoardWriter::write_record(const std::string& event) {
  const std::string r = tfrecord(event);
  out_.write(r.data(), std::streamsize(r.size()));
  out_.flush();
  TESSERA_CHECK(out_.good(), "--tensorboard: writing ", path_, " failed: ", std::strerror(errno));
}

}  // namespace tessera::train
