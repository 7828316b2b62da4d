#include "actors/shard/actor_device_ops.hpp"

#include "messages/errors.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <cstring>
#include <thread>

namespace exo::shard {

using backend::errc;
using backend::fail;

backend::error to_backend_error(const caf::error& err) {
  if (err.category() == exo_error_category()) {
    auto code = static_cast<exo_errc>(err.code());
    auto msg = error_message(err);
    if (code >= exo_errc::unsupported && code <= exo_errc::wrong_device)
      return fail(static_cast<errc>(static_cast<int>(code) - 1), msg);
    if (code == exo_errc::unknown_handle || code == exo_errc::access_denied)
      return fail(errc::invalid_argument, msg);
    if (code == exo_errc::failed_state)
      return fail(errc::device_lost, msg);
    return fail(errc::driver_error, msg);
  }
  if (err == caf::sec::request_timeout)
    return fail(errc::timeout, "the device actor did not answer in time");
  return fail(errc::device_lost, "device actor: " + caf::to_string(err));
}

namespace {

/// Copies a reply of `n` bytes to `dst`; an error naming `what` when the
/// device actor sent another size.
backend::status take_chunk(const chunk& c, void* dst, std::uint64_t n,
                           const char* what) {
  if (c.bytes.size() != n)
    return fail(errc::driver_error,
                std::string{what} + ": the device actor sent "
                  + std::to_string(c.bytes.size()) + " bytes, not "
                  + std::to_string(n));
  if (n > 0)
    std::memcpy(dst, c.bytes.data(), n);
  return {};
}

bool is_paused(const caf::error& err) {
  return err.category() == exo_error_category()
         && static_cast<exo_errc>(err.code()) == exo_errc::paused;
}

} // namespace

struct actor_device_ops::impl {
  impl(caf::actor_system& sys, device_actor d, std::chrono::milliseconds t)
    : self(sys), dev(std::move(d)), timeout(t) {
  }
  caf::scoped_actor self;
  device_actor dev;
  std::chrono::milliseconds timeout;

  /// One synchronous request; `on_value` takes the reply.
  template <class F, class... Ts>
  backend::status ask(F on_value, Ts&&... xs) {
    if (!dev)
      return fail(errc::no_device, "no device actor");
    backend::status out;
    self->request(dev, timeout, std::forward<Ts>(xs)...)
      .receive(on_value,
               [&](caf::error& err) { out = to_backend_error(err); });
    return out;
  }

