// TensorBoard event files, written natively: TFRecord framing (length, masked CRC32C of the
// length, the record, masked CRC32C of the record) around `Event` protocol buffers holding scalar
// `Summary` values — the subset of the format TensorBoard's scalar dashboard reads.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rlcpp {

// CRC-32C (Castagnoli), and TFRecord's masked form of it.
uint32_t crc32c(std::string_view bytes, uint32_t crc = 0);
uint32_t masked_crc32c(std::string_view bytes);

class EventWriter {
 public:
  // Creates dir/events.out.tfevents.<seconds>.<host>.<pid> and writes the file-version event.
  explicit EventWriter(const std::filesystem::path& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One event holding every (tag, value) of `step`.
  void add_scalars(const std::vector<std::pair<std::string, double>>& values, int64_t step);
  // A resumed run: TensorBoard drops the events of earlier files from `step` on (SessionLog START).
  void restart_at(int64_t step);
  void flush();
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_event(int64_t step, const std::string& payload);  // payload: the Event's other fields
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace rlcpp
