#include "profiles/expr.h"

#include <gtest/gtest.h>

namespace ckpt {
namespace {

ExprEnv sample_env() {
  ExprEnv env;
  env.set("D", 4096);
  env.set("H", 64);
  env.set("hd", 512);
  env.set("g", 8);
  env.set("zero", 0);
  env.set("big", INT64_MAX);
  env.set("small", INT64_MIN);
  return env;
}

struct Good {
  const char* text;
  int64_t value;
};

TEST(Expr, EvaluatesProfileExpressions) {
  const Good cases[] = {
      {"D", 4096},           {"H * hd / g", 4096},      {"(2 + 4) * 4", 24},     {"2 + 4 * 4", 18},
      {"D + 256", 4352},     {"10 - 3 - 2", 5},          {"17 % 5", 2},           {"-7 / 2", -3},
      {"-(3)", -3},          {"+3", 3},                  {"!0", 1},               {"!!D", 1},
      {"4 == 4", 1},         {"4 != 4", 0},              {"3 < 4", 1},            {"4 <= 4", 1},
      {"5 > 4", 1},          {"3 >= 4", 0},              {"1 && 0", 0},           {"1 || 0", 1},
      {"(hd == 512) + 1", 2}, {"!zero && D > 1", 1},     {"zero || H == 64", 1},  {"  D   ", 4096},
      {"1 < 2 == 1", 1},     {"0 && D / zero", 0},       {"1 || D % zero", 1},   {"small + 1 < 0", 1},
  };
  ExprEnv env = sample_env();
  for (const auto& c : cases) {
    int64_t v = -999;
    std::string err;
    EXPECT_TRUE(eval_expr(c.text, env, v, err)) << c.text << ": " << err;
    EXPECT_EQ(v, c.value) << c.text;
  }
}

TEST(Expr, ReportsErrorsWithoutUndefinedBehaviour) {
  const char* bad[] = {
      "D / zero", "D % zero", "big + 1", "small - 1", "big * 2", "small / -1", "small % -1", "-small",
      "99999999999999999999", "unknown", "D +", "(D", "D)", "", "D D", "3 $ 4", "a.b", "!= 3",
      "0 && nosuch",  // unknown names are errors even where short-circuit skips the value
      "D | 1", "D & 1",
  };
  ExprEnv env = sample_env();
  for (const char* text : bad) {
    int64_t v = 0;
    std::string err;
    EXPECT_FALSE(eval_expr(text, env, v, err)) << text << " gave " << v;
    EXPECT_FALSE(err.empty()) << text;
  }
}

TEST(Expr, ErrorNamesTheProblem) {
  ExprEnv env = sample_env();
  int64_t v = 0;
  std::string err;
  ASSERT_FALSE(eval_expr("D / zero", env, v, err));
  EXPECT_NE(err.find("division by zero"), std::string::npos) << err;
  ASSERT_FALSE(eval_expr("H * nope", env, v, err));
  EXPECT_NE(err.find("unknown name 'nope'"), std::string::npos) << err;
}

TEST(Expr, DeepNestingIsAnErrorNotAStackOverflow) {
  ExprEnv env = sample_env();
  int64_t v = 0;
  std::string err;
  std::string deep = std::string(100000, '(') + "1" + std::string(100000, ')');
  EXPECT_FALSE(eval_expr(deep, env, v, err));
  EXPECT_FALSE(eval_expr(std::string(100000, '!') + "1", env, v, err));
  EXPECT_FALSE(eval_expr(std::string(100000, '-') + "1", env, v, err));
  std::string ok = std::string(20, '(') + "D" + std::string(20, ')');
  EXPECT_TRUE(eval_expr(ok, env, v, err)) << err;
  EXPECT_EQ(v, 4096);
}

}  // namespace
}  // namespace ckpt