  /// Like ask, for compute: a refusal because the device is paused sets
  /// `paused` instead of failing. No timeout of its own: a request timeout
  /// wakes CAF's clock thread when it is set and again when it is
  /// cancelled, twice per step; the job's step watchdog reports a device
  /// that stops answering, and a device actor that exits answers every
  /// request it holds with an error.
  template <class F, class... Ts>
  backend::status ask_or_paused(bool& paused, F on_value, Ts&&... xs) {
    backend::status out;
    self->request(dev, caf::infinite, std::forward<Ts>(xs)...)
      .receive(on_value, [&](caf::error& err) {
        paused = is_paused(err);
        if (!paused)
          out = to_backend_error(err);
      });
    return out;
  }
};

actor_device_ops::actor_device_ops(caf::actor_system& sys, device_actor dev,
                                   std::string where,
                                   std::chrono::milliseconds timeout,
                                   std::chrono::milliseconds pause_patience)
  : impl_(std::make_unique<impl>(sys, std::move(dev), timeout)),
    where_(std::move(where)),
    pause_patience_(pause_patience) {
}

actor_device_ops::~actor_device_ops() = default;

backend::result<model::device_handle>
actor_device_ops::allocate(std::uint64_t bytes) {
  ++requests_;
  handle_id h = 0;
  auto s = impl_->ask([&](handle_id x) { h = x; }, allocate_atom::value,
                      bytes);
  if (!s)
    return s.err();
  return h;
}

backend::result<model::device_handle>
actor_device_ops::adopt_host(const void* data, std::uint64_t bytes,
                             std::shared_ptr<const void> keep) {
  if (adopt_unsupported_)
    return fail(errc::unsupported,
                where_ + " cannot read host memory in place");
  ++requests_;
  handle_id h = 0;
  auto s = impl_->ask([&](handle_id x) { h = x; }, adopt_atom::value,
                      host_region{data, bytes, std::move(keep)});
  if (!s) {
    adopt_unsupported_ = s.err().code == errc::unsupported;
    return s.err();
  }
  return h;
}

backend::status actor_device_ops::free(model::device_handle h) {
  if (!impl_->dev)
    return fail(errc::no_device, "no device actor");
  ++requests_;
  // The reply (ok or unknown handle) comes back to the scoped actor and is
  // dropped: nothing waits on a free.
  impl_->self->send(impl_->dev, free_atom::value, h);
  return {};
}

backend::status actor_device_ops::write(model::device_handle h,
                                        std::uint64_t offset, const void* src,
                                        std::uint64_t bytes) {
  auto* p = static_cast<const std::uint8_t*>(src);
  for (std::uint64_t done = 0; done < bytes;) {
    auto n = std::min(max_chunk_bytes, bytes - done);
    chunk c;
    c.bytes.assign(p + done, p + done + n);
    ++requests_;
    EXO_TRY(impl_->ask([](caf::atom_value) {}, write_atom::value, h,
                       offset + done, std::move(c)));
    done += n;
  }
  return {};
}

backend::status actor_device_ops::read(model::device_handle h,
                                       std::uint64_t offset, void* dst,
                                       std::uint64_t bytes) {
  auto* p = static_cast<std::uint8_t*>(dst);
  for (std::uint64_t done = 0; done < bytes;) {
    auto n = std::min(max_chunk_bytes, bytes - done);
    backend::status bad_size;
    ++requests_;
    EXO_TRY(impl_->ask(
      [&](chunk& c) { bad_size = take_chunk(c, p + done, n, "read"); },
      read_atom::value, h, offset + done, n));
    EXO_TRY(bad_size);
    done += n;
  }
  return {};
}

namespace {

/// Writes ops[begin, end) as kernel calls into `calls`, reusing the
/// vectors already there (a shard's steps repeat the same calls).
void fill_calls(const std::vector<model::device_op>& ops, std::size_t begin,
                std::size_t end, std::vector<kernel_call>& calls) {
  calls.resize(end - begin);
  for (std::size_t j = begin; j < end; ++j) {
    auto& op = ops[j];
    auto& c = calls[j - begin];
    c.op = model::op_name(op.kind);
    c.inputs.clear();
    c.input_offsets.clear();
    for (auto& in : op.inputs) {
      c.inputs.push_back(in.buf);
      c.input_offsets.push_back(in.offset);
    }
    c.output = op.output.buf;
    c.output_offset = op.output.offset;
    c.dims.assign(op.dims.begin(), op.dims.end());
    c.scalars.assign(op.scalars.begin(), op.scalars.end());
  }
}

/// The wire form of ops[begin, end).
std::vector<kernel_call> to_calls(const std::vector<model::device_op>& ops,
                                  std::size_t begin, std::size_t end) {
  std::vector<kernel_call> calls;
  fill_calls(ops, begin, end, calls);
  return calls;
}

} // namespace

backend::status actor_device_ops::retry_while_paused(
  const std::function<backend::status(bool& paused)>& send) {
  const auto give_up = std::chrono::steady_clock::now() + pause_patience_;
  for (;;) {
    if (!impl_->dev)
      return fail(errc::no_device, "no device actor");
    ++requests_;
    bool paused = false;
    auto status = send(paused);
    if (!paused)
      return status;
    if (std::chrono::steady_clock::now() >= give_up)
      return fail(errc::timeout,
                  where_ + ": the device stayed paused for longer than "
                    + std::to_string(pause_patience_.count()) + " ms");
    ++pause_waits_;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

backend::status actor_device_ops::step(
  model::device_handle in, std::uint64_t in_offset, const void* src,
  std::uint64_t in_bytes, const std::vector<model::device_op>& ops,
  model::device_handle out, std::uint64_t out_offset, void* dst,
  std::uint64_t out_bytes) {
  if (in_bytes > max_chunk_bytes || out_bytes > max_chunk_bytes
      || ops.size() > max_kernel_batch)
    return device_ops::step(in, in_offset, src, in_bytes, ops, out,
                            out_offset, dst, out_bytes);
  auto* p = static_cast<const std::uint8_t*>(src);
  // A paused device refuses the step before writing it. Each attempt builds
  // its own input and calls, moved into the message rather than copied.
  return retry_while_paused([&](bool& paused) {
    chunk data;
    if (in_bytes > 0)
      data.bytes.assign(p, p + in_bytes);
    // The calls of the last step come back with its reply (see
    // messages/device.hpp); a refused attempt loses them, the next builds.
    fill_calls(ops, 0, ops.size(), spare_calls_);
    backend::status status;
    auto sent = impl_->ask_or_paused(
      paused,
      [&](chunk& r, std::vector<kernel_call>& back) {
        status = take_chunk(r, dst, out_bytes, "step");
        spare_calls_ = std::move(back);
      },
      compute_atom::value, in, in_offset, std::move(data),
      std::move(spare_calls_), out, out_offset, out_bytes);
    return sent ? status : sent;
  });
}

backend::status
actor_device_ops::run(const std::vector<model::device_op>& ops) {
  for (std::size_t i = 0; i < ops.size(); i += max_kernel_batch) {
    auto end = std::min(ops.size(), i + max_kernel_batch);
    auto calls = to_calls(ops, i, end);
    // A paused device (thermal monitor, operator) refuses the whole batch
    // before running any of it, so the same batch can be sent again.
    EXO_TRY(retry_while_paused([&](bool& paused) {
      return impl_->ask_or_paused(paused, [](caf::atom_value) {},
                                  compute_atom::value, calls);
    }));
  }
  return {};
}

backend::status actor_device_ops::copy_to(model::device_handle src,
                                          std::uint64_t src_off,
                                          const caf::actor& peer,
                                          model::device_handle dst,
                                          std::uint64_t dst_off,
                                          std::uint64_t bytes) {
  ++requests_;
  return impl_->ask([](caf::atom_value) {}, copy_atom::value, src, src_off,
                    peer, dst, dst_off, bytes);
}

backend::status actor_device_ops::synchronize() {
  ++requests_;
  return impl_->ask([](caf::atom_value) {}, sync_atom::value);
}

} // namespace exo::shard
