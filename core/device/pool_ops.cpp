#include "core/device/pool_ops.hpp"

namespace exo::device {

using backend::errc;
using backend::fail;

namespace {

status gone() {
  return fail(errc::device_lost, "the device actor has stopped");
}

result<backend::mut_view> find_in(const void* ctx, model::device_handle h,
                                  std::uint64_t offset) {
  return static_cast<const buffer_pool*>(ctx)->view(h, offset);
}

} // namespace

pool_ops::pool_ops(backend::device& dev, buffer_pool& pool, hooks h)
  : dev_(&dev),
    pool_(&pool),
    where_(dev.properties().id),
    hooks_(std::move(h)) {
}

status pool_ops::reported(status s) {
  if (!s && hooks_.on_error)
    hooks_.on_error(s.err());
  return s;
}

result<backend::buffer*> pool_ops::resolve(model::device_handle h,
                                           std::uint64_t offset,
                                           std::uint64_t bytes) {
  auto b = pool_->resolve(h, offset, bytes);
  if (!b && hooks_.on_error)
    hooks_.on_error(b.err());
  return b;
}

template <class Try>
result<model::device_handle> pool_ops::with_room(Try attempt,
                                                 bool& detached) {
  for (;;) {
    auto h = [&]() -> result<model::device_handle> {
      std::lock_guard<std::mutex> guard{mx_};
      detached = pool_ == nullptr;
      if (detached)
        return gone().err();
      return attempt();
    }();
    // Outside the lock: what goes frees its buffers through this object.
    if (detached || h || h.err().code != errc::out_of_memory
        || !hooks_.on_no_room || !hooks_.on_no_room())
      return h;
  }
}

result<model::device_handle> pool_ops::allocate(std::uint64_t bytes) {
  bool detached = false;
  auto h = with_room([&] { return pool_->allocate(bytes); }, detached);
  if (!h && !detached && hooks_.on_error)
    hooks_.on_error(h.err());
  if (h && hooks_.on_allocate)
    hooks_.on_allocate(bytes, false);
  return h;
}

status pool_ops::free(model::device_handle h) {
  std::lock_guard<std::mutex> guard{mx_};
  if (!pool_)
    return {}; // the pool released everything with the actor
  EXO_TRY(pool_->release(h));
  if (hooks_.on_free)
    hooks_.on_free();
  return {};
}

status pool_ops::write(model::device_handle h, std::uint64_t offset,
                       const void* src, std::uint64_t bytes) {
  std::lock_guard<std::mutex> guard{mx_};
  if (!pool_)
    return gone();
  auto b = resolve(h, offset, bytes);
  if (!b)
    return b.err();
  EXO_TRY(reported(dev_->write(**b, offset, src, bytes)));
  bytes_written_ += bytes;
  return {};
}

status pool_ops::read(model::device_handle h, std::uint64_t offset,
                      void* dst, std::uint64_t bytes) {
  std::lock_guard<std::mutex> guard{mx_};
  if (!pool_)
    return gone();
  auto b = resolve(h, offset, bytes);
  if (!b)
    return b.err();
  EXO_TRY(reported(dev_->read(**b, offset, dst, bytes)));
  bytes_read_ += bytes;
  return {};
}

result<model::device_handle>
pool_ops::adopt_host(const void* data, std::uint64_t bytes,
                     std::shared_ptr<const void> keep) {
  bool detached = false;
  auto h = with_room([&] { return pool_->adopt(data, bytes, keep); },
                     detached);
  if (!h && !detached && h.err().code != errc::unsupported
      && hooks_.on_error)
    hooks_.on_error(h.err());
  if (h && hooks_.on_allocate)
    hooks_.on_allocate(bytes, true);
  return h;
}

status pool_ops::run(const std::vector<model::device_op>& ops) {
  std::lock_guard<std::mutex> guard{mx_};
  if (!pool_)
    return gone();
  ops_run_ += ops.size();
  return reported(model::run_device_ops(*dev_, ops, &find_in, pool_));
}

status pool_ops::synchronize() {
  std::lock_guard<std::mutex> guard{mx_};
  if (!pool_)
    return gone();
  return reported(dev_->synchronize());
}

std::string pool_ops::where() const {
  return where_;
}

bool pool_ops::runs_weights(backend::weight_type t) const {
  std::lock_guard<std::mutex> guard{mx_};
  return pool_ && dev_->runs_weights(t);
}

backend::weight_type pool_ops::preferred_weights(backend::weight_type t,
                                                 std::uint64_t rows,
                                                 std::uint64_t cols) const {
  std::lock_guard<std::mutex> guard{mx_};
  return pool_ ? dev_->preferred_weights(t, static_cast<std::size_t>(rows),
                                         static_cast<std::size_t>(cols))
               : t;
}

bool pool_ops::resizes() const {
  std::lock_guard<std::mutex> guard{mx_};
  return pool_ && dev_->resizes();
}

bool pool_ops::reads_kv_blocks() const {
  std::lock_guard<std::mutex> guard{mx_};
  return pool_ && dev_->reads_kv_blocks();
}

bool pool_ops::paged_rows() const {
  std::lock_guard<std::mutex> guard{mx_};
  return pool_ && dev_->runs_paged_rows();
}

status pool_ops::copy(model::device_handle src, std::uint64_t src_off,
                      model::device_handle dst, std::uint64_t dst_off,
                      std::uint64_t bytes) {
  std::lock_guard<std::mutex> guard{mx_};
  if (!pool_)
    return gone();
  auto from = resolve(src, src_off, bytes);
  if (!from)
    return from.err();
  auto to = resolve(dst, dst_off, bytes);
  if (!to)
    return to.err();
  ++copies_;
  return reported(dev_->copy(**from, src_off, **to, dst_off, bytes));
}

status pool_ops::resize(model::device_handle h, std::uint64_t bytes) {
  bool detached = false;
  auto r = with_room(
    [&]() -> result<model::device_handle> {
      EXO_TRY(pool_->resize(h, bytes));
      return h;
    },
    detached);
  if (!r && !detached && r.err().code != errc::unsupported
      && hooks_.on_error)
    hooks_.on_error(r.err());
  if (!r)
    return r.err();
  if (hooks_.on_resize)
    hooks_.on_resize(bytes);
  return {};
}

std::uint64_t pool_ops::footprint(model::device_handle h) const {
  std::lock_guard<std::mutex> guard{mx_};
  return pool_ ? pool_->footprint(h) : 0;
}

void pool_ops::detach() {
  std::lock_guard<std::mutex> guard{mx_};
  pool_ = nullptr;
  dev_ = nullptr;
}

} // namespace exo::device
