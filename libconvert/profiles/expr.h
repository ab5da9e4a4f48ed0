// A tiny, safe integer expression evaluator for model profiles.
//
// Profiles (schemas/profiles/*.json) state tensor shapes and conditions as small
// expressions over names taken from config.json ("H * hd / g", "ratio == 4 && !hash").
// The grammar is C-like: integer literals, identifiers, parentheses, unary ! - +,
// * / %, + -, < <= > >=, == !=, && ||. Comparisons and logic yield 0 or 1.
// Arithmetic is signed 64-bit and checked: overflow, division or modulo by zero, an
// unknown identifier or a syntax error is an error value, never undefined behaviour.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ckpt {

class ExprEnv {
 public:
  void set(std::string name, int64_t value) { vars_[std::move(name)] = value; }
  const int64_t* find(std::string_view name) const;
  bool has(std::string_view name) const { return find(name) != nullptr; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int64_t, Hash, std::equal_to<>> vars_;
};

// Evaluates `text` in `env`. On failure returns false and sets `error` to a sentence
// naming the problem and its position, e.g. "division by zero at offset 4 in 'D / g'".
// && and || short-circuit: the skipped side must parse but is not evaluated.
bool eval_expr(std::string_view text, const ExprEnv& env, int64_t& value, std::string& error);

}  // namespace ckpt
