// TensorBoard event files (train/tensorboard.h): the CRC against its standard check value, the
// framing and Event encoding decoded back by an independent reader written here from the
// TFRecord and protobuf specifications, and a run's file against its metrics.jsonl.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "tessera/train/tensorboard.h"
#include "tools/tools_test_util.h"

namespace tessera::cli::testing {
namespace {

using train::crc32c;
using train::masked_crc32c;

// One decoded Event: the fields the writer sets.
struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> scalars;
  std::optional<int> session_status;
};

// A protobuf reader over one message: (field, wire type) then the value.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return pos_ == bytes_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      EXPECT_LT(pos_, bytes_.size()) << "varint runs past the message";
      EXPECT_LT(shift, 64) << "varint longer than 10 bytes";
      if (pos_ >= bytes_.size() || shift >= 64) return 0;
      const uint8_t b = uint8_t(bytes_[pos_++]);
      v |= uint64_t(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
  }
  template <typename T>
  T fixed() {
    T v{};
    EXPECT_LE(pos_ + sizeof(T), bytes_.size());
    if (pos_ + sizeof(T) <= bytes_.size()) std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    EXPECT_LE(pos_ + n, bytes_.size()) << "length-delimited field runs past the message";
    std::string_view v = bytes_.substr(pos_, n);
    pos_ += n;
    return v;
  }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

Event decode_event(std::string_view data) {
  Event e;
  ProtoReader r(data);
  while (!r.done()) {
    const uint64_t key = r.varint();
    switch (key) {
      case (1 << 3) | 1: e.wall_time = r.fixed<double>(); break;
      case (2 << 3) | 0: e.step = int64_t(r.varint()); break;
      case (3 << 3) | 2: e.file_version = std::string(r.bytes()); break;
      case (5 << 3) | 2: {
        ProtoReader summary(r.bytes());
        while (!summary.done()) {
          EXPECT_EQ(summary.varint(), (1u << 3) | 2) << "Summary holds only values";
          ProtoReader value(summary.bytes());
          std::string tag;
          float v = 0;
          while (!value.done()) {
            const uint64_t k = value.varint();
            if (k == ((1 << 3) | 2)) tag = std::string(value.bytes());
            else if (k == ((2 << 3) | 5)) v = value.fixed<float>();
            else { ADD_FAILURE() << "unexpected Summary.Value key " << k; return e; }
          }
          e.scalars.emplace_back(tag, v);
        }
        break;
      }
      case (7 << 3) | 2: {
        ProtoReader log(r.bytes());
        EXPECT_EQ(log.varint(), (1u << 3) | 0);
        e.session_status = int(log.varint());
        EXPECT_TRUE(log.done());
        break;
      }
      default: ADD_FAILURE() << "unexpected Event key " << key; return e;
    }
  }
  return e;
}

// Every record of a TFRecord file, each CRC checked; a torn or corrupt record fails the test.
std::vector<Event> read_events(const std::string& path) {
  const std::vector<char> file = read_file(path);
  std::vector<Event> events;
  size_t pos = 0;
  while (pos < file.size()) {
    if (file.size() - pos < 12) { ADD_FAILURE() << path << ": torn header at " << pos; break; }
    uint64_t length;
    uint32_t length_crc;
    std::memcpy(&length, file.data() + pos, 8);
    std::memcpy(&length_crc, file.data() + pos + 8, 4);
    EXPECT_EQ(length_crc, masked_crc32c(std::span<const char>(file.data() + pos, 8)))
        << "length CRC of the record at " << pos;
    if (file.size() - pos - 12 < length + 4) { ADD_FAILURE() << "torn record at " << pos; break; }
    std::span<const char> data(file.data() + pos + 12, length);
    uint32_t data_crc;
    std::memcpy(&data_crc, file.data() + pos + 12 + length, 4);
    EXPECT_EQ(data_crc, masked_crc32c(data)) << "data CRC of the record at " << pos;
    events.push_back(decode_event(std::string_view(data.data(), data.size())));
    pos += 12 + length + 4;
  }
  return events;
}

std::span<const char> text(const char* s) { return {s, std::strlen(s)}; }

TEST(TensorBoard, Crc32cMatchesTheStandardCheckValues) {
  // The check value of the CRC catalogue (reveng's "CRC-32/ISCSI") and RFC 3720 B.4's vectors:
  // 32 zero bytes, 32 0xFF bytes, and 0..31 ascending.
  EXPECT_EQ(crc32c(text("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c(text("")), 0u);
  std::string zeros(32, '\0'), ones(32, '\xff'), ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = char(i);
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  // The mask, by its definition in TFRecord: rotate right 15, add 0xa282ead8.
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c(text("123456789")), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, RecordsDecodeBackToWhatWasWritten) {
  ScratchDir dir;
  std::string path;
  {
    train::TensorBoardWriter w(dir / "tb", /*resume_step=*/0);
    w.add_scalars(1, {{"loss/train", 3.25}, {"perf/mfu", 0.125}});
    // Values a float cannot hold: stored as the nearest float. Steps past 2^32 need a varint
    // of more than five bytes.
    w.add_scalars(int64_t(1) << 40, {{"optim/lr", 6e-4}, {"memory/peak_bytes", 123456789.0}});
    path = w.path();
  }
  EXPECT_NE(path.find("/tb/events.out.tfevents."), std::string::npos) << path;
  const std::vector<Event> events = read_events(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.7e9);  // seconds since 1970, after 2023
  EXPECT_EQ(events[1].step, 1);
  ASSERT_EQ(events[1].scalars.size(), 2u);
  EXPECT_EQ(events[1].scalars[0].first, "loss/train");
  EXPECT_EQ(events[1].scalars[0].second, 3.25f);
  EXPECT_EQ(events[1].scalars[1].second, 0.125f);
  EXPECT_EQ(events[2].step, int64_t(1) << 40);
  EXPECT_EQ(events[2].scalars[0].second, float(6e-4));
  EXPECT_EQ(events[2].scalars[1].second, float(123456789.0));
  EXPECT_GE(events[2].wall_time, events[1].wall_time);
}

TEST(TensorBoard, ACorruptByteFailsItsRecordsCrc) {
  // The reader above is what the other tests trust: it must see a flipped bit.
  const std::string r = train::tfrecord(train::scalars_event(1.7e9, 5, {{"loss/train", 1.0}}));
  for (size_t at : {size_t(3), size_t(20), r.size() - 2}) {
    std::string bad = r;
    bad[at] ^= 0x04;
    const bool length_ok = masked_crc32c(std::span<const char>(bad.data(), 8)) ==
                           *reinterpret_cast<const uint32_t*>(bad.data() + 8);
    const bool data_ok = masked_crc32c(std::span<const char>(bad.data() + 12, r.size() - 16)) ==
                         *reinterpret_cast<const uint32_t*>(bad.data() + r.size() - 4);
    EXPECT_FALSE(length_ok && data_ok) << "a flip at byte " << at << " passed both CRCs";
  }
}

TEST(TensorBoard, TrainWritesEveryStepsMetricsAndMarksTheResume) {
  ScratchDir dir;
  write_corpus_shards(dir);
  std::ostringstream quiet;
  TrainOptions o = tiny_options(dir, "run");
  o.tensorboard = dir / "run/tb";
  o.max_steps = 4;
  o.checkpoint_every = 2;
  Trainer(o).fit(&quiet);
  o.max_steps = 6;  // resumed from step 4: a second file starting with SessionLog START at 5
  Trainer(o).fit(&quiet);

  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(o.tensorboard))
    files.push_back(entry.path().string());
  ASSERT_EQ(files.size(), 2u);
  std::sort(files.begin(), files.end());
  std::vector<Event> first = read_events(files[0]), second = read_events(files[1]);
  ASSERT_EQ(first.size(), 1u + 4u);
  ASSERT_EQ(second.size(), 2u + 2u);
  EXPECT_FALSE(first[1].session_status);
  ASSERT_TRUE(second[1].session_status);
  EXPECT_EQ(*second[1].session_status, 1);  // START
  EXPECT_EQ(second[1].step, 5);  // the first step redone: TensorBoard drops 5.. of the first

  // Every scalar equals metrics.jsonl's value rounded to float, step by step.
  std::ifstream in(o.run_dir + "/metrics.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 6u);
  std::vector<Event> steps(first.begin() + 1, first.end());
  steps.insert(steps.end(), second.begin() + 2, second.end());
  const std::map<std::string, std::string> key_of = {
      {"loss/train", "loss"},        {"optim/lr", "lr"},
      {"optim/grad_norm", "grad_norm"}, {"perf/step_ms", "ms"},
      {"perf/tokens_per_s", "tokens_per_s"}, {"perf/mfu", "mfu"},
      {"memory/live_bytes", "live_bytes"}, {"memory/peak_bytes", "peak_bytes"},
      {"memory/rss_bytes", "rss_bytes"}, {"loss/val", "val_loss"}};
  int val_points = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].step, int64_t(i + 1));
    EXPECT_GE(steps[i].scalars.size(), 9u + 6u);  // 6 phases
    for (const auto& [tag, value] : steps[i].scalars) {
      if (tag.rfind("phase/", 0) == 0) {  // metrics.jsonl's "phases" object
        EXPECT_EQ(value, float(lines[i]["phases"][tag.substr(6)].get<double>())) << tag;
        continue;
      }
      ASSERT_TRUE(key_of.count(tag)) << "unexpected tag " << tag;
      EXPECT_EQ(value, float(lines[i][key_of.at(tag)].get<double>())) << tag << " step " << i + 1;
      val_points += tag == "loss/val";
    }
  }
  EXPECT_EQ(val_points, 2);  // eval_every 4 and the end: steps 4 and 6
}

}  // namespace
}  // namespace tessera::cli::testing
