// A ckpt process the test controls: started with posix_spawn (its pid known), frozen at a
// kill point by CKPT_TEST_STOP_AT=N (SIGSTOP), then continued, signalled or waited for.
// For the lock and signal tests, which act on a run while it is inside its work.
#pragma once

#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "test_util.h"

extern char** environ;

namespace ckpt::test {

class ChildCkpt {
 public:
  // `env`: "NAME=value" entries added to this process's environment; stdout and stderr go
  // to files under `dir`.
  ChildCkpt(const std::vector<std::string>& env, const std::vector<std::string>& args, const std::string& dir)
      : out_(dir + "/child.out"), err_(dir + "/child.err") {
    std::vector<std::string> argv_s{tool_binary("ckpt")};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv, envp;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s(env);
    for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    // Default dispositions and no blocked signals, whatever the test runner inherited
    // (a signal ignored by the parent stays ignored in ckpt, by design).
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t defaults, none;
    sigemptyset(&defaults);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&defaults, s);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    if (posix_spawn(&pid_, argv[0], &actions, &attr, argv.data(), envp.data()) != 0) pid_ = -1;
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~ChildCkpt() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // True once the child has stopped itself (CKPT_TEST_STOP_AT); false when it ended instead.
  bool wait_until_stopped() {
    int status = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &status, WUNTRACED) != pid_) return false;
    if (WIFSTOPPED(status)) return true;
    reaped_ = true;
    status_ = status;
    return false;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  // Continues the child and waits for its end: the exit code, or 128 + the signal (as a shell).
  int finish() {
    if (!reaped_) {
      ::kill(pid_, SIGCONT);
      ::waitpid(pid_, &status_, 0);
      reaped_ = true;
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }
  bool died_of(int sig) const { return reaped_ && WIFSIGNALED(status_) && WTERMSIG(status_) == sig; }
  std::string err() const { return read_text(err_); }

 private:
  std::string out_, err_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

}  // namespace ckpt::test
