#pragma once

/// The chat-template evaluator: walks the syntax tree with the reference
/// renderer's (@huggingface/jinja) semantics and enforces resource limits,
/// so that a hostile template ends in a template_error, never a hang or
/// unbounded memory.

#include "core/chat/ast.hpp"
#include "core/chat/error.hpp"
#include "core/chat/value.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace exo::chat {

/// Resource limits of one render.
struct limits {
  /// Most bytes of output, and of any one string computed on the way.
  std::size_t max_output_bytes = std::size_t{16} << 20;
  /// Most elements of any one list (range(), +, split...).
  std::size_t max_items = 100'000;
  /// Most loop iterations over the whole render.
  std::uint64_t max_loop_iterations = 1'000'000;
  /// Most nested macro calls.
  std::size_t max_call_depth = 64;
  /// Most nested evaluations (expressions within macros within loops...).
  std::size_t max_eval_depth = 512;
  /// Most evaluation steps over the whole render.
  std::uint64_t max_steps = 20'000'000;
};

/// A variable scope; loops, macros and call blocks open child scopes.
struct environment {
  std::unordered_map<std::string, value> vars;
  std::shared_ptr<environment> parent;

  explicit environment(std::shared_ptr<environment> up = nullptr)
      : parent(std::move(up)) {
    // nop
  }

  /// The variable `name` from this scope or the nearest enclosing one;
  /// undefined when no scope has it.
  value lookup(const std::string& name) const;

  /// Sets `name` in this scope.
  void set(const std::string& name, value v) { vars[name] = std::move(v); }
};

using env_ptr = std::shared_ptr<environment>;

class interpreter {
 public:
  interpreter(std::string_view source, const limits& lim);

  /// A global scope with the built-in names (true, false, none, namespace,
  /// range, raise_exception, strftime_now and their title-case aliases).
  env_ptr make_globals();

  /// Renders a parsed template in `globals`.
  std::string render(const std::vector<node_ptr>& program,
                     const env_ptr& globals);

  // -- used by built-in functions --------------------------------------------

  value eval(const node& n, const env_ptr& env);
  std::string block(const std::vector<node_ptr>& body, const env_ptr& env);

  /// Throws template_error of `kind` positioned at `n`.
  [[noreturn]] void fail(const node& n, const std::string& what,
                         error_kind kind = error_kind::render) const;

  /// Throws a limit error at `n` when `s` is longer than the output limit.
  void check_size(const node& n, const std::string& s) const;

  /// Throws a limit error at `n` when `count` exceeds the list limit.
  void check_items(const node& n, std::size_t count) const;

  /// to_json (or, with `output`, to_output) within the output limit; its
  /// failures become template_errors at `n`.
  std::string json_text(const node& n, const value& v, json_options opts,
                        bool output = false) const;

  /// The node being evaluated (for positions in built-in errors).
  const node& current() const { return *current_; }

  const limits& limit() const { return limits_; }

  /// Counts one call level; throws when the depth limit is passed.
  struct call_guard {
    interpreter& self;
    explicit call_guard(interpreter& in);
    ~call_guard();
  };

 private:
  value eval_node(const node& n, const env_ptr& env);
  value eval_set(const node& n, const env_ptr& env);
  value eval_for(const node& n, const env_ptr& env);
  value eval_macro(const node& n, const env_ptr& env);
  value eval_call_block(const node& n, const env_ptr& env);
  value eval_member(const node& n, const env_ptr& env);
  value eval_slice(const node& n, const value& object, const env_ptr& env);
  value eval_call(const node& n, const env_ptr& env);
  value eval_unary(const node& n, const env_ptr& env);
  value eval_binary(const node& n, const env_ptr& env);
  value eval_test(const node& n, const env_ptr& env);
  value apply_filter(const node& at, const value& operand, const node& filter,
                     const env_ptr& env);
  call_args eval_args(const std::vector<node_ptr>& args, const env_ptr& env);
  void bind_parameters(const node& at, const std::string& display,
                       const std::vector<node_ptr>& params,
                       const std::vector<node_ptr>& body, call_args& args,
                       const env_ptr& scope);

  std::string_view source_;
  limits limits_;
  const node* current_ = nullptr;
  std::size_t depth_ = 0;
  std::size_t call_depth_ = 0;
  std::uint64_t steps_ = 0;
  std::uint64_t iterations_ = 0;
};

} // namespace exo::chat
