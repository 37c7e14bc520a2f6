// Helpers shared by the tests: fixture discovery, temporary directories, error-message matching.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace rlcpp::testing {

namespace fs = std::filesystem;

// $RLCPP_FIXTURES, else the repository's tests/fixtures (set at configure time).
inline fs::path fixtures_root() {
  if (const char* env = std::getenv("RLCPP_FIXTURES"); env != nullptr && *env != '\0') return env;
  return RLCPP_DEFAULT_FIXTURES;
}

// Every fixture folder (one holding config.json and reference.safetensors), sorted. None found throws,
// naming where it looked, so the calling test fails with that message (gtest reports the exception)
// rather than running on an empty list.
inline std::vector<fs::path> fixture_dirs() {
  const fs::path root = fixtures_root();
  std::vector<fs::path> dirs;
  if (fs::is_directory(root)) {
    for (const auto& entry : fs::directory_iterator(root)) {
      if (fs::exists(entry.path() / "config.json") && fs::exists(entry.path() / "reference.safetensors")) {
        dirs.push_back(entry.path());
      }
    }
  }
  if (dirs.empty()) {
    throw std::runtime_error("no test fixtures (folders with config.json and reference.safetensors) under '" +
                             root.string() + "' ($RLCPP_FIXTURES, else the repository's tests/fixtures); " +
                             "`make fixtures` writes them");
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

inline fs::path fixture(const std::string& name) { return fixtures_root() / name; }

// A fresh directory under the system temp dir, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "rlcpp-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

}  // namespace rlcpp::testing

// Expects `statement` to throw E whose message contains every one of the given substrings.
#define EXPECT_THROW_MSG(statement, E, ...)                                                  \
  do {                                                                                       \
    try {                                                                                    \
      statement;                                                                             \
      ADD_FAILURE() << "expected " #E " from: " #statement;                                  \
    } catch (const E& e) {                                                                   \
      for (const std::string& part : std::vector<std::string>{__VA_ARGS__}) {                \
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos)                       \
            << "message \"" << e.what() << "\" lacks \"" << part << "\"";                    \
      }                                                                                      \
    }                                                                                        \
  } while (0)
