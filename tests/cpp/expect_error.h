// The errors of the ops under test: a c10::Error whose message holds given parts.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

namespace gnnfuse::testing {

// The c10::Error message of f() (without the backtrace), or "" when f() does not throw.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

// f() raises a c10::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  const std::string msg = error_of(f);
  ASSERT_FALSE(msg.empty()) << "no error raised";
  for (const std::string& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
}

}  // namespace gnnfuse::testing
