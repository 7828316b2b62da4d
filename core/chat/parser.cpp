#include "core/chat/parser.hpp"

#include "core/chat/error.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <utility>

namespace exo::chat {

namespace {

class parser {
 public:
  parser(std::string_view source, const std::vector<token>& tokens)
      : source_(source), tokens_(tokens) {
    // nop
  }

  std::vector<node_ptr> run() {
    std::vector<node_ptr> out;
    while (pos_ < tokens_.size())
      out.push_back(parse_any());
    return out;
  }

 private:
  /// Bounds the recursion of nested expressions and blocks.
  struct depth_guard {
    parser& p;
    explicit depth_guard(parser& self) : p(self) {
      if (++p.depth_ > max_parse_depth)
        p.fail("template nests deeper than " + std::to_string(max_parse_depth) +
                   " levels",
               p.here());
    }
    ~depth_guard() { --p.depth_; }
  };

  [[noreturn]] void fail(const std::string& what, std::size_t offset) const {
    auto p = locate(source_, offset);
    throw template_error(error_kind::syntax, what, p.line, p.column);
  }

  std::size_t here() const {
    if (pos_ < tokens_.size())
      return tokens_[pos_].offset;
    return source_.size();
  }

  std::string describe_current() const {
    if (pos_ >= tokens_.size())
      return "the end of the template";
    auto& t = tokens_[pos_];
    switch (t.kind) {
    case token_kind::identifier:
      return "'" + t.text + "'";
    case token_kind::number:
      return "number " + t.text;
    case token_kind::string:
      return "a string literal";
    case token_kind::text:
      return "text";
    default:
      return to_string(t.kind);
    }
  }

  bool is(token_kind k, std::size_t ahead = 0) const {
    return pos_ + ahead < tokens_.size() && tokens_[pos_ + ahead].kind == k;
  }

  bool is_identifier(const char* name, std::size_t ahead = 0) const {
    return is(token_kind::identifier, ahead) &&
           tokens_[pos_ + ahead].text == name;
  }

  bool is_statement(std::initializer_list<const char*> names) const {
    if (!is(token_kind::open_statement) || !is(token_kind::identifier, 1))
      return false;
    auto& word = tokens_[pos_ + 1].text;
    return std::any_of(names.begin(), names.end(),
                       [&](const char* n) { return word == n; });
  }

  const token& expect(token_kind k, const char* what) {
    if (!is(k))
      fail(std::string("expected ") + what + " but found " + describe_current(),
           here());
    return tokens_[pos_++];
  }

  void expect_identifier(const char* name) {
    if (!is_identifier(name))
      fail(std::string("expected '") + name + "' but found " +
               describe_current(),
           here());
    ++pos_;
  }

  /// Parses statements until one of `names` opens; fails at the end of the
  /// template naming the block that was left open.
  void parse_until(std::vector<node_ptr>& out,
                   std::initializer_list<const char*> names, const char* block,
                   std::size_t opened_at) {
    while (!is_statement(names)) {
      if (pos_ >= tokens_.size()) {
        auto p = locate(source_, opened_at);
        fail(std::string("unexpected end of template: '{% ") + block +
                 " %}' opened at line " + std::to_string(p.line) + " column " +
                 std::to_string(p.column) + " is never closed",
             source_.size());
      }
      out.push_back(parse_any());
    }
  }

  void expect_end(const char* word) {
    expect(token_kind::open_statement, "'{%'");
    expect_identifier(word);
    expect(token_kind::close_statement, "'%}'");
  }

  node_ptr make(node_kind k, std::size_t at) {
    return std::make_unique<node>(k, at);
  }

  node_ptr parse_any() {
    depth_guard guard{*this};
    auto& t = tokens_[pos_];
    switch (t.kind) {
    case token_kind::comment: {
      ++pos_;
      return make(node_kind::comment, t.offset);
    }
    case token_kind::text: {
      ++pos_;
      auto n = make(node_kind::text, t.offset);
      n->name = t.text;
      return n;
    }
    case token_kind::open_statement:
      return parse_statement();
    case token_kind::open_expression: {
      ++pos_;
      auto e = parse_expression();
      expect(token_kind::close_expression, "'}}'");
      return e;
    }
    default:
      fail("unexpected " + describe_current() + " outside a tag", here());
    }
  }

