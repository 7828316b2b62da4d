#include "core/chat/interpreter.hpp"

#include "core/chat/builtins.hpp"
#include "core/chat/lexer.hpp"
#include "core/chat/unicode.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace exo::chat {

namespace {

/// `{% break %}` and `{% continue %}` unwind to the loop as exceptions, so
/// that, as in the reference, the interrupted iteration's output is dropped.
struct loop_break {};
struct loop_continue {};

} // namespace

value environment::lookup(const std::string& name) const {
  for (auto* e = this; e != nullptr; e = e->parent.get()) {
    auto it = e->vars.find(name);
    if (it != e->vars.end())
      return it->second;
  }
  return value{};
}

interpreter::interpreter(std::string_view source, const limits& lim)
    : source_(source), limits_(lim) {
  // nop
}

interpreter::call_guard::call_guard(interpreter& in) : self(in) {
  if (++self.call_depth_ > self.limits_.max_call_depth) {
    --self.call_depth_;
    self.fail(self.current(),
              "macro calls nest deeper than " +
                  std::to_string(self.limits_.max_call_depth),
              error_kind::limit);
  }
}

interpreter::call_guard::~call_guard() {
  --self.call_depth_;
}

void interpreter::fail(const node& n, const std::string& what,
                       error_kind kind) const {
  auto p = locate(source_, n.offset);
  throw template_error(kind, what, p.line, p.column);
}

void interpreter::check_size(const node& n, const std::string& s) const {
  if (s.size() > limits_.max_output_bytes)
    fail(n,
         "output exceeds " + std::to_string(limits_.max_output_bytes) +
             " bytes",
         error_kind::limit);
}

void interpreter::check_items(const node& n, std::size_t count) const {
  if (count > limits_.max_items)
    fail(n, "a list exceeds " + std::to_string(limits_.max_items) + " items",
         error_kind::limit);
}

std::string interpreter::json_text(const node& n, const value& v,
                                   json_options opts, bool output) const {
  opts.max_bytes = std::min(opts.max_bytes, limits_.max_output_bytes);
  try {
    return output ? to_output(v, opts.max_bytes) : to_json(v, opts);
  } catch (const std::length_error& e) {
    fail(n, e.what(), error_kind::limit);
  } catch (const std::invalid_argument& e) {
    fail(n, e.what());
  }
}

env_ptr interpreter::make_globals() {
  auto env = std::make_shared<environment>();
  builtins::add_globals(*env);
  return env;
}

std::string interpreter::render(const std::vector<node_ptr>& program,
                                const env_ptr& globals) {
  try {
    return block(program, globals);
  } catch (const loop_break&) {
    fail(*current_, "'break' outside a loop");
  } catch (const loop_continue&) {
    fail(*current_, "'continue' outside a loop");
  }
}

std::string interpreter::block(const std::vector<node_ptr>& body,
                               const env_ptr& env) {
  std::string out;
  for (auto& statement : body) {
    auto v = eval(*statement, env);
    if (v.is_undefined() || v.is_none())
      continue;
    if (v.is_string())
      out += v.as_string();
    else
      out += json_text(*statement, v, {}, true);
    check_size(*statement, out);
  }
  return out;
}

value interpreter::eval(const node& n, const env_ptr& env) {
  if (++steps_ > limits_.max_steps)
    fail(n,
         "evaluation takes more than " + std::to_string(limits_.max_steps) +
             " steps",
         error_kind::limit);
  if (depth_ >= limits_.max_eval_depth)
    fail(n,
         "evaluation nests deeper than " +
             std::to_string(limits_.max_eval_depth),
         error_kind::limit);
  ++depth_;
  auto* saved = current_;
  current_ = &n;
  struct restore {
    interpreter& self;
    const node* saved;
    ~restore() {
      --self.depth_;
      self.current_ = saved;
    }
  } guard{*this, saved};
  try {
    return eval_node(n, env);
  } catch (const std::length_error& e) {
    fail(n, e.what(), error_kind::limit);
  } catch (const std::invalid_argument& e) {
    fail(n, e.what());
  }
}

