// A small mutation-fuzzing driver for the libFuzzer entry points in this folder, used when the
// harnesses are not linked with -fsanitize=fuzzer (no clang on the CI machine): it mutates a
// seed corpus (byte flips, dictionary tokens, deletions, line splices between seeds) for a
// bounded time and feeds LLVMFuzzerTestOneInput. A crash, an abort or an unexpected exception
// escaping the harness is a finding; a signal handler writes the input being run to
// fuzz-crash-input before the process dies.
//
//   <harness> <seconds> [seed files...]
#pragma once

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace gnnfuse::fuzz {

inline const std::string* current_input = nullptr;

// Async-signal-safe: open/write/close, then the default action of the signal.
inline void write_crash_input(int sig) {
  if (current_input != nullptr) {
    const int fd = ::open("fuzz-crash-input", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ssize_t ignored = ::write(fd, current_input->data(), current_input->size());
      (void)ignored;
      ::close(fd);
    }
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

inline std::string mutate(const std::vector<std::string>& corpus, const std::vector<std::string>& dict, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % (n ? n : 1)); };
  std::string s = corpus[pick(corpus.size())];
  const int rounds = 1 + static_cast<int>(rng() % 6);
  for (int r = 0; r < rounds; ++r) {
    switch (rng() % 6) {
      case 0:  // flip a byte
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng() & 0xff);
        break;
      case 1:  // insert a token
        s.insert(pick(s.size() + 1), dict[pick(dict.size())]);
        break;
      case 2: {  // delete a range
        if (s.empty()) break;
        size_t a = pick(s.size()), len = 1 + pick(16);
        s.erase(a, len);
        break;
      }
      case 3: {  // splice a line of another seed
        const std::string& o = corpus[pick(corpus.size())];
        size_t a = o.empty() ? 0 : pick(o.size()), b = o.find('\n', a);
        s.insert(pick(s.size() + 1), o.substr(a, b == std::string::npos ? std::string::npos : b - a + 1));
        break;
      }
      case 4: {  // duplicate a range
        if (s.empty()) break;
        size_t a = pick(s.size()), len = 1 + pick(32);
        s.insert(pick(s.size() + 1), s.substr(a, len));
        break;
      }
      default:  // replace a token
        if (!s.empty()) {
          size_t a = pick(s.size());
          s.replace(a, 1 + pick(4), dict[pick(dict.size())]);
        }
    }
  }
  return s;
}

inline int run(int argc, char** argv, std::vector<std::string> corpus, const std::vector<std::string>& dict) {
  const double seconds = argc > 1 ? std::stod(argv[1]) : 10.0;
  for (int i = 2; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    corpus.push_back(ss.str());
  }
  if (corpus.empty()) corpus.push_back("");
  std::mt19937_64 rng(12345);
  const auto start = std::chrono::steady_clock::now();
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, write_crash_input);
  long n = 0;
  auto feed = [&](const std::string& s) {
    current_input = &s;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    current_input = nullptr;
    ++n;
  };
  for (const std::string& s : corpus) feed(s);
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) feed(mutate(corpus, dict, rng));
  std::printf("%s: %ld inputs in %.0f s, no findings\n", argv[0], n, seconds);
  return 0;
}

}  // namespace gnnfuse::fuzz
