// The three kinds of failure (docs/contributing.md, how the code reads): a broken invariant is an InternalError raised by
// RLCPP_CHECK with the values that broke it; bad user input is a UserError whose message names the
// file, line or flag and how to fix it. Expected outcomes are values, never exceptions.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace rlcpp {

// Bad input from a user: a file, a flag, a config field. The message says what and how to fix it.
class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A broken internal invariant: a bug in rlcpp, not in the user's input.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

template <typename... Args>
[[noreturn]] void throw_user_error(fmt::format_string<Args...> format, Args&&... args) {
  throw UserError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace rlcpp

// RLCPP_CHECK(cond, "fmt", args...): an invariant; the message should print the shapes or values.
#define RLCPP_CHECK(cond, ...)                                                                   \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      throw ::rlcpp::InternalError(fmt::format("{}:{}: check `{}` failed: {}", __FILE__, __LINE__, \
                                               #cond, fmt::format(__VA_ARGS__)));                \
    }                                                                                            \
  } while (0)