value interpreter::eval_node(const node& n, const env_ptr& env) {
  switch (n.kind) {
  case node_kind::text:
  case node_kind::string:
    return value::string(n.name);
  case node_kind::comment:
    return value::none();
  case node_kind::set:
    return eval_set(n, env);
  case node_kind::if_:
    return value::string(
        block(eval(*n.a, env).truthy() ? n.body : n.alternate, env));
  case node_kind::for_:
    return eval_for(n, env);
  case node_kind::macro:
    return eval_macro(n, env);
  case node_kind::call_block:
    return eval_call_block(n, env);
  case node_kind::filter_block: {
    auto text = value::string(block(n.body, env));
    return apply_filter(n, text, *n.a, env);
  }
  case node_kind::break_:
    throw loop_break{};
  case node_kind::continue_:
    throw loop_continue{};
  case node_kind::integer:
    return value::integer(n.int_value);
  case node_kind::floating:
    return value::floating(n.float_value);
  case node_kind::array:
  case node_kind::tuple: {
    array items;
    items.reserve(n.args.size());
    for (auto& e : n.args)
      items.push_back(eval(*e, env));
    return value::make_array(std::move(items), n.kind == node_kind::tuple);
  }
  case node_kind::object: {
    object obj;
    for (std::size_t i = 0; i + 1 < n.args.size(); i += 2) {
      auto key = eval(*n.args[i], env);
      if (!key.is_string())
        fail(*n.args[i], std::string("mapping keys must be strings, got ") +
                             key.type_name());
      obj.set(key.as_string(), eval(*n.args[i + 1], env));
    }
    return value::make_object(std::move(obj));
  }
  case node_kind::identifier:
    return env->lookup(n.name);
  case node_kind::member:
    return eval_member(n, env);
  case node_kind::call:
    return eval_call(n, env);
  case node_kind::unary:
    return eval_unary(n, env);
  case node_kind::binary:
    return eval_binary(n, env);
  case node_kind::filter: {
    auto operand = eval(*n.a, env);
    return apply_filter(n, operand, *n.b, env);
  }
  case node_kind::test:
    return eval_test(n, env);
  case node_kind::select:
    if (!eval(*n.b, env).truthy())
      return value{};
    return eval(*n.a, env);
  case node_kind::ternary:
    return eval(*n.a, env).truthy() ? eval(*n.b, env) : eval(*n.c, env);
  case node_kind::slice:
    fail(n, "a slice is only valid inside '[]'");
  case node_kind::keyword_arg:
  case node_kind::spread:
  case node_kind::keyword_spread:
    fail(n, "argument syntax outside a call");
  }
  fail(n, "unknown syntax node");
}

value interpreter::eval_set(const node& n, const env_ptr& env) {
  auto rhs = n.b ? eval(*n.b, env) : value::string(block(n.body, env));
  auto& target = *n.a;
  if (target.kind == node_kind::identifier) {
    env->set(target.name, std::move(rhs));
  } else if (target.kind == node_kind::tuple) {
    if (!rhs.is_array())
      fail(n, std::string("cannot unpack a ") + rhs.type_name() + " in set");
    auto& items = rhs.items();
    if (items.size() != target.args.size())
      fail(n, std::string("too ") +
                  (target.args.size() > items.size() ? "few" : "many") +
                  " items to unpack in set");
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (target.args[i]->kind != node_kind::identifier)
        fail(*target.args[i], "can only unpack into names");
      env->set(target.args[i]->name, items[i]);
    }
  } else if (target.kind == node_kind::member) {
    auto object = eval(*target.a, env);
    if (!object.is(value::kind::name_space))
      fail(n, std::string("cannot assign an attribute of a ") +
                  object.type_name() + " (only of a namespace)");
    if (target.flag || target.b->kind != node_kind::identifier)
      fail(n, "can only assign a namespace attribute by name");
    // No cycles: a namespace never holds what could lead back to it.
    if (rhs.holds_references())
      fail(n, "a namespace attribute cannot hold a namespace or a function, "
              "nor a list or mapping with one");
    if (rhs.depth() + 1 > max_value_depth)
      fail(n,
           "values nest deeper than " + std::to_string(max_value_depth) +
               " levels",
           error_kind::limit);
    auto& fields = object.fields();
    fields.depth = std::max(fields.depth, rhs.depth() + 1);
    fields.set(target.b->name, std::move(rhs));
  } else {
    fail(n, "cannot assign to this expression");
  }
  return value::none();
}

namespace {

void bind_loop_target(interpreter& in, const node& target, const value& item,
                      environment& scope) {
  if (target.kind == node_kind::identifier) {
    scope.set(target.name, item);
    return;
  }
  if (!item.is_array())
    in.fail(target, std::string("cannot unpack a ") + item.type_name());
  auto& items = item.items();
  if (items.size() != target.args.size())
    in.fail(target, std::string("too ") +
                        (target.args.size() > items.size() ? "few" : "many") +
                        " items to unpack");
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (target.args[i]->kind != node_kind::identifier)
      in.fail(*target.args[i], "can only unpack into names");
    scope.set(target.args[i]->name, items[i]);
  }
}

} // namespace