  node_ptr parse_statement() {
    auto open_at = tokens_[pos_].offset;
    ++pos_; // {%
    if (!is(token_kind::identifier))
      fail("expected a statement name after '{%' but found " +
               describe_current(),
           here());
    auto word = tokens_[pos_].text;
    ++pos_;
    if (word == "set")
      return parse_set(open_at);
    if (word == "if") {
      auto n = parse_if(open_at);
      expect_end("endif");
      return n;
    }
    if (word == "for") {
      auto n = parse_for(open_at);
      expect_end("endfor");
      return n;
    }
    if (word == "macro") {
      auto n = make(node_kind::macro, open_at);
      auto name = parse_primary();
      if (name->kind != node_kind::identifier)
        fail("expected a macro name", name->offset);
      n->name = name->name;
      parse_args(n->args, true);
      expect(token_kind::close_statement, "'%}'");
      parse_until(n->body, {"endmacro"}, "macro", open_at);
      expect_end("endmacro");
      return n;
    }
    if (word == "call") {
      auto n = make(node_kind::call_block, open_at);
      if (is(token_kind::open_paren))
        parse_args(n->args, true);
      auto callee = parse_primary();
      if (callee->kind != node_kind::identifier)
        fail("expected a macro name after 'call'", callee->offset);
      auto call = make(node_kind::call, callee->offset);
      call->a = std::move(callee);
      parse_args(call->args, false);
      n->a = std::move(call);
      expect(token_kind::close_statement, "'%}'");
      parse_until(n->body, {"endcall"}, "call", open_at);
      expect_end("endcall");
      return n;
    }
    if (word == "filter") {
      auto n = make(node_kind::filter_block, open_at);
      auto f = parse_primary();
      if (f->kind != node_kind::identifier)
        fail("expected a filter name", f->offset);
      if (is(token_kind::open_paren))
        f = parse_call(std::move(f));
      n->a = std::move(f);
      expect(token_kind::close_statement, "'%}'");
      parse_until(n->body, {"endfilter"}, "filter", open_at);
      expect_end("endfilter");
      return n;
    }
    if (word == "break" || word == "continue") {
      expect(token_kind::close_statement, "'%}'");
      return make(word == "break" ? node_kind::break_ : node_kind::continue_,
                  open_at);
    }
    fail("unknown statement '" + word + "'", tokens_[pos_ - 1].offset);
  }

  node_ptr parse_set(std::size_t open_at) {
    auto n = make(node_kind::set, open_at);
    n->a = parse_sequence(false);
    if (is(token_kind::equals)) {
      ++pos_;
      n->b = parse_sequence(false);
    } else {
      expect(token_kind::close_statement, "'=' or '%}'");
      parse_until(n->body, {"endset"}, "set", open_at);
      expect(token_kind::open_statement, "'{%'");
      expect_identifier("endset");
    }
    expect(token_kind::close_statement, "'%}'");
    return n;
  }

  node_ptr parse_if(std::size_t open_at) {
    depth_guard guard{*this};
    auto n = make(node_kind::if_, open_at);
    n->a = parse_expression();
    expect(token_kind::close_statement, "'%}'");
    parse_until(n->body, {"elif", "else", "endif"}, "if", open_at);
    if (is_statement({"elif"})) {
      auto at = tokens_[pos_].offset;
      pos_ += 2;
      n->alternate.push_back(parse_if(at));
    } else if (is_statement({"else"})) {
      pos_ += 2;
      expect(token_kind::close_statement, "'%}'");
      parse_until(n->alternate, {"endif"}, "if", open_at);
    }
    return n;
  }

