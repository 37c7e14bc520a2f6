// File helpers: whole-file reads with errors that name the path, and atomic writes (temp + rename)
// so a crash never leaves a half-written file behind.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace rlcpp {

namespace fs = std::filesystem;

// Reads a whole file; a missing or unreadable file is a UserError naming `what` and the path.
std::string read_file(const fs::path& path, std::string_view what = "file");

// Writes `bytes` to `path.tmp-<pid>`, fsyncs it, then renames it over `path`.
void write_file_atomic(const fs::path& path, std::string_view bytes);

// Total size in bytes of the regular files under `dir` whose names end in `suffix`.
std::uint64_t bytes_on_disk(const fs::path& dir, std::string_view suffix = "");

}  // namespace rlcpp
