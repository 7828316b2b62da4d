// Keeps OpenSSL from tearing down its global state when the process exits.
//
// Why: OpenSSL 3 registers OPENSSL_cleanup with atexit() the first time it
// is initialised. Among other things, that cleanup frees the list of
// thread-stop handlers of every thread that ever used OpenSSL (initthread.c,
// init_thread_deregister with "all"), without the lock the threads take.
// A thread that is still ending at that moment frees its own list too, in
// its thread-specific data's destructor (init_thread_destructor), and the
// process aborts with "double free or corruption (fasttop)" in
// __nptl_deallocate_tsd. exo's threads can be in that state when a program
// returns from main: CAF 0.17 counts a detached actor's thread as gone
// before the thread has run its thread-specific destructors, so
// caf::actor_system's destructor returns while the node actor's or a
// device actor's thread (which signed, hashed or drew random bytes) is
// still ending. CI saw it once in the streaming example (an application
// that returns from main, unlike exo-node, which ends with _Exit). The same
// race is issue openssl/openssl#6214; libdatachannel, rust-openssl and .NET
// settle it the same way.
//
// How: the first initialisation of OpenSSL in the process asks for no
// atexit() handler (OPENSSL_INIT_NO_ATEXIT only counts on the first one).
// This constructor runs before main, ahead of the program's other
// constructors (priority 101), in every program that links exo_ssl_guard:
// every program that runs CAF's TLS, exo::runtime's applications included.
// The memory that cleanup would free is the process's until it ends; the
// threads free their own state as they end, as before.
//
// test/cluster/openssl_exit_tests.cpp checks that OPENSSL_cleanup does not
// run at exit in such a program, and does in one without this object.

#include <openssl/crypto.h>

namespace {

__attribute__((constructor(101))) void openssl_without_atexit_cleanup() {
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
}

} // namespace