  node_ptr parse_for(std::size_t open_at) {
    auto n = make(node_kind::for_, open_at);
    n->a = parse_sequence(true);
    if (n->a->kind != node_kind::identifier && n->a->kind != node_kind::tuple)
      fail("expected a loop variable (a name or names) after 'for'",
           n->a->offset);
    if (!is_identifier("in"))
      fail("expected 'in' after the loop variable but found " +
               describe_current(),
           here());
    ++pos_;
    auto iterable = parse_expression();
    if (iterable->kind == node_kind::select) {
      n->b = std::move(iterable->a);
      n->c = std::move(iterable->b);
    } else {
      n->b = std::move(iterable);
    }
    expect(token_kind::close_statement, "'%}'");
    parse_until(n->body, {"endfor", "else"}, "for", open_at);
    if (is_statement({"else"})) {
      pos_ += 2;
      expect(token_kind::close_statement, "'%}'");
      parse_until(n->alternate, {"endfor"}, "for", open_at);
    }
    return n;
  }

  /// `a, b, c` as a tuple, or a single expression.
  node_ptr parse_sequence(bool primary) {
    auto at = here();
    auto first = primary ? parse_primary() : parse_expression();
    if (!is(token_kind::comma))
      return first;
    auto tuple = make(node_kind::tuple, at);
    tuple->args.push_back(std::move(first));
    while (is(token_kind::comma)) {
      ++pos_;
      tuple->args.push_back(primary ? parse_primary() : parse_expression());
    }
    return tuple;
  }

  node_ptr parse_expression() {
    depth_guard guard{*this};
    auto value = parse_or();
    if (!is_identifier("if"))
      return value;
    auto at = here();
    ++pos_;
    auto test = parse_or();
    if (is_identifier("else")) {
      ++pos_;
      auto n = make(node_kind::ternary, at);
      n->a = std::move(test);
      n->b = std::move(value);
      n->c = parse_expression();
      return n;
    }
    auto n = make(node_kind::select, at);
    n->a = std::move(value);
    n->b = std::move(test);
    return n;
  }

  node_ptr binary(std::string op, node_ptr left, node_ptr right,
                  std::size_t at) {
    auto n = make(node_kind::binary, at);
    n->name = std::move(op);
    n->a = std::move(left);
    n->b = std::move(right);
    return n;
  }

  node_ptr parse_or() {
    auto left = parse_and();
    while (is_identifier("or")) {
      auto at = here();
      ++pos_;
      left = binary("or", std::move(left), parse_and(), at);
    }
    return left;
  }

  node_ptr parse_and() {
    auto left = parse_not();
    while (is_identifier("and")) {
      auto at = here();
      ++pos_;
      left = binary("and", std::move(left), parse_not(), at);
    }
    return left;
  }

  node_ptr parse_not() {
    if (is_identifier("not")) {
      depth_guard guard{*this};
      auto n = make(node_kind::unary, here());
      ++pos_;
      n->name = "not";
      n->a = parse_not();
      return n;
    }
    return parse_comparison();
  }

  node_ptr parse_comparison() {
    auto left = parse_additive();
    while (true) {
      auto at = here();
      std::string op;
      if (is_identifier("not") && is_identifier("in", 1)) {
        op = "not in";
        pos_ += 2;
      } else if (is_identifier("in")) {
        op = "in";
        ++pos_;
      } else if (is(token_kind::comparison)) {
        op = tokens_[pos_++].text;
      } else {
        break;
      }
      left = binary(op, std::move(left), parse_additive(), at);
    }
    return left;
  }

  node_ptr parse_additive() {
    auto left = parse_multiplicative();
    while (is(token_kind::additive)) {
      auto at = here();
      auto op = tokens_[pos_++].text;
      left = binary(op, std::move(left), parse_multiplicative(), at);
    }
    return left;
  }

  node_ptr parse_multiplicative() {
    auto left = parse_power();
    while (is(token_kind::multiplicative)) {
      auto at = here();
      auto op = tokens_[pos_++].text;
      left = binary(op, std::move(left), parse_power(), at);
    }
    return left;
  }

  node_ptr parse_power() {
    auto left = parse_test();
    while (is(token_kind::exponent)) {
      auto at = here();
      ++pos_;
      left = binary("**", std::move(left), parse_test(), at);
    }
    return left;
  }

