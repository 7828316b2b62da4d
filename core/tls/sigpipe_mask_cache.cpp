// Keeps SIGPIPE blocked on the threads that run CAF's TLS sessions instead
// of blocking and unblocking it around every SSL_read and SSL_write.
//
// Why: CAF 0.17's OpenSSL session (libcaf_openssl, session.cpp) wraps every
// OpenSSL call in CAF_BLOCK_SIGPIPE: pthread_sigmask(SIG_BLOCK, {SIGPIPE}),
// the call, then sigtimedwait({SIGPIPE}, zero timeout) to consume a SIGPIPE
// the call raised and pthread_sigmask(SIG_SETMASK, saved). That is three
// system calls per SSL call, and BASP reads each message with two SSL_reads
// (header, payload), on the one multiplexer thread that serves every
// connection of a node. On this VM they were most of that thread's time:
// one-way small messages went from about 50k/s to about 135k/s without them
// (docs/benchmarks.md).
//
// How: this object defines pthread_sigmask, sigprocmask and sigtimedwait.
// The dynamic linker binds every call in the process to these definitions
// (the executable comes first in symbol lookup); all but CAF's are passed
// on unchanged to the C library's (dlsym(RTLD_NEXT, ...)). A call is CAF's
// when it comes from libcaf_openssl's code (its return address lies in that
// library's executable segment) and has the macro's exact shape.
// - CAF's block: the first one on a thread blocks SIGPIPE for real and the
//   thread remembers it; later ones make no system call. Either way CAF is
//   given a marked "saved mask", so that its restore, which would unblock
//   SIGPIPE again, is recognised and skipped: SIGPIPE stays blocked.
// - CAF's sigtimedwait: skipped. A SIGPIPE raised by a write to a closed
//   connection stays pending on the thread, blocked and harmless (signals
//   of one kind do not queue).
// - Any other call on such a thread that could unblock SIGPIPE (SIG_UNBLOCK
//   naming it, SIG_SETMASK without it) first consumes a pending SIGPIPE, as
//   CAF would have, then runs, and the thread forgets that SIGPIPE is kept
//   blocked. So no code ever sees a SIGPIPE that CAF's writes raised, as
//   before. The process's signal dispositions are never touched.
// Linked into every program that runs CAF's TLS, with
// ssl_error_queue_guard.cpp (exo_ssl_guard).

#include "core/tls/sigpipe_mask_cache.hpp"

#include <dlfcn.h>
#include <link.h>
#include <signal.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>

namespace {

using mask_fn = int (*)(int, const sigset_t*, sigset_t*);
using wait_fn = int (*)(const sigset_t*, siginfo_t*, const timespec*);

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

mask_fn real_pthread_sigmask() {
  static const auto f = next<mask_fn>("pthread_sigmask");
  return f;
}

mask_fn real_sigprocmask() {
  static const auto f = next<mask_fn>("sigprocmask");
  return f;
}

wait_fn real_sigtimedwait() {
  static const auto f = next<wait_fn>("sigtimedwait");
  return f;
}

/// The executable segment of libcaf_openssl, empty when it is not loaded.
struct code_range {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;

  bool contains(const void* p) const noexcept {
    auto a = reinterpret_cast<std::uintptr_t>(p);
    return a >= begin && a < end;
  }
};

int find_caf_openssl(dl_phdr_info* info, std::size_t, void* data) {
  if (info->dlpi_name == nullptr
      || std::strstr(info->dlpi_name, "libcaf_openssl") == nullptr)
    return 0;
  auto* range = static_cast<code_range*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    auto& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) != 0) {
      range->begin = info->dlpi_addr + ph.p_vaddr;
      range->end = range->begin + ph.p_memsz;
    }
  }
  return 1;
}

const code_range& caf_openssl_code() {
  static const code_range range = [] {
    code_range r;
    dl_iterate_phdr(find_caf_openssl, &r);
    return r;
  }();
  return range;
}

/// The bytes of a sigset_t that the kernel reads (64 signals); glibc's
/// sigemptyset clears only these, the rest is whatever was there.
constexpr std::size_t kernel_set_bytes = (NSIG - 1) / 8;

/// Exactly {SIGPIPE}, as CAF_BLOCK_SIGPIPE builds it.
bool is_sigpipe_only(const sigset_t* set) {
  if (set == nullptr)
    return false;
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, SIGPIPE);
  return std::memcmp(set, &only, kernel_set_bytes) == 0;
}