value interpreter::eval_for(const node& n, const env_ptr& env) {
  auto scope = std::make_shared<environment>(env);
  auto iterable = eval(*n.b, scope);
  array items;
  if (iterable.is_array()) {
    items = iterable.items(); // a copy: the body may change the list
  } else if (iterable.is(value::kind::object)) {
    for (auto& e : iterable.fields().entries)
      items.push_back(value::string(e.first));
  } else {
    fail(*n.b, std::string("cannot loop over a ") + iterable.type_name());
  }
  auto count_iteration = [&] {
    if (++iterations_ > limits_.max_loop_iterations)
      fail(n,
           "loops run more than " +
               std::to_string(limits_.max_loop_iterations) + " iterations",
           error_kind::limit);
  };
  if (n.c) {
    array kept;
    for (auto& item : items) {
      count_iteration();
      auto probe = std::make_shared<environment>(scope);
      bind_loop_target(*this, *n.a, item, *probe);
      if (eval(*n.c, probe).truthy())
        kept.push_back(item);
    }
    items = std::move(kept);
  }
  std::string out;
  bool no_iteration = true;
  auto len = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < len; ++i) {
    count_iteration();
    object loop;
    loop.entries.reserve(9);
    loop.set("index", value::integer(i + 1));
    loop.set("index0", value::integer(i));
    loop.set("revindex", value::integer(len - i));
    loop.set("revindex0", value::integer(len - i - 1));
    loop.set("first", value::boolean(i == 0));
    loop.set("last", value::boolean(i == len - 1));
    loop.set("length", value::integer(len));
    loop.set("previtem",
             i > 0 ? items[static_cast<std::size_t>(i - 1)] : value{});
    loop.set("nextitem",
             i < len - 1 ? items[static_cast<std::size_t>(i + 1)] : value{});
    scope->set("loop", value::make_object(std::move(loop)));
    bind_loop_target(*this, *n.a, items[static_cast<std::size_t>(i)], *scope);
    try {
      out += block(n.body, scope);
      check_size(n, out);
    } catch (const loop_continue&) {
      continue;
    } catch (const loop_break&) {
      break;
    }
    no_iteration = false;
  }
  if (no_iteration) {
    out += block(n.alternate, scope);
    check_size(n, out);
  }
  return value::string(std::move(out));
}

namespace {

/// Whether `name` is read anywhere in `nodes` (for kwargs / varargs).
bool mentions(const std::vector<node_ptr>& nodes, const std::string& name);

bool mentions(const node* n, const std::string& name) {
  if (n == nullptr)
    return false;
  if (n->kind == node_kind::identifier && n->name == name)
    return true;
  return mentions(n->a.get(), name) || mentions(n->b.get(), name) ||
         mentions(n->c.get(), name) || mentions(n->args, name) ||
         mentions(n->body, name) || mentions(n->alternate, name);
}

bool mentions(const std::vector<node_ptr>& nodes, const std::string& name) {
  for (auto& n : nodes)
    if (mentions(n.get(), name))
      return true;
  return false;
}

} // namespace

void interpreter::bind_parameters(const node& at, const std::string& display,
                                  const std::vector<node_ptr>& params,
                                  const std::vector<node_ptr>& body,
                                  call_args& args, const env_ptr& scope) {
  auto keywords = args.keyword;
  std::vector<const node*> pending;
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto& p = *params[i];
    const std::string& name = p.name;
    value v;
    bool given = false;
    if (i < args.positional.size()) {
      v = args.positional[i];
      given = true;
    } else {
      for (auto it = keywords.begin(); it != keywords.end(); ++it) {
        if (it->first == name) {
          v = it->second;
          given = true;
          keywords.erase(it);
          break;
        }
      }
    }
    if (!given && p.kind == node_kind::keyword_arg)
      pending.push_back(&p);
    scope->set(name, v);
  }
  if (mentions(body, "kwargs")) {
    object kw;
    for (auto& [k, v] : keywords)
      kw.set(k, v);
    scope->set("kwargs", value::make_object(std::move(kw)));
  } else if (!keywords.empty()) {
    fail(at, "macro " + display + " takes no keyword argument '" +
                 keywords.front().first + "'");
  }
  if (mentions(body, "varargs")) {
    array rest;
    for (std::size_t i = params.size(); i < args.positional.size(); ++i)
      rest.push_back(args.positional[i]);
    scope->set("varargs", value::make_array(std::move(rest)));
  } else if (args.positional.size() > params.size()) {
    fail(at, "macro " + display + " takes not more than " +
                 std::to_string(params.size()) + " argument(s)");
  }
  for (auto* p : pending)
    scope->set(p->name, eval(*p->a, scope));
}

