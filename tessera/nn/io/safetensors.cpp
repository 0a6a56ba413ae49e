#include "tessera/nn/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "tessera/nn/io/detail/checksum.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/io/detail/posix_file.h"

namespace tessera::nn {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is copied into tensors as is");

namespace {

// ordered_json keeps the header's order, so tensors come back in the order they were written.
using Json = nlohmann::ordered_json;

struct NamedDType {
  const char* name;
  DType dtype;
};
constexpr NamedDType kSupportedDTypes[] = {{"F64", DType::f64}, {"F32", DType::f32},
                                           {"F16", DType::f16}, {"BF16", DType::bf16},
                                           {"I64", DType::i64}, {"I32", DType::i32}};
// Valid safetensors dtypes that Tessera has no tensor type for.
constexpr const char* kUnsupportedDTypes[] = {"BOOL",    "U8",      "I8",      "U16",     "I16",
                                              "U32",     "U64",     "F8_E4M3", "F8_E5M2", "F8_E8M0",
                                              "F6_E2M3", "F6_E3M2", "F4",      "C64"};

// Text from the file for an error message, cut short so a hostile header cannot flood the log.
std::string shown(const std::string& s, size_t limit = 120) {
  return s.size() > limit ? s.substr(0, limit - 3) + "..." : s;
}
std::string brief(const Json& v) {
  return shown(v.dump(-1, ' ', false, Json::error_handler_t::replace), 80);
}

DType parse_dtype(const Json& v, const std::string& where) {
  TESSERA_CHECK(v.is_string(), where, ": field 'dtype' must be a string, got ", brief(v));
  const std::string name = v.get<std::string>();
  for (const auto& d : kSupportedDTypes)
    if (name == d.name) return d.dtype;
  for (const char* u : kUnsupportedDTypes)
    TESSERA_CHECK(name != u, where, ": unsupported dtype '", name,
                  "' (Tessera reads F64, F32, F16, BF16, I64 and I32)");
  detail::throw_error(where, ": unknown dtype '", name, "'");
}

// Parses the header text, rejecting duplicate keys (nlohmann would silently keep one) and
// nesting deeper than a header has (root, tensor entry, shape array).
Json parse_json(const char* text, uint64_t n, const std::string& where) {
  std::vector<std::set<std::string>> open;  // keys seen, per open object or array
  auto callback = [&](int, nlohmann::json::parse_event_t event, Json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start || event == E::array_start) {
      TESSERA_CHECK(open.size() < 3, where,
                    ": the header nests deeper than a safetensors header can (3 levels)");
      open.emplace_back();
    } else if (event == E::object_end || event == E::array_end) {
      open.pop_back();
    } else if (event == E::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      TESSERA_CHECK(open.back().insert(key).second, where, ": duplicate key '", shown(key), "'",
                    open.size() == 1 ? " (two tensors with the same name)" : "");
    }
    return true;
  };
  try {
    return Json::parse(text, text + n, callback);
  } catch (const nlohmann::json::parse_error& e) {
    detail::throw_error(where, ": the header is not valid JSON (near file offset ",
                        8 + (e.byte > 0 ? e.byte - 1 : 0), "): ", shown(e.what(), 300));
  } catch (const nlohmann::json::exception& e) {
    // A number too large for a double (out_of_range 406): the same finding as in checkpoints.
    detail::throw_error(where, ": the header is not valid JSON: ", shown(e.what(), 300));
  }
}

uint64_t unsigned_field(const Json& v, const std::string& where, const std::string& field) {
  TESSERA_CHECK(v.is_number_unsigned(), where, ": ", field, " must be a non-negative integer, got ",
                brief(v));
  return v.get<uint64_t>();
}

SafetensorsEntry parse_entry(const std::string& name, const Json& v, uint64_t data_size,
                             const std::string& file) {
  const std::string where = file + ": tensor '" + shown(name) + "'";
  TESSERA_CHECK(v.is_object(), where,
                ": expected an object with dtype, shape and data_offsets, got ", brief(v));
  auto field = [&](const char* key) -> const Json& {
    auto it = v.find(key);
    TESSERA_CHECK(it != v.end(), where, ": missing field '", key, "'");
    return *it;
  };
  SafetensorsEntry e;
  e.name = name;
  e.dtype = parse_dtype(field("dtype"), where);

  const Json& shape = field("shape");
  TESSERA_CHECK(shape.is_array(), where, ": field 'shape' must be an array, got ", brief(shape));
  TESSERA_CHECK(shape.size() <= size_t(Shape::kMaxDims), where, ": shape ", brief(shape), " has ",
                shape.size(), " dimensions; Tessera tensors have at most ", Shape::kMaxDims);
  constexpr uint64_t kMax = uint64_t(std::numeric_limits<int64_t>::max());
  uint64_t numel = 1;
  // The strides multiply the dimensions with 0 counted as 1, so an empty tensor's other
  // dimensions must fit too ([0, 2^62, 4] overflowed them; found with fuzz/safetensors).
  uint64_t extent = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    uint64_t dim = unsigned_field(shape[i], where, "shape[" + std::to_string(i) + "]");
    TESSERA_CHECK(!__builtin_mul_overflow(numel, dim, &numel) && numel <= kMax, where, ": shape ",
                  brief(shape), " has more elements than fit in 63 bits");
    TESSERA_CHECK(
        !__builtin_mul_overflow(extent, std::max<uint64_t>(dim, 1), &extent) && extent <= kMax,
        where, ": shape ", brief(shape),
        " is empty, but its other dimensions multiply past 63 bits, which a tensor's "
        "strides cannot hold");
    e.shape.push_back(int64_t(dim));
  }
  uint64_t nbytes = 0;
  TESSERA_CHECK(!__builtin_mul_overflow(numel, uint64_t(dtype_size(e.dtype)), &nbytes), where,
                ": shape ", brief(shape), " is too large in bytes");

