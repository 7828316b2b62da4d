#include "actors/directory/directory_actor.hpp"

#include "messages/errors.hpp"

#include <caf/all.hpp>

#include <map>

namespace exo::directory {

namespace {

struct entry {
  std::string name;
  std::string kind;
  caf::actor handle;
};

struct directory_state {
  static inline const char* name = "exo.directory";
  std::string node;
  std::chrono::milliseconds timeout{2000};
  std::map<caf::actor_addr, entry> members;
};

/// Collects the snapshots of every member into one reply.
struct gather {
  std::vector<actor_snapshot> out;
  std::size_t pending = 0;
  caf::response_promise rp;

  void done_one() {
    if (--pending == 0) {
      std::sort(out.begin(), out.end(),
                [](auto& a, auto& b) { return a.name < b.name; });
      rp.deliver(std::move(out));
    }
  }
};

caf::behavior directory_impl(caf::stateful_actor<directory_state>* self,
                             std::string node,
                             std::chrono::milliseconds timeout) {
  self->state.node = std::move(node);
  self->state.timeout = timeout;
  self->set_down_handler([self](const caf::down_msg& dm) {
    self->state.members.erase(dm.source);
  });
  return {
    [self](register_atom, std::string& name, std::string& kind,
           caf::actor& handle) -> caf::result<caf::atom_value> {
      if (!handle)
        return make_exo_error(exo_errc::invalid_argument,
                              "register: no actor given");
      self->monitor(handle);
      self->state.members[handle.address()]
        = entry{std::move(name), std::move(kind), handle};
      return caf::ok_atom::value;
    },
    [self](actors_atom) -> caf::result<std::vector<actor_snapshot>> {
      auto& st = self->state;
      // The directory lists itself too.
      actor_snapshot me;
      me.name = "directory";
      me.kind = "directory";
      me.node = st.node;
      me.summary = std::to_string(st.members.size()) + " members";
      if (st.members.empty())
        return std::vector<actor_snapshot>{me};
      auto g = std::make_shared<gather>();
      g->out.push_back(me);
      g->pending = st.members.size();
      g->rp = self->make_response_promise();
      for (auto& [addr, e] : st.members) {
        auto fallback = actor_snapshot{e.name, e.kind, st.node, "", {}};
        self->request(e.handle, st.timeout, inspect_atom::value)
          .then(
            [g, fallback](actor_snapshot& snap) {
              if (snap.name.empty())
                snap.name = fallback.name;
              g->out.push_back(std::move(snap));
              g->done_one();
            },
            [g, fallback](caf::error& err) mutable {
              fallback.summary = "no answer: " + caf::to_string(err);
              g->out.push_back(std::move(fallback));
              g->done_one();
            });
      }
      return g->rp;
    },
    [self](inspect_atom,
           std::string& name) -> caf::result<caf::message> {
      auto& st = self->state;
      if (name == "directory") {
        actor_snapshot me;
        me.name = "directory";
        me.kind = "directory";
        me.node = st.node;
        me.summary = std::to_string(st.members.size()) + " members";
        for (auto& [addr, e] : st.members)
          me.fields[e.name] = e.kind;
        return caf::make_message(std::move(me));
      }
      for (auto& [addr, e] : st.members)
        if (e.name == name)
          return self->delegate(e.handle, inspect_atom::value);
      return make_exo_error(exo_errc::invalid_argument,
                            "no actor named \"" + name + "\" on node "
                              + st.node);
    },
    [self](inspect_atom) {
      actor_snapshot me;
      me.name = "directory";
      me.kind = "directory";
      me.node = self->state.node;
      me.summary = std::to_string(self->state.members.size()) + " members";
      for (auto& [addr, e] : self->state.members)
        me.fields[e.name] = e.kind;
      return me;
    },
  };
}

} // namespace

caf::actor spawn_directory(caf::actor_system& sys, std::string node,
                           std::chrono::milliseconds timeout) {
  return sys.spawn(directory_impl, std::move(node), timeout);
}

} // namespace exo::directory
