#include "actors/device/device_service.hpp"

#include "core/text/json.hpp"

#include "core/access/device_request.hpp"
#include "messages/cluster.hpp"
#include "messages/device.hpp"

#include <caf/all.hpp>

#include <chrono>

namespace exo {

namespace {

/// Console "dev": clients' device operations on this node's devices, always
/// as the token-bearing variants (core/access/device_request.hpp). The
/// service itself holds no rights: the device actor checks the token.
caf::behavior device_service(caf::event_based_actor* self,
                             caf::actor node_actor, std::string node) {
  using access::device_request;
  return {
    [node](inspect_atom) {
      actor_snapshot s;
      s.name = "dev";
      s.kind = "dev";
      s.node = node;
      s.summary = "device operations for clients (dev ...)";
      return s;
    },
    [self, node_actor](console_atom, const std::string&,
                       const std::string& arg) -> caf::result<console_reply> {
      device_request req;
      auto why = access::parse_device_request(arg, req);
      if (!why.empty())
        return caf::make_error(caf::sec::invalid_argument,
                               "dev: " + why + " ("
                                 + access::device_request_usage() + ")");
      auto rp = self->make_response_promise<console_reply>();
      auto fail = [rp](caf::error& err) mutable { rp.deliver(std::move(err)); };
      // Finds the device by id among this node's device actors (asked
      // without a token: the service is an actor of this node), then sends
      // the client's operation with the client's token.
      self->request(node_actor, std::chrono::seconds(5), devices_atom::value,
                    actors_atom::value)
        .then(
          [self, rp, req, fail](std::vector<device_actor>& hs) mutable {
            struct search {
              std::size_t pending = 0;
              device_actor found;
            };
            auto s = std::make_shared<search>();
            s->pending = hs.size();
            auto finish = [self, rp, req, s, fail]() mutable {
              if (!s->found) {
                rp.deliver(caf::make_error(caf::sec::invalid_argument,
                                           "dev: no device \"" + req.device
                                             + "\" on this node"));
                return;
              }
              auto reply = [rp](std::string msg) mutable {
                console_reply r;
                r.command = "dev";
                r.json = text::compact({{"result", msg}});
                r.text = std::move(msg) + "\n";
                rp.deliver(std::move(r));
              };
              auto to = std::chrono::seconds(10);
              using op = device_request::op;
              switch (req.what) {
                case op::info:
                  self->request(s->found, to, info_atom::value, req.token)
                    .then([reply](device_info& i) mutable {
                            reply(i.id + " " + std::string{to_string(i.state)});
                          },
                          fail);
                  break;
                case op::allocate:
                  self
                    ->request(s->found, to, allocate_atom::value, req.bytes,
                              req.token)
                    .then([reply](handle_id h) mutable {
                            reply(std::to_string(h));
                          },
                          fail);
                  break;
                case op::free:
                  self
                    ->request(s->found, to, free_atom::value, req.handle,
                              req.token)
                    .then([reply](caf::atom_value) mutable { reply("ok"); },
                          fail);
                  break;
                case op::fault:
                  self
                    ->request(s->found, to, fault_atom::value, req.fault,
                              req.token)
                    .then([reply](std::string& what) mutable {
                            reply(std::move(what));
                          },
                          fail);
                  break;
                case op::sync:
                  self->request(s->found, to, sync_atom::value, req.token)
                    .then([reply](caf::atom_value) mutable { reply("ok"); },
                          fail);
                  break;
              }
            };
            if (hs.empty()) {
              finish();
              return;
            }
            for (auto& h : hs)
              self->request(h, std::chrono::seconds(5), info_atom::value)
                .then(
                  [s, h, req, finish](device_info& i) mutable {
                    if (i.id == req.device)
                      s->found = h;
                    if (--s->pending == 0)
                      finish();
                  },
                  [s, finish](caf::error&) mutable {
                    if (--s->pending == 0)
                      finish();
                  });
          },
          fail);
      return rp;
    },
  };
}

} // namespace

service spawn_device_service(const service_context& ctx) {
  auto h = ctx.sys->spawn(device_service, ctx.node, ctx.cfg->node.name);
  return {"dev", "dev", h, {"dev"}};
}

} // namespace exo