  node_ptr parse_test() {
    auto operand = parse_filter();
    while (is_identifier("is")) {
      auto n = make(node_kind::test, here());
      ++pos_;
      if (is_identifier("not")) {
        n->flag = true;
        ++pos_;
      }
      auto name = parse_primary();
      if (name->kind != node_kind::identifier)
        fail("expected a test name after 'is'", name->offset);
      n->name = name->name;
      n->a = std::move(operand);
      operand = std::move(n);
    }
    return operand;
  }

  node_ptr parse_filter() {
    auto operand = parse_unary_sign();
    while (is(token_kind::pipe)) {
      auto n = make(node_kind::filter, here());
      ++pos_;
      auto f = parse_primary();
      if (f->kind != node_kind::identifier)
        fail("expected a filter name after '|'", f->offset);
      if (is(token_kind::open_paren))
        f = parse_call(std::move(f));
      n->a = std::move(operand);
      n->b = std::move(f);
      operand = std::move(n);
    }
    return operand;
  }

  node_ptr parse_unary_sign() {
    if ((is(token_kind::unary) || is(token_kind::additive)) &&
        (tokens_[pos_].text == "-" || tokens_[pos_].text == "+")) {
      depth_guard guard{*this};
      auto n = make(node_kind::unary, here());
      n->name = tokens_[pos_++].text;
      n->a = parse_unary_sign();
      return n;
    }
    auto member = parse_member(parse_primary());
    if (is(token_kind::open_paren))
      return parse_call(std::move(member));
    return member;
  }

  node_ptr parse_call(node_ptr callee) {
    depth_guard guard{*this};
    auto n = make(node_kind::call, callee->offset);
    n->a = std::move(callee);
    parse_args(n->args, false);
    node_ptr expr = parse_member(std::move(n));
    if (is(token_kind::open_paren))
      expr = parse_call(std::move(expr));
    return expr;
  }

  void parse_args(std::vector<node_ptr>& out, bool parameters) {
    expect(token_kind::open_paren, "'('");
    bool saw_keyword = false;
    while (!is(token_kind::close_paren)) {
      if (pos_ >= tokens_.size())
        fail("unexpected end of template in an argument list", here());
      auto at = here();
      bool kw_spread = is(token_kind::exponent);
      bool spread = is(token_kind::multiplicative) && tokens_[pos_].text == "*";
      if (parameters && (kw_spread || spread))
        fail("argument unpacking is not allowed in parameters", at);
      if (kw_spread || spread) {
        ++pos_;
        auto n =
            make(kw_spread ? node_kind::keyword_spread : node_kind::spread, at);
        n->a = parse_expression();
        out.push_back(std::move(n));
      } else {
        auto arg = parse_expression();
        if (is(token_kind::equals)) {
          ++pos_;
          if (arg->kind != node_kind::identifier)
            fail("expected a name before '='", arg->offset);
          auto kw = make(node_kind::keyword_arg, arg->offset);
          kw->name = arg->name;
          kw->a = parse_expression();
          arg = std::move(kw);
          saw_keyword = true;
        } else if (saw_keyword) {
          fail(parameters ? "a parameter without default follows one with"
                          : "a positional argument follows a keyword argument",
               arg->offset);
        }
        if (parameters && arg->kind != node_kind::identifier &&
            arg->kind != node_kind::keyword_arg)
          fail("expected a parameter name", arg->offset);
        out.push_back(std::move(arg));
      }
      if (is(token_kind::comma))
        ++pos_;
      else if (!is(token_kind::close_paren))
        fail("expected ',' or ')' in an argument list but found " +
                 describe_current(),
             here());
    }
    ++pos_; // )
  }

  node_ptr parse_member(node_ptr object) {
    while (is(token_kind::dot) || is(token_kind::open_square)) {
      depth_guard guard{*this};
      auto n = make(node_kind::member, here());
      bool computed = is(token_kind::open_square);
      ++pos_;
      n->flag = computed;
      n->a = std::move(object);
      if (computed) {
        n->b = parse_subscript();
        expect(token_kind::close_square, "']'");
      } else {
        auto property = parse_primary();
        if (property->kind != node_kind::identifier &&
            property->kind != node_kind::integer)
          fail("expected a name or an integer after '.'", property->offset);
        n->b = std::move(property);
      }
      object = std::move(n);
    }
    return object;
  }