/// Written into the last word of the saved mask handed to CAF, beyond the
/// 64 signals the kernel knows: marks a restore to skip.
constexpr unsigned long saved_mark = 0x65786f2d73696770ul;
constexpr std::size_t mark_word = sizeof(sigset_t) / sizeof(unsigned long) - 1;

void mark(sigset_t* set) {
  sigemptyset(set);
  reinterpret_cast<unsigned long*>(set)[mark_word] = saved_mark;
}

bool marked(const sigset_t* set) {
  return set != nullptr
         && reinterpret_cast<const unsigned long*>(set)[mark_word]
              == saved_mark;
}

/// True while this thread keeps SIGPIPE blocked for CAF.
thread_local bool kept_blocked = false;

/// Consumes a SIGPIPE pending on this thread, as CAF's sigtimedwait would
/// have.
void consume_pending_sigpipe() {
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, SIGPIPE);
  timespec zero{};
  int saved_errno = errno;
  while (real_sigtimedwait()(&only, nullptr, &zero) == SIGPIPE) {
  }
  errno = saved_errno;
}

/// Whether `how`/`set` may unblock SIGPIPE.
bool may_unblock_sigpipe(int how, const sigset_t* set) {
  if (set == nullptr)
    return false;
  if (how == SIG_UNBLOCK)
    return sigismember(set, SIGPIPE) == 1;
  if (how == SIG_SETMASK)
    return sigismember(set, SIGPIPE) != 1;
  return false;
}

/// Handles CAF's two pthread_sigmask calls; false when the call has
/// another shape.
bool caf_mask_call(int how, const sigset_t* set, sigset_t* old, int& result) {
  if (how == SIG_BLOCK && old != nullptr && is_sigpipe_only(set)) {
    if (!kept_blocked) {
      sigset_t ignored;
      result = real_pthread_sigmask()(SIG_BLOCK, set, &ignored);
      if (result != 0)
        return true;
      kept_blocked = true;
    }
    mark(old);
    result = 0;
    return true;
  }
  if (how == SIG_SETMASK && old == nullptr && marked(set)) {
    result = 0;
    return true;
  }
  return false;
}

/// Handles CAF's sigtimedwait; false when the call has another shape.
bool caf_wait_call(const sigset_t* set, const timespec* timeout) {
  if (!kept_blocked || timeout == nullptr || timeout->tv_sec != 0
      || timeout->tv_nsec != 0 || !is_sigpipe_only(set))
    return false;
  errno = EAGAIN;
  return true;
}

int pass_on(mask_fn real, int how, const sigset_t* set, sigset_t* old) {
  if (kept_blocked && may_unblock_sigpipe(how, set)) {
    consume_pending_sigpipe();
    kept_blocked = false;
  }
  return real(how, set, old);
}

} // namespace

namespace exo::tls::sigpipe_cache {

bool finds_caf_openssl() {
  return caf_openssl_code().end > caf_openssl_code().begin;
}

int caf_pthread_sigmask(int how, const sigset_t* set, sigset_t* old) {
  int result = 0;
  if (caf_mask_call(how, set, old, result))
    return result;
  return pass_on(real_pthread_sigmask(), how, set, old);
}

int caf_sigtimedwait(const sigset_t* set, siginfo_t* info,
                     const timespec* timeout) {
  if (caf_wait_call(set, timeout))
    return -1;
  return real_sigtimedwait()(set, info, timeout);
}

} // namespace exo::tls::sigpipe_cache

extern "C" {

int pthread_sigmask(int how, const sigset_t* set, sigset_t* old) noexcept {
  if (caf_openssl_code().contains(__builtin_return_address(0)))
    return exo::tls::sigpipe_cache::caf_pthread_sigmask(how, set, old);
  return pass_on(real_pthread_sigmask(), how, set, old);
}

// CAF calls pthread_sigmask only; other code's sigprocmask must still
// consume a kept SIGPIPE before unblocking it.
int sigprocmask(int how, const sigset_t* set, sigset_t* old) noexcept {
  return pass_on(real_sigprocmask(), how, set, old);
}

int sigtimedwait(const sigset_t* set, siginfo_t* info,
                 const timespec* timeout) {
  if (caf_openssl_code().contains(__builtin_return_address(0)))
    return exo::tls::sigpipe_cache::caf_sigtimedwait(set, info, timeout);
  return real_sigtimedwait()(set, info, timeout);
}

} // extern "C"