value interpreter::eval_macro(const node& n, const env_ptr& env) {
  const node* def = &n;
  function fn;
  fn.name = n.name;
  fn.call = [def](interpreter& in, call_args& args,
                  const env_ptr& scope) -> value {
    call_guard guard{in};
    auto local = std::make_shared<environment>(scope);
    in.bind_parameters(in.current(), "'" + def->name + "'", def->args,
                       def->body, args, local);
    return value::string(in.block(def->body, local));
  };
  env->set(n.name, value::make_function(std::move(fn)));
  return value::none();
}

value interpreter::eval_call_block(const node& n, const env_ptr& env) {
  const node* def = &n;
  function caller;
  caller.name = "caller";
  caller.call = [def, env](interpreter& in, call_args& args,
                           const env_ptr&) -> value {
    call_guard guard{in};
    auto local = std::make_shared<environment>(env);
    in.bind_parameters(in.current(), "None", def->args, def->body, args, local);
    return value::string(in.block(def->body, local));
  };
  auto& call = *n.a;
  auto args = eval_args(call.args, env);
  auto fn = eval(*call.a, env);
  if (!fn.is(value::kind::function))
    fail(call, std::string("cannot call a ") + fn.type_name());
  auto scope = std::make_shared<environment>(env);
  scope->set("caller", value::make_function(std::move(caller)));
  return fn.fn().call(*this, args, scope);
}

call_args interpreter::eval_args(const std::vector<node_ptr>& args,
                                 const env_ptr& env) {
  call_args out;
  for (auto& a : args) {
    if (a->kind == node_kind::spread) {
      auto v = eval(*a->a, env);
      if (!v.is_array())
        fail(*a, std::string("cannot unpack a ") + v.type_name());
      for (auto& item : v.items())
        out.positional.push_back(item);
    } else if (a->kind != node_kind::keyword_arg &&
               a->kind != node_kind::keyword_spread) {
      out.positional.push_back(eval(*a, env));
    }
  }
  auto add = [&](const node& at, const std::string& key, value v) {
    if (out.find(key) != nullptr)
      fail(at, "keyword argument '" + key + "' given twice");
    out.keyword.emplace_back(key, std::move(v));
  };
  for (auto& a : args) {
    if (a->kind == node_kind::keyword_arg) {
      add(*a, a->name, eval(*a->a, env));
    } else if (a->kind == node_kind::keyword_spread) {
      auto v = eval(*a->a, env);
      if (!v.is(value::kind::object))
        fail(*a, std::string("argument after ** must be a mapping, not a ") +
                     v.type_name());
      for (auto& [k, item] : v.fields().entries)
        add(*a, k, item);
    }
  }
  return out;
}

value interpreter::eval_call(const node& n, const env_ptr& env) {
  auto args = eval_args(n.args, env);
  auto fn = eval(*n.a, env);
  if (!fn.is(value::kind::function)) {
    std::string what = n.a->kind == node_kind::identifier
                           ? "'" + n.a->name + "' is "
                           : std::string("the callee is ");
    fail(n, what +
                (fn.is_undefined() ? "undefined"
                                   : std::string("a ") + fn.type_name()) +
                ", not a function");
  }
  auto result = fn.fn().call(*this, args, env);
  if (result.is_string())
    check_size(n, result.as_string());
  return result;
}