  /// `[x]` or a slice `[a:b:c]` with any part left out.
  node_ptr parse_subscript() {
    auto at = here();
    std::vector<node_ptr> parts;
    bool is_slice = false;
    while (!is(token_kind::close_square)) {
      if (pos_ >= tokens_.size())
        fail("unexpected end of template in '[...]'", here());
      if (is(token_kind::colon)) {
        parts.push_back(nullptr);
        ++pos_;
        is_slice = true;
      } else {
        parts.push_back(parse_expression());
        if (is(token_kind::colon)) {
          ++pos_;
          is_slice = true;
        } else if (!is(token_kind::close_square)) {
          fail("expected ':' or ']' but found " + describe_current(), here());
        }
      }
    }
    if (parts.empty())
      fail("expected an index or slice inside '[]'", at);
    if (!is_slice)
      return std::move(parts[0]);
    if (parts.size() > 3)
      fail("a slice has at most three parts", at);
    auto n = make(node_kind::slice, at);
    n->a = parts.size() > 0 ? std::move(parts[0]) : nullptr;
    n->b = parts.size() > 1 ? std::move(parts[1]) : nullptr;
    n->c = parts.size() > 2 ? std::move(parts[2]) : nullptr;
    return n;
  }

  node_ptr parse_number(const token& t) {
    bool is_float = t.text.find('.') != std::string::npos;
    if (is_float) {
      auto n = make(node_kind::floating, t.offset);
      n->float_value = std::strtod(t.text.c_str(), nullptr);
      return n;
    }
    errno = 0;
    auto v = std::strtoll(t.text.c_str(), nullptr, 10);
    if (errno == ERANGE)
      fail("integer literal " + t.text + " is too large", t.offset);
    auto n = make(node_kind::integer, t.offset);
    n->int_value = v;
    return n;
  }

  node_ptr parse_primary() {
    depth_guard guard{*this};
    if (pos_ >= tokens_.size())
      fail("unexpected end of template in an expression", here());
    auto& t = tokens_[pos_++];
    switch (t.kind) {
    case token_kind::number:
      return parse_number(t);
    case token_kind::string: {
      auto n = make(node_kind::string, t.offset);
      n->name = t.text;
      while (is(token_kind::string))
        n->name += tokens_[pos_++].text;
      return n;
    }
    case token_kind::identifier: {
      auto n = make(node_kind::identifier, t.offset);
      n->name = t.text;
      return n;
    }
    case token_kind::open_paren: {
      auto e = parse_sequence(false);
      expect(token_kind::close_paren, "')'");
      return e;
    }
    case token_kind::open_square: {
      auto n = make(node_kind::array, t.offset);
      while (!is(token_kind::close_square)) {
        if (pos_ >= tokens_.size())
          fail("unexpected end of template in a list", here());
        n->args.push_back(parse_expression());
        if (is(token_kind::comma))
          ++pos_;
        else if (!is(token_kind::close_square))
          fail("expected ',' or ']' in a list but found " + describe_current(),
               here());
      }
      ++pos_;
      return n;
    }
    case token_kind::open_curly: {
      auto n = make(node_kind::object, t.offset);
      while (!is(token_kind::close_curly)) {
        if (pos_ >= tokens_.size())
          fail("unexpected end of template in a mapping", here());
        n->args.push_back(parse_expression());
        expect(token_kind::colon, "':' in a mapping");
        n->args.push_back(parse_expression());
        if (is(token_kind::comma))
          ++pos_;
        else if (!is(token_kind::close_curly))
          fail("expected ',' or '}' in a mapping but found " +
                   describe_current(),
               here());
      }
      ++pos_;
      return n;
    }
    default:
      --pos_;
      fail("unexpected " + describe_current() + " in an expression", here());
    }
  }

  std::string_view source_;
  const std::vector<token>& tokens_;
  std::size_t pos_ = 0;
  std::size_t depth_ = 0;
};

} // namespace

std::vector<node_ptr> parse(std::string_view source,
                            const std::vector<token>& tokens) {
  parser p{source, tokens};
  return p.run();
}

} // namespace exo::chat
