// SIGPIPE around CAF's OpenSSL calls (core/tls/sigpipe_mask_cache.cpp):
// blocked once per thread and kept, never delivered, and other code's
// signal masks unchanged.

#include "core/tls/sigpipe_mask_cache.hpp"

#include <catch2/catch.hpp>

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <thread>

namespace sc = exo::tls::sigpipe_cache;

namespace {

std::atomic<int> delivered{0};

void count_sigpipe(int) {
  delivered.fetch_add(1);
}

/// Counts delivered SIGPIPEs while in scope (a SIGPIPE delivered with the
/// default action would end the test program).
struct sigpipe_counter {
  struct sigaction saved{};
  sigpipe_counter() {
    delivered = 0;
    struct sigaction sa{};
    sa.sa_handler = count_sigpipe;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, &saved);
  }
  ~sigpipe_counter() {
    sigaction(SIGPIPE, &saved, nullptr);
  }
};

sigset_t sigpipe_only() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGPIPE);
  return s;
}

bool sigpipe_blocked() {
  sigset_t cur;
  pthread_sigmask(SIG_BLOCK, nullptr, &cur);
  return sigismember(&cur, SIGPIPE) == 1;
}

bool sigpipe_pending() {
  sigset_t p;
  sigpending(&p);
  return sigismember(&p, SIGPIPE) == 1;
}

/// Runs `f` on a fresh thread (its signal mask starts as the caller's).
template <class F>
void on_thread(F f) {
  std::thread t{f};
  t.join();
}

} // namespace

TEST_CASE("CAF's SIGPIPE block is made once per thread and kept, its restore "
          "and wait change nothing, and a raised SIGPIPE is never delivered") {
  sigpipe_counter counter;
  REQUIRE_FALSE(sigpipe_blocked());
  on_thread([] {
    auto set = sigpipe_only();
    sigset_t saved;
    // The macro's block, a SIGPIPE raised by a write, its wait, its restore.
    REQUIRE(sc::caf_pthread_sigmask(SIG_BLOCK, &set, &saved) == 0);
    CHECK(sigpipe_blocked());
    pthread_kill(pthread_self(), SIGPIPE);
    CHECK(sigpipe_pending());
    timespec zero{};
    errno = 0;
    CHECK(sc::caf_sigtimedwait(&set, nullptr, &zero) == -1);
    CHECK(errno == EAGAIN);
    CHECK(sigpipe_pending());
    REQUIRE(sc::caf_pthread_sigmask(SIG_SETMASK, &saved, nullptr) == 0);
    CHECK(sigpipe_blocked());
    // The next call of CAF's: still blocked, nothing delivered.
    sigset_t saved2;
    REQUIRE(sc::caf_pthread_sigmask(SIG_BLOCK, &set, &saved2) == 0);
    REQUIRE(sc::caf_pthread_sigmask(SIG_SETMASK, &saved2, nullptr) == 0);
    CHECK(sigpipe_blocked());
    CHECK(delivered == 0);
    // Other code unblocking SIGPIPE first consumes the one CAF's write
    // raised, as CAF's own wait would have.
    REQUIRE(pthread_sigmask(SIG_UNBLOCK, &set, nullptr) == 0);
    CHECK_FALSE(sigpipe_blocked());
    CHECK_FALSE(sigpipe_pending());
    CHECK(delivered == 0);
    // Forgotten: CAF's next block is real again.
    REQUIRE(sc::caf_pthread_sigmask(SIG_BLOCK, &set, &saved) == 0);
    CHECK(sigpipe_blocked());
  });
  CHECK(delivered == 0);
  CHECK_FALSE(sigpipe_blocked()); // the main thread's mask is untouched
}

TEST_CASE("a full mask restored with SIG_SETMASK also consumes the kept "
          "SIGPIPE, and sigprocmask is handled the same") {
  sigpipe_counter counter;
  on_thread([] {
    auto set = sigpipe_only();
    sigset_t before;
    pthread_sigmask(SIG_BLOCK, nullptr, &before);
    sigset_t saved;
    REQUIRE(sc::caf_pthread_sigmask(SIG_BLOCK, &set, &saved) == 0);
    pthread_kill(pthread_self(), SIGPIPE);
    REQUIRE(pthread_sigmask(SIG_SETMASK, &before, nullptr) == 0);
    CHECK_FALSE(sigpipe_blocked());
    CHECK_FALSE(sigpipe_pending());
    REQUIRE(sc::caf_pthread_sigmask(SIG_BLOCK, &set, &saved) == 0);
    pthread_kill(pthread_self(), SIGPIPE);
    REQUIRE(sigprocmask(SIG_UNBLOCK, &set, nullptr) == 0);
    CHECK_FALSE(sigpipe_blocked());
    CHECK_FALSE(sigpipe_pending());
  });
  CHECK(delivered == 0);
}

TEST_CASE("calls from outside CAF get the C library's behaviour") {
  sigpipe_counter counter;
  on_thread([] {
    auto set = sigpipe_only();
    sigset_t old;
    REQUIRE(pthread_sigmask(SIG_BLOCK, &set, &old) == 0);
    CHECK(sigpipe_blocked());
    CHECK(sigismember(&old, SIGPIPE) == 0);
    pthread_kill(pthread_self(), SIGPIPE);
    timespec zero{};
    CHECK(sigtimedwait(&set, nullptr, &zero) == SIGPIPE);
    CHECK_FALSE(sigpipe_pending());
    REQUIRE(pthread_sigmask(SIG_SETMASK, &old, nullptr) == 0);
    CHECK_FALSE(sigpipe_blocked());
    // A shape CAF does not use is passed on, even through the hook.
    sigset_t two = set;
    sigaddset(&two, SIGUSR2);
    REQUIRE(sc::caf_pthread_sigmask(SIG_BLOCK, &two, &old) == 0);
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, nullptr, &cur);
    CHECK(sigismember(&cur, SIGUSR2) == 1);
    REQUIRE(sc::caf_pthread_sigmask(SIG_SETMASK, &old, nullptr) == 0);
    CHECK_FALSE(sigpipe_blocked());
  });
  CHECK(delivered == 0);
}
