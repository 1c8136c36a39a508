// Fiber contexts of the SIMT emulator (context.h).
#include "cuda/emu/context.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define GNNFUSE_SIMT_ASAN 1
#endif

#if defined(__x86_64__) && !defined(GNNFUSE_SIMT_FORCE_UCONTEXT)
#define GNNFUSE_SIMT_ASM_SWITCH 1
// gnnfuse_simt_switch(save, sp): pushes the callee-saved registers, MXCSR and the x87 control
// word of the running context on its stack, stores its stack pointer in *save, and pops the
// same from `sp`, returning into the context saved there. gnnfuse_simt_start is where a new
// context first returns to: it calls r12(r13) (entry(arg), which never returns).
asm(R"(
  .text
  .p2align 4
  .globl gnnfuse_simt_switch
  .hidden gnnfuse_simt_switch
  .type gnnfuse_simt_switch, @function
gnnfuse_simt_switch:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size gnnfuse_simt_switch, .-gnnfuse_simt_switch

  .p2align 4
  .globl gnnfuse_simt_start
  .hidden gnnfuse_simt_start
  .type gnnfuse_simt_start, @function
gnnfuse_simt_start:
  .cfi_startproc
  .cfi_undefined rip
  movq %r13, %rdi
  callq *%r12
  ud2
  .cfi_endproc
  .size gnnfuse_simt_start, .-gnnfuse_simt_start
)");
extern "C" void gnnfuse_simt_switch(void** save, void* sp);
extern "C" void gnnfuse_simt_start();
#endif

