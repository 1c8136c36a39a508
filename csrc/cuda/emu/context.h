// Fiber contexts of the SIMT emulator: stacks with a guard page, and the switch between a
// worker's scheduler and the fibers it runs. x86-64 switches with a few hand-written
// instructions (callee-saved registers, MXCSR and the x87 control word); elsewhere, or when
// asked (set_ucontext), through ucontext. Under AddressSanitizer every switch is announced
// (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber).
#pragma once

#include <cstddef>
#include <memory>

namespace gnnfuse::simt::detail {

struct Stack {
  void* mapping = nullptr;  // guard page + stack
  std::size_t mapping_bytes = 0;
  char* base = nullptr;     // lowest usable address, just above the guard page
  std::size_t bytes = 0;    // usable bytes

  Stack() = default;
  explicit Stack(std::size_t bytes);
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  Stack(Stack&& other) noexcept;
  Stack& operator=(Stack&& other) noexcept;
  ~Stack();
};

struct UContext;  // ucontext_t, kept out of this header

struct Context {
  void* sp = nullptr;                // the assembly switch: saved stack pointer
  std::unique_ptr<UContext> uc;      // the ucontext switch
  // AddressSanitizer: this context's stack and its fake stack while switched away.
  const void* stack_bottom = nullptr;
  std::size_t stack_bytes = 0;
  void* fake_stack = nullptr;

  Context();
  ~Context();
  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
};

// Prepares `ctx` to run entry(arg) on `stack` at the first switch to it. `entry` never returns:
// it ends with exit_to.
void make_context(Context& ctx, const Stack& stack, void (*entry)(void*), void* arg);
// Saves the running context in `from` and resumes `to`.
void switch_context(Context& from, Context& to);
// The first thing a new context does: completes the switch that started it (`from` learns its
// stack bounds under AddressSanitizer).
void context_started(Context& from);
// The last switch away from a context whose entry is done (its fake stack is released).
[[noreturn]] void exit_to(Context& from, Context& to);

// Whether new contexts use ucontext (always where there is no assembly switch).
bool use_ucontext();
void set_ucontext(bool on);

}  // namespace gnnfuse::simt::detail
