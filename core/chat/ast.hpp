#pragma once

/// The syntax tree of a chat template. One node type with a kind tag keeps
/// the evaluator a single switch; which fields a kind uses is listed below.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace exo::chat {

enum class node_kind {
  // Statements.
  text,         ///< name: the text
  comment,      ///< (ignored)
  set,          ///< a: target, b: value (or null), body: block set
  if_,          ///< a: test, body, alternate
  for_,         ///< a: target, b: iterable, c: filter test (or null),
                ///< body, alternate (else)
  macro,        ///< name, args: parameters, body
  call_block,   ///< a: call expression, args: caller parameters, body
  filter_block, ///< a: filter (identifier or call), body
  break_,
  continue_,
  // Expressions.
  integer,        ///< int_value
  floating,       ///< float_value
  string,         ///< name: the value
  array,          ///< args: elements
  tuple,          ///< args: elements
  object,         ///< args: key, value, key, value...
  identifier,     ///< name
  member,         ///< a: object, b: property, flag: computed ([...])
  slice,          ///< a: start, b: stop, c: step (each may be null)
  call,           ///< a: callee, args
  keyword_arg,    ///< name, a: value
  spread,         ///< a: value (*x)
  keyword_spread, ///< a: value (**x)
  unary,          ///< name: operator ("not", "-", "+"), a: operand
  binary,         ///< name: operator, a: left, b: right
  filter,         ///< a: operand, b: filter (identifier or call)
  test,           ///< a: operand, name: test, flag: negated
  select,         ///< a: value, b: condition (`x if c` without else)
  ternary,        ///< a: condition, b: if true, c: if false
};

struct node;
using node_ptr = std::unique_ptr<node>;

struct node {
  node_kind kind;
  std::size_t offset = 0; ///< byte offset in the original source
  std::string name;
  int64_t int_value = 0;
  double float_value = 0;
  bool flag = false;
  node_ptr a;
  node_ptr b;
  node_ptr c;
  std::vector<node_ptr> args;
  std::vector<node_ptr> body;
  std::vector<node_ptr> alternate;

  node(node_kind k, std::size_t at) : kind(k), offset(at) {
    // nop
  }
};

} // namespace exo::chat