  const Json& offsets = field("data_offsets");
  TESSERA_CHECK(offsets.is_array() && offsets.size() == 2, where,
                ": field 'data_offsets' must be [begin, end], got ", brief(offsets));
  e.begin = unsigned_field(offsets[0], where, "data_offsets[0]");
  e.end = unsigned_field(offsets[1], where, "data_offsets[1]");
  TESSERA_CHECK(e.begin <= e.end, where, ": data_offsets [", e.begin, ", ", e.end,
                "] end before they begin");
  TESSERA_CHECK(e.end <= data_size, where, ": data_offsets [", e.begin, ", ", e.end,
                "] run past the end of the data region (", data_size,
                " bytes); the file is truncated or the header is wrong");
  TESSERA_CHECK(e.end - e.begin == nbytes, where, ": dtype ", safetensors_dtype_name(e.dtype),
                " and shape ", e.shape, " need ", nbytes, " bytes, but data_offsets [", e.begin,
                ", ", e.end, "] span ", e.end - e.begin);
  return e;
}

// The tensors must tile the data region: sorted by offset, each begins where the last ended.
void check_coverage(const std::vector<SafetensorsEntry>& entries, uint64_t data_size,
                    uint64_t data_start, const std::string& file) {
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(entries[a].begin, entries[a].end) <
           std::pair(entries[b].begin, entries[b].end);
  });
  uint64_t cursor = 0;
  const SafetensorsEntry* prev = nullptr;
  for (size_t i : order) {
    const SafetensorsEntry& e = entries[i];
    TESSERA_CHECK(e.begin >= cursor, file, ": tensors '", shown(prev ? prev->name : ""), "' [",
                  prev ? prev->begin : 0, ", ", cursor, ") and '", shown(e.name), "' [", e.begin,
                  ", ", e.end, ") overlap");
    TESSERA_CHECK(e.begin == cursor, file, ": data bytes [", cursor, ", ", e.begin,
                  ") (file offset ", data_start + cursor, ") belong to no tensor");
    cursor = e.end;
    prev = &e;
  }
  TESSERA_CHECK(cursor == data_size, file, ": ", data_size - cursor,
                " trailing bytes after the last tensor (file offset ", data_start + cursor,
                ") belong to no tensor");
}