namespace gnnfuse::simt::detail {

// ---------------------------------------------------------------- stacks
namespace {
std::size_t page_bytes() {
  static const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
  return page;
}
}  // namespace

Stack::Stack(std::size_t want) {
  const std::size_t page = page_bytes();
  bytes = (want + page - 1) / page * page;
  mapping_bytes = bytes + page;
  mapping = mmap(nullptr, mapping_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (mapping == MAP_FAILED) {
    mapping = nullptr;
    throw std::runtime_error("simt: cannot map a fiber stack of " + std::to_string(bytes) +
                             " bytes: " + std::strerror(errno));
  }
  // The guard page: running off the bottom of the stack faults here instead of writing into
  // the neighbouring stack.
  if (mprotect(mapping, page, PROT_NONE) != 0) {
    munmap(mapping, mapping_bytes);
    mapping = nullptr;
    throw std::runtime_error(std::string("simt: cannot protect a fiber stack's guard page: ") +
                             std::strerror(errno));
  }
  base = static_cast<char*>(mapping) + page;
}

Stack::Stack(Stack&& other) noexcept { *this = std::move(other); }

Stack& Stack::operator=(Stack&& other) noexcept {
  if (this != &other) {
    if (mapping) munmap(mapping, mapping_bytes);
    mapping = std::exchange(other.mapping, nullptr);
    mapping_bytes = std::exchange(other.mapping_bytes, 0);
    base = std::exchange(other.base, nullptr);
    bytes = std::exchange(other.bytes, 0);
  }
  return *this;
}

Stack::~Stack() {
  if (mapping) munmap(mapping, mapping_bytes);
}

// ---------------------------------------------------------------- contexts
struct UContext {
  ucontext_t uc;
  void (*entry)(void*) = nullptr;
  void* arg = nullptr;
};

Context::Context() = default;
Context::~Context() = default;
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;

namespace {
#if defined(GNNFUSE_SIMT_ASM_SWITCH)
std::atomic<bool> g_ucontext{false};
#else
std::atomic<bool> g_ucontext{true};
#endif

// makecontext passes int arguments: the UContext's address in two halves.
void ucontext_start(unsigned hi, unsigned lo) {
  auto* u = reinterpret_cast<UContext*>((std::uintptr_t(hi) << 32) | std::uintptr_t(lo));
  u->entry(u->arg);
}

// The switching functions keep nothing on the stack that AddressSanitizer would guard with
// redzones: a fiber's last switch never returns, and the poison of its frames would outlive it
// on the reused stack.
#if defined(GNNFUSE_SIMT_ASAN)
#define GNNFUSE_SIMT_NO_ASAN __attribute__((no_sanitize_address))
#else
#define GNNFUSE_SIMT_NO_ASAN
#endif

GNNFUSE_SIMT_NO_ASAN void raw_switch(Context& from, Context& to) {
#if defined(GNNFUSE_SIMT_ASM_SWITCH)
  if (!g_ucontext.load(std::memory_order_relaxed)) {
    gnnfuse_simt_switch(&from.sp, to.sp);
    return;
  }
#endif
  swapcontext(&from.uc->uc, &to.uc->uc);
}
}  // namespace

bool use_ucontext() { return g_ucontext.load(); }

void set_ucontext(bool on) {
#if defined(GNNFUSE_SIMT_ASM_SWITCH)
  g_ucontext.store(on);
#else
  (void)on;  // the only switch there is
#endif
}

void make_context(Context& ctx, const Stack& stack, void (*entry)(void*), void* arg) {
  ctx.stack_bottom = stack.base;
  ctx.stack_bytes = stack.bytes;
  ctx.fake_stack = nullptr;
  char* top = stack.base + stack.bytes;  // page aligned, so 16-byte aligned
#if defined(GNNFUSE_SIMT_ASAN)
  // The reused stack's frames start clean (a fiber abandoned mid-call would leave poison).
  const std::size_t clean = std::min<std::size_t>(stack.bytes, 16 * 1024);
  __asan_unpoison_memory_region(top - clean, clean);
#endif
#if defined(GNNFUSE_SIMT_ASM_SWITCH)
  if (!g_ucontext.load(std::memory_order_relaxed)) {
    // The frame gnnfuse_simt_switch pops: MXCSR and x87 control word (the creating thread's),
    // r15, r14, r13 = arg, r12 = entry, rbx, rbp = 0, return address = gnnfuse_simt_start.
    auto* frame = reinterpret_cast<std::uint64_t*>(top - 64);
    std::uint32_t mxcsr;
    std::uint16_t fpucw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpucw));
    frame[0] = std::uint64_t(mxcsr) | (std::uint64_t(fpucw) << 32);
    frame[1] = 0;
    frame[2] = 0;
    frame[3] = reinterpret_cast<std::uint64_t>(arg);
    frame[4] = reinterpret_cast<std::uint64_t>(entry);
    frame[5] = 0;
    frame[6] = 0;
    frame[7] = reinterpret_cast<std::uint64_t>(&gnnfuse_simt_start);
    ctx.sp = frame;
    return;
  }
#endif
  if (!ctx.uc) ctx.uc = std::make_unique<UContext>();
  UContext& u = *ctx.uc;
  if (getcontext(&u.uc) != 0) throw std::runtime_error("simt: getcontext failed");
  u.uc.uc_stack.ss_sp = stack.base;
  u.uc.uc_stack.ss_size = stack.bytes;
  u.uc.uc_link = nullptr;
  u.entry = entry;
  u.arg = arg;
  const auto address = reinterpret_cast<std::uintptr_t>(&u);
  makecontext(&u.uc, reinterpret_cast<void (*)()>(&ucontext_start), 2, unsigned(address >> 32),
              unsigned(address & 0xffffffffu));
  (void)top;
}

GNNFUSE_SIMT_NO_ASAN void switch_context(Context& from, Context& to) {
  if (use_ucontext() && !from.uc) from.uc = std::make_unique<UContext>();
#if defined(GNNFUSE_SIMT_ASAN)
  __sanitizer_start_switch_fiber(&from.fake_stack, to.stack_bottom, to.stack_bytes);
#endif
  raw_switch(from, to);
#if defined(GNNFUSE_SIMT_ASAN)
  __sanitizer_finish_switch_fiber(from.fake_stack, nullptr, nullptr);
#endif
}

void context_started(Context& from) {
#if defined(GNNFUSE_SIMT_ASAN)
  // `from` (the scheduler, on its OS thread's stack) learns its bounds for the switches back.
  __sanitizer_finish_switch_fiber(nullptr, &from.stack_bottom, &from.stack_bytes);
#else
  (void)from;
#endif
}

GNNFUSE_SIMT_NO_ASAN void exit_to(Context& from, Context& to) {
#if defined(GNNFUSE_SIMT_ASAN)
  __sanitizer_start_switch_fiber(nullptr, to.stack_bottom, to.stack_bytes);
#endif
  raw_switch(from, to);
  __builtin_unreachable();
}

}  // namespace gnnfuse::simt::detail