value interpreter::eval_slice(const node& n, const value& object,
                              const env_ptr& env) {
  if (!object.is_array() && !object.is_string())
    fail(n, std::string("cannot slice a ") + object.type_name());
  auto part = [&](const node_ptr& p, const char* what) -> value {
    if (!p)
      return value{};
    auto v = eval(*p, env);
    if (!v.is(value::kind::integer) && !v.is_undefined())
      fail(*p, std::string("slice ") + what + " must be an integer");
    return v;
  };
  auto start_v = part(n.a, "start");
  auto stop_v = part(n.b, "stop");
  auto step_v = part(n.c, "step");
  int64_t step = step_v.is_undefined() ? 1 : step_v.as_int();
  if (step == 0)
    fail(n, "slice step must not be zero");
  std::vector<std::string_view> points;
  if (object.is_string())
    points = unicode::code_points(object.as_string());
  auto len = static_cast<int64_t>(object.is_string() ? points.size()
                                                     : object.items().size());
  int64_t start = 0;
  int64_t stop = 0;
  if (step > 0) {
    start = start_v.is_undefined() ? 0 : start_v.as_int();
    start =
        start < 0 ? std::max<int64_t>(len + start, 0) : std::min(start, len);
    stop = stop_v.is_undefined() ? len : stop_v.as_int();
    stop = stop < 0 ? std::max<int64_t>(len + stop, 0) : std::min(stop, len);
  } else {
    start = start_v.is_undefined() ? len - 1 : start_v.as_int();
    start = start < 0 ? std::max<int64_t>(len + start, -1)
                      : std::min(start, len - 1);
    stop = stop_v.is_undefined() ? -1 : stop_v.as_int();
    stop =
        stop < -1 ? std::max<int64_t>(len + stop, -1) : std::min(stop, len - 1);
  }
  int64_t dir = step > 0 ? 1 : -1;
  if (object.is_string()) {
    std::string out;
    for (int64_t i = start; dir * i < dir * stop; i += step)
      out += points[static_cast<std::size_t>(i)];
    return value::string(std::move(out));
  }
  array out;
  for (int64_t i = start; dir * i < dir * stop; i += step)
    out.push_back(object.items()[static_cast<std::size_t>(i)]);
  return value::make_array(std::move(out));
}

value interpreter::eval_member(const node& n, const env_ptr& env) {
  auto object = eval(*n.a, env);
  value property;
  if (n.flag) {
    if (n.b->kind == node_kind::slice)
      return eval_slice(*n.b, object, env);
    property = eval(*n.b, env);
  } else if (n.b->kind == node_kind::integer) {
    property = value::integer(n.b->int_value);
  } else {
    property = value::string(n.b->name);
  }
  if (object.is_mapping_like()) {
    if (!property.is_string())
      fail(n, std::string("cannot look up a ") + property.type_name() +
                  " key in a " + object.type_name());
    if (auto* v = object.fields().find(property.as_string()))
      return *v;
    if (object.is(value::kind::object))
      return builtins::object_member(object, property.as_string());
    return value{};
  }
  if (object.is_array() || object.is_string()) {
    if (property.is(value::kind::integer)) {
      auto i = property.as_int();
      if (object.is_string())
        return builtins::string_at(object.as_string(), i);
      auto len = static_cast<int64_t>(object.items().size());
      if (i < 0)
        i += len;
      if (i < 0 || i >= len)
        return value{};
      return object.items()[static_cast<std::size_t>(i)];
    }
    if (property.is_string()) {
      if (object.is_string())
        return builtins::string_member(object, property.as_string());
      if (property.as_string() == "length")
        return value::integer(static_cast<int64_t>(object.items().size()));
      return value{};
    }
    fail(n, std::string("cannot index a ") + object.type_name() + " with a " +
                property.type_name());
  }
  if (!property.is_string())
    fail(n, std::string("cannot index a ") + object.type_name() + " with a " +
                property.type_name());
  return value{};
}

value interpreter::eval_unary(const node& n, const env_ptr& env) {
  auto v = eval(*n.a, env);
  if (n.name == "not")
    return value::boolean(!v.truthy());
  int64_t sign = n.name == "-" ? -1 : 1;
  if (v.is(value::kind::floating))
    return value::floating(static_cast<double>(sign) * v.as_double());
  if (v.is(value::kind::integer)) {
    if (v.as_int() == INT64_MIN && sign < 0)
      fail(n, "integer overflow");
    return value::integer(sign * v.as_int());
  }
  if (v.is(value::kind::boolean))
    return value::integer(sign * (v.as_bool() ? 1 : 0));
  fail(n, "unary '" + n.name + "' needs a number, got a " + v.type_name());
}

namespace {

bool numeric_like(const value& v) {
  return v.is_number() || v.is(value::kind::boolean);
}

double numeric(const value& v) {
  return v.is(value::kind::boolean) ? (v.as_bool() ? 1.0 : 0.0) : v.as_double();
}

} // namespace