SafetensorsMetadata parse_metadata(const Json& v, const std::string& file) {
  TESSERA_CHECK(v.is_object(), file, ": '__metadata__' must be an object of strings, got ",
                brief(v));
  SafetensorsMetadata out;
  for (const auto& [key, value] : v.items()) {
    TESSERA_CHECK(value.is_string(), file, ": __metadata__ '", shown(key),
                  "' must be a string, got ", brief(value));
    out.emplace_back(key, value.get<std::string>());
  }
  return out;
}

// Validates the length field (bytes 0-7) and returns it.
uint64_t header_length(const char* bytes, uint64_t nbytes, uint64_t file_size,
                       const std::string& file) {
  TESSERA_CHECK(file_size >= 8 && nbytes >= 8, file, ": the file has ", file_size,
                " bytes, fewer than the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, bytes, 8);
  TESSERA_CHECK(n <= kSafetensorsMaxHeaderBytes, file, ": header length ", n,
                " (file offset 0) exceeds the limit of ", kSafetensorsMaxHeaderBytes, " bytes");
  TESSERA_CHECK(n <= file_size - 8, file, ": header length ", n,
                " (file offset 0) runs past the end of the file (", file_size,
                " bytes); the file is truncated or not safetensors");
  return n;
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  for (const auto& d : kSupportedDTypes)
    if (d.dtype == dtype) return d.name;
  detail::throw_error("safetensors: no name for dtype ", dtype_name(dtype));
}

SafetensorsHeader parse_safetensors_header(const char* bytes, uint64_t nbytes, uint64_t file_size,
                                           const std::string& source) {
  const std::string file = "safetensors " + source;
  const uint64_t n = header_length(bytes, nbytes, file_size, file);
  TESSERA_CHECK(nbytes >= 8 + n, file, ": only ", nbytes, " of the ", 8 + n,
                " header bytes were given");
  TESSERA_CHECK(n > 0 && bytes[8] == '{', file,
                ": the header (file offset 8) must be a JSON object starting with '{'");
  Json root = parse_json(bytes + 8, n, file);

  SafetensorsHeader header;
  header.data_start = 8 + n;
  const uint64_t data_size = file_size - header.data_start;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__")
      header.metadata = parse_metadata(value, file);
    else
      header.entries.push_back(parse_entry(key, value, data_size, file));
  }
  check_coverage(header.entries, data_size, header.data_start, file);
  return header;
}

namespace {

SafetensorsHeader read_header(const PosixFile& f) {
  const uint64_t size = f.size();
  const uint64_t have = std::min<uint64_t>(size, 8);
  char length[8] = {};
  f.read_at(0, length, have);
  const uint64_t n = header_length(length, have, size, "safetensors " + f.path());
  std::vector<char> bytes(8 + n);
  f.read_at(0, bytes.data(), bytes.size());
  return parse_safetensors_header(bytes.data(), bytes.size(), size, f.path());
}

}  // namespace

SafetensorsHeader read_safetensors_header(const std::string& path) {
  return read_header(PosixFile(path));
}

