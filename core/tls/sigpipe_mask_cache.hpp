#pragma once

/// What CAF's SIGPIPE handling around each OpenSSL call gets in exo's
/// programs (sigpipe_mask_cache.cpp, linked in with exo_ssl_guard): SIGPIPE
/// is blocked once per thread and kept blocked, and CAF's per-call block,
/// restore and wait make no system call. These entry points run that
/// handling directly, without the check that the caller is libcaf_openssl,
/// so that tests can exercise it.

#include <signal.h>

#include <ctime>

namespace exo::tls::sigpipe_cache {

/// Whether libcaf_openssl's code was found in this process: without it,
/// every call is passed to the C library unchanged.
bool finds_caf_openssl();

/// pthread_sigmask as CAF's calls get it.
int caf_pthread_sigmask(int how, const sigset_t* set, sigset_t* old);

/// sigtimedwait as CAF's calls get it.
int caf_sigtimedwait(const sigset_t* set, siginfo_t* info,
                     const timespec* timeout);

} // namespace exo::tls::sigpipe_cache
