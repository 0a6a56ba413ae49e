#pragma once
// TensorBoard event files, written by hand: TFRecord framing around protobuf-encoded Event
// messages, which `tensorboard --logdir DIR` and its Python readers load.
//
//   record := uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)
//   data   := an Event proto: wall_time (1, double), step (2, int64), then one of
//             file_version (3, string), summary (5, Summary), session_log (7, SessionLog)
//   Summary.value (1, repeated): tag (1, string), simple_value (2, float)
//
// No protobuf or crc32c library is used: the writer needs five fields of three messages and one
// CRC, about 150 lines, while the .proto files of TensorFlow are not packaged for Debian and a
// generated encoder would bring protoc and libprotobuf into every build for that. The files
// are append-only like metrics.jsonl: each record is written whole and flushed, so a crash
// loses at most the record being written, and the reader stops at a torn last record.

#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tessera::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord frames records with; the
// standard check value is crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::span<const char> bytes);
// TFRecord's masked form: rotated right by 15 bits plus 0xa282ead8, so that a CRC stored in
// the data it covers does not check itself.
uint32_t masked_crc32c(std::span<const char> bytes);

// One TFRecord around `data`.
std::string tfrecord(const std::string& data);

// Event protos, serialised.
std::string file_version_event(double wall_time);  // "brain.Event:2", every file's first record
std::string scalars_event(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, double>>& scalars);
// SessionLog START at `step`: TensorBoard drops the points at and after `step` that earlier
// files of the directory hold, which a resumed run is about to redo (as metrics.jsonl is
// truncated).
std::string session_start_event(double wall_time, int64_t step);

// An event file in `dir` (created if missing), named as TensorBoard expects:
// events.out.tfevents.<seconds>.<host>.<pid>.<n>.tessera (n counts the
// writers of this process). Each add_* writes one record and flushes.
class TensorBoardWriter {
 public:
  // resume_step > 0: the run continues after that step (a SessionLog START at resume_step + 1
  // follows the file version). Throws naming the path when the file cannot be created.
  TensorBoardWriter(const std::string& dir, int64_t resume_step);
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::string path_;
  std::ofstream out_;
};

// Seconds since the Unix epoch, as Event.wall_time holds them.
double unix_seconds();

}  // namespace tessera::train
