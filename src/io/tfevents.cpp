#include "io/tfevents.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>

#include "util/error.h"

namespace rlcpp {

namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

// Protocol-buffer wire format: varints, tags, fixed-width and length-delimited fields.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, int field, int wire_type) { put_varint(out, static_cast<uint64_t>(field) << 3 | wire_type); }
template <typename T>
void put_fixed(std::string& out, int field, T value) {
  put_tag(out, field, sizeof(T) == 8 ? 1 : 5);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(std::string_view bytes, uint32_t crc) {
  static const auto table = make_crc_table();
  crc = ~crc;
  for (unsigned char b : bytes) crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

EventWriter::EventWriter(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  path_ = dir / fmt::format("events.out.tfevents.{}.{}.{}", static_cast<int64_t>(now_seconds()), host, ::getpid());
  file_ = std::fopen(path_.c_str(), "ab");
  if (file_ == nullptr) throw_user_error("cannot create the TensorBoard event file {}: {}", path_.string(), std::strerror(errno));
  std::string version;
  put_bytes(version, 3, "brain.Event:2");  // Event.file_version
  write_event(0, version);
  flush();
}

EventWriter::~EventWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventWriter::write_event(int64_t step, const std::string& payload) {
  std::string event;
  put_fixed<double>(event, 1, now_seconds());  // Event.wall_time
  put_tag(event, 2, 0);                        // Event.step
  put_varint(event, static_cast<uint64_t>(step));
  event += payload;
  std::string record(8, '\0');
  const uint64_t length = event.size();
  std::memcpy(record.data(), &length, 8);
  const uint32_t length_crc = masked_crc32c(std::string_view(record.data(), 8));
  record.append(reinterpret_cast<const char*>(&length_crc), 4);
  record += event;
  const uint32_t data_crc = masked_crc32c(event);
  record.append(reinterpret_cast<const char*>(&data_crc), 4);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    throw_user_error("cannot write the TensorBoard event file {}: {}", path_.string(), std::strerror(errno));
  }
}

void EventWriter::add_scalars(const std::vector<std::pair<std::string, double>>& values, int64_t step) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string summary_value;
    put_bytes(summary_value, 1, tag);                               // Summary.Value.tag
    put_fixed<float>(summary_value, 2, static_cast<float>(value));  // Summary.Value.simple_value
    put_bytes(summary, 1, summary_value);                           // Summary.value (repeated)
  }
  std::string payload;
  put_bytes(payload, 5, summary);                                    // Event.summary
  write_event(step, payload);
}

void EventWriter::restart_at(int64_t step) {
  std::string session_log;
  put_tag(session_log, 1, 0);  // SessionLog.status = START
  put_varint(session_log, 1);
  std::string payload;
  put_bytes(payload, 6, session_log);  // Event.session_log
  write_event(step, payload);
}

void EventWriter::flush() { std::fflush(file_); }

}  // namespace rlcpp
