// core/outcome.h: the one outcome -> exit code mapping.
#include "core/outcome.h"

#include <gtest/gtest.h>

namespace ckpt {
namespace {

TEST(Outcome, ExitCodesAreTheDocumentedOnes) {
  EXPECT_EQ(exit_code_for(Outcome::ok), 0);
  EXPECT_EQ(exit_code_for(Outcome::findings), 1);
  EXPECT_EQ(exit_code_for(Outcome::usage), 2);
  EXPECT_EQ(exit_code_for(Outcome::io), 3);
  EXPECT_EQ(exit_code_for(Outcome::no_device), 4);
  EXPECT_STREQ(outcome_name(Outcome::findings), "input_error");
  EXPECT_EQ(worse(Outcome::findings, Outcome::io), Outcome::io);
  EXPECT_EQ(worse(Outcome::ok, Outcome::findings), Outcome::findings);
}

TEST(Outcome, FindingsMapToTheirOutcome) {
  Findings f;
  EXPECT_EQ(outcome_of(f), Outcome::ok);
  f.warning("W", "", "", std::nullopt, "w");
  EXPECT_EQ(outcome_of(f), Outcome::ok);
  f.error("ST_X", "", "", std::nullopt, "e");
  EXPECT_EQ(outcome_of(f), Outcome::findings);
  f.error("IO_READ", "", "", std::nullopt, "e");
  EXPECT_EQ(outcome_of(f), Outcome::io);
}

}  // namespace
}  // namespace ckpt