SafetensorsFile read_safetensors(const std::string& path, const StateDict* into) {
  PosixFile f(path);
  SafetensorsHeader header = read_header(f);
  SafetensorsFile out;
  out.metadata = std::move(header.metadata);
  std::map<std::string, Tensor> targets;
  if (into != nullptr)
    for (const auto& [name, t] : *into)
      if (t.defined() && t.device().is_cpu() && t.is_contiguous()) targets.emplace(name, t);
  for (const SafetensorsEntry& e : header.entries) {
    auto target = targets.find(e.name);
    const bool direct = target != targets.end() && target->second.shape() == e.shape &&
                        target->second.dtype() == e.dtype;
    Tensor t = direct ? target->second : empty(e.shape, e.dtype);
    if (e.end > e.begin) f.read_at(header.data_start + e.begin, t.data_ptr(), e.end - e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

void write_safetensors(const std::string& path, const StateDict& tensors,
                       const SafetensorsMetadata& metadata,
                       const std::function<void()>& on_data_written, uint64_t* checksum,
                       const ChunkedReads* chunked) {
  const std::string where = "write_safetensors " + path;
  const size_t chunk = chunked != nullptr ? chunked->buffer.nbytes() : 0;
  TESSERA_CHECK(chunked == nullptr || (chunk > 0 && chunked->buffer.device().is_cpu() &&
                                       chunked->buffer.is_contiguous() && chunked->read),
                where, ": chunked reads need a contiguous host buffer and a read function");
  std::set<std::string> names;
  // What each tensor's bytes are written from: the host (a copy when not already there), or
  // the device in chunks (a view of the caller's tensor).
  std::vector<Tensor> host;
  for (const auto& [name, t] : tensors) {
    TESSERA_CHECK(name != "__metadata__", where, ": '__metadata__' is reserved, not a tensor name");
    TESSERA_CHECK(names.insert(name).second, where, ": tensor '", name, "' appears twice");
    TESSERA_CHECK(t.defined(), where, ": tensor '", name, "' is undefined");
    host.push_back(chunked != nullptr && !t.device().is_cpu() && t.is_contiguous()
                       ? t
                       : ops::contiguous(ops::to(t, Device::cpu())));
  }

  // Widest elements first: with an 8-aligned data region, every offset is then a multiple of
  // its tensor's element size.
  std::vector<size_t> order(host.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return host[a].itemsize() > host[b].itemsize(); });
  std::vector<uint64_t> begin(host.size());
  uint64_t cursor = 0;
  for (size_t i : order) {
    begin[i] = cursor;
    cursor += host[i].nbytes();
  }

  Json header = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [key, value] : metadata) {
      TESSERA_CHECK(!m.contains(key), where, ": metadata key '", key, "' appears twice");
      m[key] = value;
    }
    header["__metadata__"] = std::move(m);
  }
  for (size_t i = 0; i < host.size(); ++i) {
    Json entry = Json::object();
    entry["dtype"] = safetensors_dtype_name(host[i].dtype());
    entry["shape"] = Json::array();
    for (int64_t d : host[i].shape()) entry["shape"].push_back(d);
    entry["data_offsets"] = Json::array({begin[i], begin[i] + host[i].nbytes()});
    header[tensors[i].first] = std::move(entry);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::type_error& e) {
    detail::throw_error(where, ": tensor names and metadata must be valid UTF-8: ", e.what());
  }
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');

  AtomicFile out(path);
  Checksum sum;
  auto emit = [&](const void* data, size_t nbytes) {
    out.write(data, nbytes);
    if (checksum != nullptr) sum.update(data, nbytes);
  };
  const uint64_t n = text.size();
  emit(&n, sizeof n);
  emit(text.data(), text.size());
  for (size_t i : order) {
    const Tensor& t = host[i];
    if (t.device().is_cpu()) {
      if (t.nbytes() > 0) emit(t.data_ptr(), t.nbytes());
      continue;
    }
    void* buffer = chunked->buffer.data_ptr();
    for (size_t at = 0; at < t.nbytes(); at += chunk) {
      const size_t len = std::min(chunk, t.nbytes() - at);
      chunked->read(buffer, t, at, len);
      emit(buffer, len);
    }
  }
  host.clear();
  if (checksum != nullptr) *checksum = sum.digest();
  if (on_data_written) on_data_written();
  out.commit();
}

}  // namespace tessera::nn