value interpreter::eval_binary(const node& n, const env_ptr& env) {
  auto& op = n.name;
  auto left = eval(*n.a, env);
  if (op == "and")
    return left.truthy() ? eval(*n.b, env) : left;
  if (op == "or")
    return left.truthy() ? left : eval(*n.b, env);
  auto right = eval(*n.b, env);
  if (op == "==")
    return value::boolean(loose_equal(left, right));
  if (op == "!=")
    return value::boolean(!loose_equal(left, right));
  bool membership = op == "in" || op == "not in";
  if (left.is_undefined() || right.is_undefined()) {
    if (right.is_undefined() && membership)
      return value::boolean(op == "not in");
    fail(n, "cannot apply '" + op + "' to an undefined value");
  }
  if (left.is_none() || right.is_none())
    fail(n, "cannot apply '" + op + "' to none");
  if (op == "~") {
    auto s = to_concat(left) + to_concat(right);
    check_size(n, s);
    return value::string(std::move(s));
  }
  if (op == "**" && numeric_like(left) && numeric_like(right)) {
    double a = numeric(left);
    double b = numeric(right);
    if (a == 0 && b < 0)
      fail(n, "0.0 cannot be raised to a negative power");
    double r = std::pow(a, b);
    if (!std::isfinite(r))
      fail(n, "the power is not a finite real number");
    if (left.is(value::kind::floating) || right.is(value::kind::floating) ||
        b < 0)
      return value::floating(r);
    if (std::fabs(r) >= 9.2e18)
      fail(n, "integer overflow");
    return value::integer(static_cast<int64_t>(r));
  }
  if (left.is_number() && right.is_number()) {
    bool is_float =
        left.is(value::kind::floating) || right.is(value::kind::floating);
    double a = left.as_double();
    double b = right.as_double();
    if (op == "+" || op == "-" || op == "*") {
      if (is_float)
        return value::floating(op == "+" ? a + b : op == "-" ? a - b : a * b);
      int64_t r = 0;
      int64_t x = left.as_int();
      int64_t y = right.as_int();
      bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                      : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                  : __builtin_mul_overflow(x, y, &r);
      if (overflow)
        fail(n, "integer overflow");
      return value::integer(r);
    }
    if (op == "/")
      return value::floating(a / b);
    if (op == "//" || op == "%") {
      if (!is_float) {
        int64_t x = left.as_int();
        int64_t y = right.as_int();
        if (y == 0)
          fail(n, "integer division by zero");
        if (x == INT64_MIN && y == -1)
          fail(n, "integer overflow");
        if (op == "%")
          return value::integer(x % y);
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0)))
          --q;
        return value::integer(q);
      }
      return value::floating(op == "%" ? std::fmod(a, b) : std::floor(a / b));
    }
    if (op == "<")
      return value::boolean(a < b);
    if (op == ">")
      return value::boolean(a > b);
    if (op == "<=")
      return value::boolean(a <= b);
    if (op == ">=")
      return value::boolean(a >= b);
  } else if (left.is_array() && right.is_array()) {
    if (op == "+") {
      check_items(n, left.items().size() + right.items().size());
      array out = left.items();
      out.insert(out.end(), right.items().begin(), right.items().end());
      return value::make_array(std::move(out));
    }
  } else if (right.is_array() && membership) {
    bool found = false;
    for (auto& item : right.items())
      if (strict_equal(item, left)) {
        found = true;
        break;
      }
    return value::boolean(found == (op == "in"));
  }
  if ((left.is_string() || right.is_string()) && op == "+") {
    auto s = to_concat(left) + to_concat(right);
    check_size(n, s);
    return value::string(std::move(s));
  }
  if (left.is_string() && right.is_string()) {
    auto& a = left.as_string();
    auto& b = right.as_string();
    if (membership)
      return value::boolean((b.find(a) != std::string::npos) == (op == "in"));
    if (op == "<")
      return value::boolean(a < b);
    if (op == ">")
      return value::boolean(a > b);
    if (op == "<=")
      return value::boolean(a <= b);
    if (op == ">=")
      return value::boolean(a >= b);
  }
  if (left.is_string() && right.is(value::kind::object) && membership) {
    bool has = right.fields().find(left.as_string()) != nullptr;
    return value::boolean(has == (op == "in"));
  }
  fail(n, "unsupported operator '" + op + "' between a " + left.type_name() +
              " and a " + right.type_name());
}

value interpreter::eval_test(const node& n, const env_ptr& env) {
  auto operand = eval(*n.a, env);
  if (!builtins::has_test(n.name))
    fail(n, "unknown test '" + n.name + "'");
  bool r = builtins::run_test(*this, n.name, operand);
  return value::boolean(n.flag ? !r : r);
}

} // namespace exo::chat
