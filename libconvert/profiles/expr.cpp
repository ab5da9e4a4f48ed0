#include "profiles/expr.h"

#include <cctype>

namespace ckpt {

const int64_t* ExprEnv::find(std::string_view name) const {
  auto it = vars_.find(name);
  return it == vars_.end() ? nullptr : &it->second;
}

namespace {

// Nesting bound (parentheses and unary operators together): keeps a hostile profile
// ("((((..." or "!!!!...") from exhausting the stack.
constexpr int kMaxDepth = 100;

// Recursive-descent parser that evaluates while it parses. `live` is false inside
// the skipped side of && / ||: that side is parsed for syntax, but its arithmetic
// errors (a division by zero guarded by the condition) do not count.
class Evaluator {
 public:
  Evaluator(std::string_view text, const ExprEnv& env) : text_(text), env_(env) {}

  bool run(int64_t& value, std::string& error) {
    value = parse_or(true);
    skip_space();
    if (!failed_ && pos_ != text_.size()) fail("unexpected '" + std::string(1, text_[pos_]) + "'");
    if (failed_) {
      error = message_ + " at offset " + std::to_string(fail_pos_) + " in '" + std::string(text_) + "'";
      return false;
    }
    return true;
  }

 private:
  void fail(const std::string& why) {
    if (failed_) return;
    failed_ = true;
    fail_pos_ = pos_;
    message_ = why;
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  // Consumes `op` when the input continues with it.
  bool accept(std::string_view op) {
    skip_space();
    if (text_.substr(pos_, op.size()) != op) return false;
    pos_ += op.size();
    return true;
  }

  int64_t parse_or(bool live) {
    int64_t v = parse_and(live);
    while (!failed_ && accept("||")) {
      bool rhs_live = live && v == 0;
      int64_t r = parse_and(rhs_live);
      v = (v != 0 || r != 0) ? 1 : 0;  // a skipped side only happens when v is already 1
    }
    return v;
  }

  int64_t parse_and(bool live) {
    int64_t v = parse_equality(live);
    while (!failed_ && accept("&&")) {
      bool rhs_live = live && v != 0;
      int64_t r = parse_equality(rhs_live);
      v = (v != 0 && r != 0) ? 1 : 0;
    }
    return v;
  }

  int64_t parse_equality(bool live) {
    int64_t v = parse_relational(live);
    while (!failed_) {
      if (accept("==")) {
        v = (v == parse_relational(live)) ? 1 : 0;
      } else if (accept("!=")) {
        v = (v != parse_relational(live)) ? 1 : 0;
      } else {
        break;
      }
    }
    return v;
  }

  int64_t parse_relational(bool live) {
    int64_t v = parse_additive(live);
    while (!failed_) {
      if (accept("<=")) {
        v = (v <= parse_additive(live)) ? 1 : 0;
      } else if (accept(">=")) {
        v = (v >= parse_additive(live)) ? 1 : 0;
      } else if (accept("<")) {
        v = (v < parse_additive(live)) ? 1 : 0;
      } else if (accept(">")) {
        v = (v > parse_additive(live)) ? 1 : 0;
      } else {
        break;
      }
    }
    return v;
  }

  int64_t parse_additive(bool live) {
    int64_t v = parse_multiplicative(live);
    while (!failed_) {
      char op;
      if (accept("+")) {
        op = '+';
      } else if (accept("-")) {
        op = '-';
      } else {
        break;
      }
      size_t at = pos_;
      int64_t r = parse_multiplicative(live);
      int64_t out = 0;
      bool overflow = op == '+' ? __builtin_add_overflow(v, r, &out) : __builtin_sub_overflow(v, r, &out);
      if (overflow && live) fail_at(at, "integer overflow");
      v = overflow ? 0 : out;
    }
    return v;
  }

  int64_t parse_multiplicative(bool live) {
    int64_t v = parse_unary(live);
    while (!failed_) {
      char op;
      if (accept("*")) {
        op = '*';
      } else if (accept("/")) {
        op = '/';
      } else if (accept("%")) {
        op = '%';
      } else {
        break;
      }
      size_t at = pos_;
      int64_t r = parse_unary(live);
      v = apply_multiplicative(op, v, r, live, at);
    }
    return v;
  }

  int64_t apply_multiplicative(char op, int64_t a, int64_t b, bool live, size_t at) {
    if (op == '*') {
      int64_t out = 0;
      if (!__builtin_mul_overflow(a, b, &out)) return out;
      if (live) fail_at(at, "integer overflow");
      return 0;
    }
    if (b == 0) {
      if (live) fail_at(at, op == '/' ? "division by zero" : "modulo by zero");
      return 0;
    }
    if (a == INT64_MIN && b == -1) {  // the one quotient that does not fit
      if (live) fail_at(at, "integer overflow");
      return 0;
    }
    return op == '/' ? a / b : a % b;
  }

  // Every nesting step (a unary operator or a parenthesis) passes through here once.
  int64_t parse_unary(bool live) {
    if (depth_ >= kMaxDepth) {
      fail("expression nested too deeply");
      return 0;
    }
    ++depth_;
    int64_t v = parse_unary_inner(live);
    --depth_;
    return v;
  }

  int64_t parse_unary_inner(bool live) {
    skip_space();
    if (text_.substr(pos_, 1) == "!" && text_.substr(pos_, 2) != "!=") {
      ++pos_;
      return parse_unary(live) == 0 ? 1 : 0;
    }
    if (accept("-")) {
      size_t at = pos_;
      int64_t v = parse_unary(live);
      if (v == INT64_MIN) {
        if (live) fail_at(at, "integer overflow");
        return 0;
      }
      return -v;
    }
    if (accept("+")) return parse_unary(live);
    return parse_primary(live);
  }

  int64_t parse_primary(bool live) {
    skip_space();
    if (pos_ >= text_.size()) {
      fail("unexpected end of expression");
      return 0;
    }
    char c = text_[pos_];
    if (c == '(') {
      ++pos_;
      int64_t v = parse_or(live);
      if (!failed_ && !accept(")")) fail("missing ')'");
      return v;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return parse_number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') return parse_identifier();
    fail("unexpected '" + std::string(1, c) + "'");
    return 0;
  }

  int64_t parse_number() {
    size_t start = pos_;
    int64_t v = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      int digit = text_[pos_] - '0';
      if (__builtin_mul_overflow(v, int64_t{10}, &v) || __builtin_add_overflow(v, int64_t{digit}, &v)) {
        fail_at(start, "integer literal out of range");
        return 0;
      }
      ++pos_;
    }
    return v;
  }

  // Unknown names are an error even on a skipped side of && / ||: they are typos.
  int64_t parse_identifier() {
    size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
      ++pos_;
    std::string_view name = text_.substr(start, pos_ - start);
    const int64_t* v = env_.find(name);
    if (v) return *v;
    fail_at(start, "unknown name '" + std::string(name) + "'");
    return 0;
  }

  void fail_at(size_t at, const std::string& why) {
    if (failed_) return;
    failed_ = true;
    fail_pos_ = at;
    message_ = why;
  }

  std::string_view text_;
  const ExprEnv& env_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool failed_ = false;
  size_t fail_pos_ = 0;
  std::string message_;
};

}  // namespace

bool eval_expr(std::string_view text, const ExprEnv& env, int64_t& value, std::string& error) {
  Evaluator ev(text, env);
  return ev.run(value, error);
}

}  // namespace ckpt
